/**
 * Approval requests nobody decided in time. Every reader already sees a pending request past its
 * `expires_at` as `expired` (effectiveStatus); this sweep stores that status and records the
 * timeout as an `approval.resolved` audit event (`status: "expired"`, actor `system`), so the
 * chain holds every approval's end and webhooks hear of it.
 *
 * Several replicas may sweep at once: the due rows are locked with SKIP LOCKED, and an expired
 * request is not due any more.
 *
 * @example
 *   const { expired } = await expireDueApprovalRequests(db, clock, { limit: 200 });
 *   const sweeper = startApprovalExpirySweeper({ db, clock }, { intervalMs: 5_000, logger });
 *   await sweeper.stop();
 */
import { appendAuditEvents } from '../audit/chain.js';
import type { NewAuditEvent } from '../audit/types.js';
import { runEvery, type PeriodicTask } from '../periodic.js';
import type { Db } from '../store/db.js';
import type { Clock } from '../time.js';

interface DueRequest {
  id: string;
  org_id: string;
  evaluation_id: string;
  request_id: string;
  binding_hash: string;
  expires_at: Date;
}

/** Requests expired per run; a larger backlog continues on the next tick. */
const DEFAULT_BATCH = 200;

/** Stores `expired` for up to `limit` due requests and audits each, in one transaction. */
export async function expireDueApprovalRequests(db: Db, clock: Clock, options: { limit?: number } = {}): Promise<{ expired: number }> {
  return db.transaction(async (tx) => {
    const now = new Date(clock.now());
    const due = await tx.query<DueRequest>(
      `SELECT id, org_id, evaluation_id, request_id, binding_hash, expires_at FROM approval_requests
       WHERE status = 'pending' AND expires_at <= $1 ORDER BY expires_at, id LIMIT $2 FOR UPDATE SKIP LOCKED`,
      [now, options.limit ?? DEFAULT_BATCH],
    );
    if (due.length === 0) return { expired: 0 };
    await tx.query(`UPDATE approval_requests SET status = 'expired', resolved_at = expires_at WHERE id = ANY($1::uuid[])`, [due.map((row) => row.id)]);
    const events: NewAuditEvent[] = due.map((row) => ({
      orgId: row.org_id,
      type: 'approval.resolved',
      actorId: 'system',
      decision: 'expired',
      resourceType: 'approval_request',
      resourceId: row.id,
      requestId: row.request_id,
      credential: 'system',
      occurredAt: now,
      details: {
        approval_request_id: row.id,
        evaluation_id: row.evaluation_id,
        status: 'expired',
        expired_at: row.expires_at.toISOString(),
        note: null,
        binding_hash: row.binding_hash,
      },
    }));
    await appendAuditEvents(tx, events, now);
    return { expired: due.length };
  });
}

export interface ExpirySweeperLogger {
  error(obj: unknown, msg: string): void;
}

/** Sweeps every `intervalMs` (see runEvery), logging failures: the next tick retries. */
export function startApprovalExpirySweeper(deps: { db: Db; clock: Clock }, options: { intervalMs: number; logger: ExpirySweeperLogger }): PeriodicTask {
  return runEvery(options.intervalMs, () =>
    expireDueApprovalRequests(deps.db, deps.clock).then(
      () => undefined,
      (error: unknown) => options.logger.error({ err: error }, 'recording approval expiries failed; retrying on the next tick'),
    ),
  );
}
