/**
 * Every stored version the API lists (at most the 100 newest), newest first, the current one
 * marked in words.
 */
import type { SignedInSession } from '../api';
import { formatDateTime } from '../format';
import type { PolicyVersionEntry } from '../policies-api';
import { Identity } from './identity';

/** The most versions GET /v1/policies lists (authority/policy/versions.ts). */
const LISTED = 100;

export function PolicyVersions({ versions, current, session }: { versions: PolicyVersionEntry[]; current: number | null; session: Pick<SignedInSession, 'identity'> }) {
  if (versions.length === 0) return <p>No version has been stored yet.</p>;
  return (
    <>
      <ul class="versions">
        {versions.map((entry) => (
          <li key={entry.id} class="version" data-testid="policy-version" data-version={entry.version}>
            <span class="version-name">
              Version {entry.version}
              {entry.version === current && (
                <>
                  {' '}
                  <span class="badge badge-current">current</span>
                </>
              )}
            </span>
            <span class="muted">
              {' '}
              stored by{' '}
              <span class="who-stored">
                <Identity identity={entry.created_by} session={session} />
              </span>{' '}
              on <time dateTime={entry.created_at}>{formatDateTime(entry.created_at)}</time>
            </span>
          </li>
        ))}
      </ul>
      {versions.length >= LISTED && <p class="muted">The {LISTED} newest versions are listed; older ones are kept but not listed here.</p>}
    </>
  );
}
