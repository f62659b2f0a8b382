/**
 * The audit chain's status (GET /v1/audit/status, audit:read): its head, its last signed
 * checkpoint, and a verification of a range done as `countersign audit verify` does it (hashes
 * recomputed, links, the export's signature, the checkpoint where the range reaches it), said in
 * words, with every problem the server lists. "Verify again" asks once more, for the range in the
 * form (empty: the newest events up to the head); the range goes in the query string.
 */
import { useEffect, useState } from 'preact/hooks';
import { isAbort, type SignedInSession } from '../api';
import { formatClock } from '../format';
import { getAuditStatus, type AuditStatusResponse, type SequenceRange } from '../permits-api';
import { AuditExport } from './audit-export';
import { Hash, messageOf, MissingPermission, plural, Row, When } from './parts';

type Load = { state: 'loading' } | { state: 'failed'; message: string } | { state: 'ready'; status: AuditStatusResponse; at: number };

const CHECKPOINT_WORDS: Readonly<Record<AuditStatusResponse['verification']['checkpoint'], string>> = {
  matched: 'The range reaches the last checkpoint and agrees with it.',
  not_covered: 'The range ends before the last checkpoint, so it was not compared with it.',
  none: 'There is no signed checkpoint to compare it with yet.',
  failed: 'The range does not agree with the last signed checkpoint.',
};

function Verification({ verification }: { verification: AuditStatusResponse['verification'] }) {
  const { ok, from_sequence: from, to_sequence: to, events, checkpoint, problems } = verification;
  const range = from === null || to === null ? 'no events' : `sequences ${from} to ${to} (${plural(events, 'event', 'events')})`;
  return (
    <div data-testid="audit-verification" data-ok={String(ok)} data-checkpoint={checkpoint}>
      {ok ? (
        <p class="outcome">
          OK: {events === 0 ? 'the audit log is empty, so there is nothing to verify.' : `${range} verified: every hash, every link and the signature check out.`}
        </p>
      ) : (
        <div class="blocked">
          <p>
            <strong>Not OK:</strong> {plural(problems.length, 'problem', 'problems')} in {range}.
          </p>
        </div>
      )}
      <p data-testid="audit-checkpoint-result">Checkpoint: {CHECKPOINT_WORDS[checkpoint]}</p>
      {problems.length > 0 && (
        <ul class="audit-problems">
          {problems.map((problem, index) => (
            <li key={index} data-testid="audit-problem" data-kind={problem.kind}>
              <strong>{problem.kind}</strong>
              {problem.sequence !== null && ` at sequence ${problem.sequence}`}: {problem.message}
            </li>
          ))}
        </ul>
      )}
    </div>
  );
}

const sequenceText = (value: number | null): string => (value === null ? '' : String(value));

/** A whole number from 1 up, or null for an empty field; undefined when it is neither. */
function sequenceOf(text: string): number | null | undefined {
  const trimmed = text.trim();
  if (trimmed === '') return null;
  return /^\d+$/.test(trimmed) && Number(trimmed) >= 1 && Number.isSafeInteger(Number(trimmed)) ? Number(trimmed) : undefined;
}

interface Props {
  session: SignedInSession;
  range: SequenceRange;
  onRange: (range: SequenceRange) => void;
}

export function AuditSection({ session, range, onRange }: Props) {
  const canAudit = session.permissions.includes('audit:read');
  const [load, setLoad] = useState<Load>({ state: 'loading' });
  const [checking, setChecking] = useState(false);
  const [attempt, setAttempt] = useState(0);
  const [from, setFrom] = useState(sequenceText(range.from));
  const [to, setTo] = useState(sequenceText(range.to));
  const [problem, setProblem] = useState<string | null>(null);

  useEffect(() => {
    setFrom(sequenceText(range.from));
    setTo(sequenceText(range.to));
  }, [range.from, range.to]);

  useEffect(() => {
    if (!canAudit) return;
    const controller = new AbortController();
    setChecking(true);
    getAuditStatus(range, controller.signal).then(
      (status) => {
        if (controller.signal.aborted) return;
        setLoad({ state: 'ready', status, at: Date.now() });
        setChecking(false);
      },
      (error: unknown) => {
        if (isAbort(error) || controller.signal.aborted) return;
        setLoad({ state: 'failed', message: messageOf(error) });
        setChecking(false);
      },
    );
    return () => controller.abort();
  }, [canAudit, range.from, range.to, attempt]);

  const onSubmit = (event: Event): void => {
    event.preventDefault();
    const next = { from: sequenceOf(from), to: sequenceOf(to) };
    if (next.from === undefined || next.to === undefined) {
      setProblem('A sequence is a whole number from 1 up; leave a field empty for the default.');
      return;
    }
    if (next.from !== null && next.to !== null && next.to < next.from) {
      setProblem('“To sequence” cannot be below “From sequence”.');
      return;
    }
    setProblem(null);
    if (next.from === range.from && next.to === range.to) setAttempt((count) => count + 1);
    else onRange({ from: next.from, to: next.to });
  };

  return (
    <section aria-labelledby="audit-heading" class="audit-section" data-testid="audit-status">
      <h2 id="audit-heading">The audit chain</h2>
      {!canAudit && <MissingPermission what="The audit chain’s status and exports" needs={<code>audit:read</code>} testId="audit-permission" />}
      {canAudit && (
        <>
          <p>Every decision, permit, verification, execution and effect of {session.organization.name} is an event in one hash chain, signed at checkpoints.</p>
          {load.state === 'loading' && <p role="status">Verifying the audit chain…</p>}
          {load.state === 'failed' && (
            <div role="alert" class="alert">
              <p data-testid="audit-error">The audit chain’s status could not be read: {load.message}</p>
            </div>
          )}
          {load.state === 'ready' && (
            <>
              <h3>Head</h3>
              {load.status.head === null ? (
                <p data-testid="audit-head">No event has been recorded yet.</p>
              ) : (
                <dl class="facts" data-testid="audit-head">
                  <Row label="Sequence" testId="audit-head-sequence">
                    {load.status.head.sequence}
                  </Row>
                  <Row label="Hash">
                    <Hash value={load.status.head.hash} testId="audit-head-hash" />
                  </Row>
                  <Row label="Recorded">
                    <When at={load.status.head.occurred_at} />
                  </Row>
                </dl>
              )}
              <h3>Last checkpoint</h3>
              {load.status.last_checkpoint === null ? (
                <p data-testid="audit-last-checkpoint">No checkpoint has been signed yet; the authority signs one every few minutes while events arrive.</p>
              ) : (
                <dl class="facts" data-testid="audit-last-checkpoint">
                  <Row label="Sequence" testId="audit-checkpoint-sequence">
                    {load.status.last_checkpoint.sequence}
                  </Row>
                  <Row label="Signed">
                    <When at={load.status.last_checkpoint.signed_at} />
                  </Row>
                  <Row label="Key">
                    <Hash value={load.status.last_checkpoint.signing_key_id} />
                  </Row>
                  <Row label="Head hash">
                    <Hash value={load.status.last_checkpoint.head_hash} />
                  </Row>
                </dl>
              )}
              <h3>Verification</h3>
              <Verification verification={load.status.verification} />
              <p class="muted" data-testid="audit-checked-at">
                Checked at {formatClock(load.at)}.
              </p>
            </>
          )}
          <form class="audit-range" onSubmit={onSubmit}>
            <p class="hint" id="audit-range-hint">
              Leave both empty to verify the newest events up to the head (at most 10,000).
            </p>
            <div class="range-fields">
              <div>
                <label for="audit-from">From sequence</label>
                <input id="audit-from" name="from_sequence" type="text" inputMode="numeric" autocomplete="off" aria-describedby="audit-range-hint" value={from} onInput={(event) => setFrom(event.currentTarget.value)} />
              </div>
              <div>
                <label for="audit-to">To sequence</label>
                <input id="audit-to" name="to_sequence" type="text" inputMode="numeric" autocomplete="off" aria-describedby="audit-range-hint" value={to} onInput={(event) => setTo(event.currentTarget.value)} />
              </div>
            </div>
            <div class="actions">
              <button type="submit" class="button secondary" disabled={checking} data-testid="verify-again">
                {checking ? 'Verifying…' : 'Verify again'}
              </button>
            </div>
            {problem !== null && (
              <p role="alert" class="error">
                {problem}
              </p>
            )}
          </form>
          {load.state === 'ready' && (
            <AuditExport
              orgId={session.organization.id}
              range={{ from: load.status.verification.from_sequence, to: load.status.verification.to_sequence }}
              checkpoint={load.status.last_checkpoint}
            />
          )}
        </>
      )}
    </section>
  );
}
