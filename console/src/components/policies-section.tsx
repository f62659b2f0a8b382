/**
 * The policy: the current version (who stored it, when, its text), every version the API lists,
 * a draft to validate, and a line diff between the current text and the draft. Needs
 * policy:read or policy:write; validating needs policy:write.
 *
 * The diff compares any two stored versions, or one with the draft; an older version's text is
 * read when it is first compared.
 */
import { useEffect, useRef, useState } from 'preact/hooks';
import { isAbort, type SignedInSession } from '../api';
import { getPolicy, type PolicyFormat, type PolicyState } from '../policies-api';
import { PolicyCurrent } from './policies-current';
import { PolicyCompare } from './policies-diff';
import { PolicyDraft } from './policies-draft';
import { messageOf, MissingPermission } from './parts';
import { PolicyVersions } from './policies-versions';

type Load = { state: 'loading' } | { state: 'failed'; message: string } | { state: 'ready'; data: PolicyState };

export function PolicySection({ session }: { session: SignedInSession }) {
  const canWrite = session.permissions.includes('policy:write');
  const canRead = canWrite || session.permissions.includes('policy:read');
  const [load, setLoad] = useState<Load>({ state: 'loading' });
  const [draft, setDraft] = useState('');
  const [format, setFormat] = useState<PolicyFormat>('yaml');
  const drafted = useRef(false);

  const refresh = async (signal?: AbortSignal): Promise<void> => {
    setLoad({ state: 'loading' });
    try {
      const data = await getPolicy(signal);
      if (signal?.aborted) return;
      // The first answer fills the draft; later ones never overwrite what the person wrote.
      if (!drafted.current && data.policy !== null) {
        setDraft(data.policy.source);
        setFormat(data.policy.format);
      }
      drafted.current = true;
      setLoad({ state: 'ready', data });
    } catch (error) {
      if (isAbort(error) || signal?.aborted) return;
      setLoad({ state: 'failed', message: messageOf(error) });
    }
  };

  useEffect(() => {
    if (!canRead) return;
    const controller = new AbortController();
    void refresh(controller.signal);
    return () => controller.abort();
  }, [canRead]);

  const policy = load.state === 'ready' ? load.data.policy : null;
  const versions = load.state === 'ready' ? load.data.versions : [];
  return (
    <section aria-labelledby="policy-heading" data-testid="policy-section">
      <h2 id="policy-heading">Policy</h2>
      {!canRead && <MissingPermission what="Seeing the policy" needs={<><code>policy:read</code> or <code>policy:write</code></>} testId="policy-permission" />}
      {canRead && load.state === 'loading' && <p role="status">Loading the policy…</p>}
      {canRead && load.state === 'failed' && (
        <div role="alert" class="alert">
          <p data-testid="policy-error">The policy could not be loaded: {load.message}</p>
          <button type="button" class="button secondary" onClick={() => void refresh()}>
            Try again
          </button>
        </div>
      )}
      {load.state === 'ready' && (
        <>
          <h3>Current version</h3>
          {policy === null ? <p data-testid="policy-none">This organization has no policy yet: every evaluation is denied until one is stored.</p> : <PolicyCurrent policy={policy} session={session} />}
          <h3>Versions</h3>
          <PolicyVersions versions={versions} current={policy?.version ?? null} session={session} />
          <h3>Draft</h3>
          <PolicyDraft
            draft={draft}
            format={format}
            onDraft={setDraft}
            onFormat={setFormat}
            current={policy === null ? null : { source: policy.source, format: policy.format, version: policy.version }}
            canValidate={canWrite}
          />
          {policy !== null && (
            <>
              <h3>Changes</h3>
              <PolicyCompare policy={policy} versions={versions} draft={draft} />
            </>
          )}
        </>
      )}
    </section>
  );
}
