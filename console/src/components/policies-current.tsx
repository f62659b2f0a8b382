/**
 * The policy deciding now: its version, who stored it and when, its format, and its text, in a
 * box of its own that scrolls sideways (a policy's long lines never widen the page).
 */
import type { SignedInSession } from '../api';
import { formatDateTime } from '../format';
import type { PolicyWire } from '../policies-api';
import { Identity } from './identity';
import { CodeBox, Row } from './parts';

export function PolicyCurrent({ policy, session }: { policy: PolicyWire; session: Pick<SignedInSession, 'identity'> }) {
  return (
    <>
      <dl class="facts">
        <Row label="Version">
          <span data-testid="policy-current-version">{policy.version}</span>
        </Row>
        <Row label="Stored by">
          <span data-testid="policy-created-by">
            <Identity identity={policy.created_by} session={session} />
          </span>
        </Row>
        <Row label="Stored at">
          <time dateTime={policy.created_at}>{formatDateTime(policy.created_at)}</time>
        </Row>
        <Row label="Format">{policy.format === 'yaml' ? 'YAML' : 'JSON'}</Row>
      </dl>
      <CodeBox label={`The text of policy version ${policy.version}`} testId="policy-source-box">
        <pre class="code" data-testid="policy-source">
          {policy.source}
        </pre>
      </CodeBox>
    </>
  );
}
