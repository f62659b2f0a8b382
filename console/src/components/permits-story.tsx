/**
 * A permit's story: the permit as it stands now, then its proof chain as an ordered list, one
 * step per audit event the proof gives (GET /v1/permits/:id/proof), in the order things happen:
 * the decision, the permit issued, a revocation if any, each verification, each execution the
 * proxy observed, each effect reported. A stage with no record says so and why that may be. Each
 * step names its audit event's sequence and hash, and whether the last checkpoint covers it.
 */
import { factLabel, factValue } from '../format';
import type { AuditEventWire, PermitProof, PermitWire } from '../permits-api';
import { Hash, Row, When } from './parts';
import { kindOf, MissingStep, StoryStep, type StepKind } from './permits-step';

/** The stages in story order; `missing` is what a stage without a record says (null: nothing). */
const STAGES: ReadonlyArray<{ kind: StepKind; title: string; missing: string | null }> = [
  { kind: 'decision', title: 'Decision', missing: "No decision is recorded for this permit's evaluation." },
  { kind: 'permit', title: 'Permit issued', missing: 'No permit.issued event is recorded for this permit.' },
  { kind: 'revocation', title: 'Permit revoked', missing: null },
  {
    kind: 'verification',
    title: 'Verification',
    missing: 'No verification recorded yet: the permit has not been presented to a gate, or the gate’s records have not reached the audit log yet.',
  },
  {
    kind: 'execution',
    title: 'Execution observed',
    missing: 'No execution observed yet: a proxy records what the upstream did after it forwards a request (POST /v1/verify-permit records none).',
  },
  { kind: 'effect', title: 'Effect reported', missing: 'No effect reported yet: the protected system reports one with POST /v1/effects.' },
  { kind: 'other', title: 'Other events', missing: null },
];

const STATUS_WORDS: Readonly<Record<PermitWire['status'], string>> = {
  issued: 'Issued, not used yet',
  consumed: 'Used',
  revoked: 'Revoked',
  expired: 'Expired unused',
};

/** The events of each stage, each stage in sequence order. */
export function stagesOf(events: AuditEventWire[]): Array<{ kind: StepKind; title: string; missing: string | null; events: AuditEventWire[] }> {
  const sorted = [...events].sort((a, b) => a.sequence - b.sequence);
  return STAGES.map((stage) => ({ ...stage, events: sorted.filter((event) => kindOf(event) === stage.kind) }));
}

function PermitFacts({ permit }: { permit: PermitWire }) {
  const facts = Object.entries(permit.bound_facts);
  return (
    <dl class="facts" data-testid="permit-facts">
      <Row label="Status">
        <span class={`badge permit-badge-${permit.status}`} data-testid="permit-status" data-status={permit.status}>
          {STATUS_WORDS[permit.status]}
        </span>
      </Row>
      <Row label="Action">{permit.action_type}</Row>
      <Row label="Actor">{permit.actor_id}</Row>
      <Row label="Issued">
        <When at={permit.issued_at} />
      </Row>
      <Row label="Expires">
        <When at={permit.expires_at} />
      </Row>
      {permit.consumed_at !== null && (
        <Row label="Used">
          <When at={permit.consumed_at} />
        </Row>
      )}
      {permit.revoked_at !== null && (
        <Row label="Revoked">
          <When at={permit.revoked_at} />
          {permit.revoked_by !== null && ` by ${permit.revoked_by}`}
          {permit.revocation_reason !== null && `: ${permit.revocation_reason}`}
        </Row>
      )}
      {facts.length > 0 && (
        <Row label="Bound facts">
          <ul class="bound-facts">
            {facts.map(([name, value]) => (
              <li key={name}>
                {factLabel(name)}: {factValue(name, value)}
              </li>
            ))}
          </ul>
        </Row>
      )}
      <Row label="Evaluation">
        <Hash value={permit.evaluation_id} testId="permit-evaluation" />
      </Row>
      <Row label="Request">
        <Hash value={permit.request_id} />
      </Row>
      <Row label="Binding hash">
        <Hash value={permit.binding_hash} />
      </Row>
      <Row label="Signing key">
        <Hash value={permit.kid} />
      </Row>
    </dl>
  );
}

export function PermitStory({ proof }: { proof: PermitProof }) {
  const { permit, checkpoint } = proof;
  const stages = stagesOf(proof.events);
  return (
    <section aria-labelledby="story-heading" class="story-section" data-testid="permit-story" data-permit={permit.id}>
      <h2 id="story-heading">
        The story of permit <span class="hash">{permit.id}</span>
      </h2>
      <PermitFacts permit={permit} />
      <h3>Proof chain</h3>
      <p class="muted">
        Each step is an event in the organization’s audit chain, with its sequence and its hash. The chain’s own verification is below.
        {checkpoint === null ? ' No checkpoint has been signed yet.' : ` The last signed checkpoint is at sequence ${checkpoint.sequence}.`}
      </p>
      <ol class="story" data-testid="story">
        {stages.flatMap((stage) =>
          stage.events.length > 0
            ? stage.events.map((event) => <StoryStep key={event.id} event={event} checkpoint={checkpoint} />)
            : stage.missing === null
              ? []
              : [
                  <MissingStep key={`missing-${stage.kind}`} kind={stage.kind} title={stage.title}>
                    {stage.missing}
                  </MissingStep>,
                ],
        )}
      </ol>
    </section>
  );
}
