/**
 * Loads the story the query string names. A permit id: its proof (permits:read or audit:read).
 * An evaluation id: its `evaluation.decided` event (audit:read), then the proof of the permit it
 * issued, or, when it issued none, its decision and why no permit came of it.
 */
import { useEffect, useState } from 'preact/hooks';
import { isAbort, type SignedInSession } from '../api';
import { getEvaluation, getPermitProof, permitIdOf, type AuditEventWire, type PermitProof, type StoryTarget } from '../permits-api';
import { Hash, messageOf, MissingPermission } from './parts';
import { decisionLabel, StoryStep } from './permits-step';
import { PermitStory } from './permits-story';

type Load =
  | { state: 'loading' }
  | { state: 'failed'; message: string }
  | { state: 'no-evaluation' }
  | { state: 'no-permit'; evaluation: AuditEventWire }
  | { state: 'ready'; proof: PermitProof; evaluation: AuditEventWire | null };

/** Why an evaluation issued no permit, from what it recorded (authority/evaluate/evaluate.ts). */
function whyNoPermit(evaluation: AuditEventWire): string {
  const mode = evaluation.payload.details['mode'];
  if (evaluation.decision !== 'allow') {
    const then = evaluation.decision === 'hold' || evaluation.decision === 'escalate' ? ' Once approved, a fresh evaluation of the same action issues one.' : '';
    return `It decided “${decisionLabel(evaluation.decision)}”, and only an allow issues a permit.${then}`;
  }
  if (mode === 'shadow') return 'It was a shadow evaluation: recorded, never acted on, so it issued no permit.';
  return 'It allowed the action without a permit: the policy’s action class does not require one.';
}

export function PermitsSection({ session, target }: { session: SignedInSession; target: StoryTarget }) {
  const canAudit = session.permissions.includes('audit:read');
  const canProof = canAudit || session.permissions.includes('permits:read');
  const [load, setLoad] = useState<Load>({ state: 'loading' });

  const run = async (signal: AbortSignal): Promise<void> => {
    setLoad({ state: 'loading' });
    try {
      if (target.kind === 'permit') {
        const proof = await getPermitProof(target.id, signal);
        if (!signal.aborted) setLoad({ state: 'ready', proof, evaluation: null });
        return;
      }
      const evaluation = await getEvaluation(target.id, signal);
      if (signal.aborted) return;
      if (evaluation === null) return setLoad({ state: 'no-evaluation' });
      const permitId = permitIdOf(evaluation);
      if (permitId === null) return setLoad({ state: 'no-permit', evaluation });
      const proof = await getPermitProof(permitId, signal);
      if (!signal.aborted) setLoad({ state: 'ready', proof, evaluation });
    } catch (error) {
      if (isAbort(error) || signal.aborted) return;
      setLoad({ state: 'failed', message: messageOf(error) });
    }
  };

  const allowed = target.kind === 'permit' ? canProof : canAudit;
  const [attempt, setAttempt] = useState(0);
  useEffect(() => {
    if (!allowed) return;
    const controller = new AbortController();
    void run(controller.signal);
    return () => controller.abort();
  }, [target.kind, target.id, allowed, attempt]);

  if (!allowed) {
    return target.kind === 'permit' ? (
      <MissingPermission what="A permit’s story" needs={<><code>permits:read</code> or <code>audit:read</code></>} testId="story-permission" />
    ) : (
      <MissingPermission what="Finding an evaluation and its permit" needs={<code>audit:read</code>} testId="story-permission" />
    );
  }
  const what = target.kind === 'permit' ? 'permit' : 'evaluation';
  switch (load.state) {
    case 'loading':
      return <p role="status">Loading the {what}…</p>;
    case 'failed':
      return (
        <div role="alert" class="alert">
          <p data-testid="story-error">
            The {what} <span class="hash">{target.id}</span> could not be shown: {load.message}
          </p>
          <button type="button" class="button secondary" onClick={() => setAttempt((count) => count + 1)}>
            Try again
          </button>
        </div>
      );
    case 'no-evaluation':
      return (
        <p role="alert" class="alert" data-testid="story-error">
          No evaluation <span class="hash">{target.id}</span> is recorded in the audit log of {session.organization.name}.
        </p>
      );
    case 'no-permit':
      return (
        <section aria-labelledby="evaluation-heading" class="story-section" data-testid="evaluation-story">
          <h2 id="evaluation-heading">
            Evaluation <span class="hash">{target.id}</span>
          </h2>
          <p class="notice" data-testid="evaluation-no-permit">
            This evaluation issued no permit. {whyNoPermit(load.evaluation)}
          </p>
          <h3>The decision</h3>
          <ol class="story" data-testid="story">
            <StoryStep event={load.evaluation} />
          </ol>
        </section>
      );
    case 'ready':
      return (
        <>
          {load.evaluation !== null && (
            <p class="notice" data-testid="evaluation-permit">
              Evaluation <Hash value={load.evaluation.resource_id ?? target.id} /> decided “{decisionLabel(load.evaluation.decision)}” and issued permit{' '}
              <Hash value={load.proof.permit.id} />.
            </p>
          )}
          <PermitStory proof={load.proof} />
        </>
      );
  }
}
