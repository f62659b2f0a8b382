/**
 * Writing evaluations: the evaluation rows, their permits and their audit events, for one or
 * many evaluations in the caller's transaction (group commit hands it a batch). Multi-row
 * inserts and one chain append for all organizations keep a batch to a handful of statements.
 */
import { appendAuditEvents } from '../audit/chain.js';
import type { NewAuditEvent } from '../audit/types.js';
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

function placeholders(rows: number, columns: number): string {
  return Array.from({ length: rows }, (_, row) => `(${Array.from({ length: columns }, (_, column) => `$${row * columns + column + 1}`).join(', ')})`).join(', ');
}

/** Rows in (organization, request_id) order: see storeEvaluations. */
function byRequest(a: EvaluationWrite, b: EvaluationWrite): number {
  const x = a.evaluation;
  const y = b.evaluation;
  return x.orgId < y.orgId ? -1 : x.orgId > y.orgId ? 1 : x.requestId < y.requestId ? -1 : x.requestId > y.requestId ? 1 : 0;
}

export async function storeEvaluations(tx: Queryable, writes: EvaluationWrite[]): Promise<EvaluationOutcome[]> {
  // Two transactions inserting the same request_ids wait for each other's rows; inserting them in
  // one order everywhere makes that a wait, never a deadlock.
  const ordered = writes.length > 1 ? [...writes].sort(byRequest) : writes;
  const inserted = new Set(
    (
      await tx.query<{ id: string }>(
        `INSERT INTO evaluations (id, org_id, request_id, request_fingerprint, action_type, actor_id, decision, mode,
           risk_score, binding_hash, policy_version, response, credential, created_at)
         VALUES ${placeholders(writes.length, 14)}
         ON CONFLICT (org_id, request_id) DO NOTHING RETURNING id`,
        ordered.flatMap(({ evaluation: e }) => [
          e.id, e.orgId, e.requestId, e.fingerprint, e.actionType, e.actorId, e.decision, e.mode,
          e.riskScore, e.bindingHash, e.policyVersion, e.response, e.credential, e.createdAt,
        ]),
      )
    ).map((row) => row.id),
  );
  const stored = writes.filter((write) => inserted.has(write.evaluation.id));

  const permits = stored.flatMap((write) => (write.permit ? [write.permit] : []));
  if (permits.length > 0) {
    await tx.query(
      `INSERT INTO permits (id, org_id, evaluation_id, request_id, action_type, actor_id, binding_hash, bound_facts, kid, status, issued_at, expires_at)
       VALUES ${placeholders(permits.length, 12)}`,
      permits.flatMap((p) => [p.id, p.orgId, p.evaluationId, p.requestId, p.actionType, p.actorId, p.bindingHash, p.boundFacts, p.kid, 'issued', p.issuedAt, p.expiresAt]),
    );
  }

  // Last, as the chain asks: its head locks are held until commit.
  const recordedAt = new Date(Math.max(...writes.map((write) => write.evaluation.createdAt.getTime())));
  await appendAuditEvents(tx, stored.flatMap((write) => write.events), recordedAt);

  return writes.map((write) => (inserted.has(write.evaluation.id) ? 'stored' : 'duplicate'));
}
