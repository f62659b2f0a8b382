/**
 * Reusing the approval of the same action (`reuse_approvals` on evaluate), for callers that
 * cannot carry an approval id from one evaluation to the next (the MCP gate's unmodified
 * clients). Of the approval requests and escalations opened for exactly this action (every bound
 * fact: `bound_facts_hash`, migration 0017) by the same requesting identity (auth/identity.ts),
 * one query finds the one that can still count: an approved, unused, unexpired one first, then a
 * pending one, and otherwise the most recent, whose refusal tells the caller why a new one opens.
 * What it found is then judged exactly as an id named in `context.approvals` (check.ts).
 *
 * @example
 *   const found = await findReusableApproval(db, clock, context, { boundFactsHash, requester: 'user:dana' });
 *   found?.status; // { id: '2f0c…', accepted: true, reason: null }
 */
import type { Queryable } from '../store/db.js';
import type { Clock } from '../time.js';
import { checkApprovals, type AcceptedApproval, type ApprovalContext, type ApprovalStatus } from './check.js';

export interface ReuseKey {
  /** The binding hash over every bound fact of the decided action. */
  boundFactsHash: string;
  /** The identity asking (the credential's owner), as approval requests and escalations record it. */
  requester: string;
}

export interface ReusableApproval {
  kind: AcceptedApproval['kind'];
  /** As if its id had been named in `context.approvals`. */
  status: ApprovalStatus;
  /** Set when it is accepted: it may back this action's permit. */
  accepted: AcceptedApproval | null;
}

/**
 * Ranks: 0 approved, unused and unexpired; 1 still open; 2 anything else (rejected, expired,
 * used). Escalations' due timeouts are applied by the check, so an open one past its tier's
 * deadline still ranks 1 here.
 */
const FIND_REUSABLE = `
SELECT kind, id FROM (
  SELECT 'approval' AS kind, r.id::text AS id, r.created_at,
         CASE WHEN r.expires_at <= $4 THEN 2
              WHEN r.status = 'approved' AND u.approval_id IS NULL THEN 0
              WHEN r.status = 'pending' THEN 1
              ELSE 2 END AS rank
    FROM approval_requests r LEFT JOIN approval_uses u ON u.approval_id = r.id::text
   WHERE r.org_id = $1 AND r.bound_facts_hash = $2 AND r.requested_by = $3
  UNION ALL
  SELECT 'escalation', x.id::text, x.created_at,
         CASE WHEN x.status IN ('approved', 'auto_approved') AND x.timeout_at > $4 AND u.approval_id IS NULL THEN 0
              WHEN x.status IN ('pending', 'escalated') THEN 1
              ELSE 2 END
    FROM escalations x LEFT JOIN approval_uses u ON u.approval_id = x.id::text
   WHERE x.org_id = $1 AND x.bound_facts_hash = $2 AND x.creator_identity = $3
) AS candidate
ORDER BY rank, created_at DESC, id DESC
LIMIT 1`;

/** The approval request or escalation this action may reuse, judged; null when none was opened for it. */
export async function findReusableApproval(db: Queryable, clock: Clock, context: ApprovalContext, key: ReuseKey): Promise<ReusableApproval | null> {
  const [row] = await db.query<{ kind: AcceptedApproval['kind']; id: string }>(FIND_REUSABLE, [
    context.orgId,
    key.boundFactsHash,
    key.requester,
    new Date(clock.now()),
  ]);
  if (!row) return null;
  const check = await checkApprovals(db, clock, context, [row.id]);
  const [status] = check.statuses;
  if (!status) return null;
  return { kind: row.kind, status, accepted: check.accepted[0] ?? null };
}

/**
 * Serialises, until the transaction ends, the evaluations that may open an approval for this
 * action and requester, so that concurrent ones find the one the first opened instead of opening
 * one each.
 */
export async function lockReuse(tx: Queryable, orgId: string, key: ReuseKey): Promise<void> {
  await tx.query('SELECT pg_advisory_xact_lock(hashtextextended($1, 0))', [`approval-reuse ${orgId} ${key.boundFactsHash} ${key.requester}`]);
}
