/**
 * Writing evaluations: the evaluation rows, their permits and their audit events, for one or
 * many evaluations (group commit hands it a batch), in one statement.
 */
import { randomUUID } from 'node:crypto';
import { splitPayload } from '../audit/chain.js';
import { GENESIS_HASH, type NewAuditEvent } from '../audit/types.js';
import type { NewPermit } from '../permits/permits.js';
import type { Queryable } from '../store/db.js';

export interface EvaluationRow {
  id: string;
  orgId: string;
  requestId: string;
  fingerprint: string;
  actionType: string;
  actorId: string;
  decision: string;
  mode: string;
  riskScore: number;
  bindingHash: string;
  policyVersion: number | null;
  response: object;
  credential: string;
  createdAt: Date;
}

export interface EvaluationWrite {
  evaluation: EvaluationRow;
  permit: NewPermit | null;
  events: NewAuditEvent[];
}

/** `duplicate`: the organization already has an evaluation with this request_id; nothing was written for it. */
export type EvaluationOutcome = 'stored' | 'duplicate';

/**
 * Writes a batch in ONE statement, `countersign_store_evaluations` (migration 0009): the rows in
 * (organization, request_id) order, so two batches with the same request_ids wait for each other
 * instead of deadlocking; the permits and events of the evaluations actually inserted; the events
 * appended to their chains under the head locks, in the order given. Outside a transaction it is
 * one round trip and its own transaction (group commit); inside one it is part of it.
 */
export async function storeEvaluations(db: Queryable, writes: EvaluationWrite[]): Promise<EvaluationOutcome[]> {
  const recordedAt = new Date(Math.max(...writes.map((write) => write.evaluation.createdAt.getTime())));
  const recordedIso = recordedAt.toISOString();
  const evaluations = writes.map(({ evaluation: e }) => ({
    id: e.id, org_id: e.orgId, request_id: e.requestId, request_fingerprint: e.fingerprint, action_type: e.actionType, actor_id: e.actorId,
    decision: e.decision, mode: e.mode, risk_score: e.riskScore, binding_hash: e.bindingHash, policy_version: e.policyVersion,
    response: e.response, credential: e.credential, created_at: e.createdAt.toISOString(),
  }));
  const permits = writes.flatMap(({ permit: p }) =>
    p
      ? [{
          id: p.id, org_id: p.orgId, evaluation_id: p.evaluationId, request_id: p.requestId, action_type: p.actionType, actor_id: p.actorId,
          binding_hash: p.bindingHash, bound_facts: p.boundFacts, kid: p.kid, issued_at: p.issuedAt.toISOString(), expires_at: p.expiresAt.toISOString(),
        }]
      : [],
  );
  const events = writes.flatMap(({ evaluation, events: own }) =>
    own.map((event) => {
      const id = randomUUID();
      const { before, after } = splitPayload(event, id, recordedIso);
      return {
        evaluation_id: evaluation.id, id, org_id: event.orgId, type: event.type, decision: event.decision, actor_id: event.actorId,
        resource_type: event.resourceType, resource_id: event.resourceId, request_id: event.requestId,
        text_before: before, text_after: after, occurred_at: event.occurredAt.toISOString(),
      };
    }),
  );
  const rows = await db.query<{ id: string }>('SELECT countersign_store_evaluations($1::jsonb, $2::jsonb, $3::jsonb, $4, $5) AS id', [
    JSON.stringify(evaluations),
    JSON.stringify(permits),
    JSON.stringify(events),
    recordedAt,
    GENESIS_HASH,
  ]);
  const inserted = new Set(rows.map((row) => row.id));
  return writes.map((write) => (inserted.has(write.evaluation.id) ? 'stored' : 'duplicate'));
}
