/**
 * The fresh re-evaluation's approval check. A caller that was told `hold` or `escalate` evaluates
 * the same action again with `context.approvals: [id, …]`; each id is accepted only when it names
 * an approval request or an escalation that is
 *
 *   of the same organization      else APPROVAL_NOT_FOUND (another organization's id included)
 *   approved                      else APPROVAL_PENDING, APPROVAL_REJECTED
 *   unexpired                     else APPROVAL_EXPIRED (its deadline for being decided has
 *                                 passed, or an escalation timed out: nobody approved in time)
 *   bound to the same action      else APPROVAL_BINDING_MISMATCH: the same standard facts before
 *                                 deciding, and once the decision names the facts the permit
 *                                 binds (the action class's own keys included), every one of them
 *                                 equal to the facts it was opened for (`refuseOtherBindings`).
 *                                 Escalations created through the API are bound to no action and
 *                                 never back a permit.
 *   not approved by the actor     else APPROVAL_BY_ACTOR
 *   not used for another permit   else APPROVAL_ALREADY_USED
 *
 * The engine sees only the accepted ones. When the fresh evaluation issues a permit, `claimApprovals`
 * records the use in the permit's transaction; the primary key of approval_uses makes two
 * concurrent evaluations with the same approval issue one permit between them.
 *
 * @example
 *   const checked = await checkApprovals(db, clock, { orgId, actorId, bindingHash }, ['2f0c…']);
 *   checked.statuses; // [{ id: '2f0c…', accepted: false, reason: 'APPROVAL_PENDING' }]
 *   refuseOtherBindings(checked, permitBindingHash); // the same check, or one with fewer accepted
 */
import { BindingFactError, bindingHash } from '../../shared/permits/binding.js';
import { readEscalation } from '../escalations/escalations.js';
import { listVotes } from '../escalations/store.js';
import type { CheckedApproval } from '../policy/types.js';
import type { Queryable } from '../store/db.js';
import type { Clock } from '../time.js';
import { effectiveStatus, getApprovalRequest, isActor } from './approval-requests.js';

export interface ApprovalStatus {
  id: string;
  accepted: boolean;
  /** null when accepted; otherwise a stable reason code (see above). */
  reason: string | null;
}

/** An accepted approval, with what it was opened for. */
export interface AcceptedApproval extends CheckedApproval {
  /** The binding hash of the bound facts it was opened for; null when it keeps none (older data). */
  boundFactsHash: string | null;
}

export interface ApprovalCheck {
  accepted: AcceptedApproval[];
  statuses: ApprovalStatus[];
}

export interface ApprovalContext {
  orgId: string;
  actorId: string;
  /** The hash of the action's standard bound facts: what holds and escalations are bound to. */
  bindingHash: string;
}

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

/** What one approval or escalation amounts to, whatever its kind. */
interface Candidate {
  kind: CheckedApproval['kind'];
  approved: boolean;
  /** The reason when not approved. */
  refusal: string | null;
  deadline: Date;
  bindingHash: string | null;
  boundFactsHash: string | null;
  approvedBy: string[];
  usedBy: string | null;
}

/** Never a binding hash (base64url has no `!`): stored facts that cannot be bound back nothing. */
const UNBINDABLE = '!unbindable';

/** The binding hash over the bound facts an approval was opened for; null when it keeps none. */
function boundFactsHashOf(orgId: string, facts: Record<string, unknown> | null): string | null {
  if (facts === null) return null;
  try {
    return bindingHash(orgId, facts);
  } catch (error) {
    if (error instanceof BindingFactError) return UNBINDABLE;
    throw error;
  }
}

async function candidateOf(db: Queryable, clock: Clock, orgId: string, id: string): Promise<Candidate | null> {
  const nowMs = clock.now();
  const approval = await getApprovalRequest(db, orgId, id);
  if (approval) {
    const status = effectiveStatus(approval, nowMs);
    return {
      kind: 'approval',
      approved: status === 'approved',
      refusal: status === 'pending' ? 'APPROVAL_PENDING' : status === 'rejected' ? 'APPROVAL_REJECTED' : status === 'expired' ? 'APPROVAL_EXPIRED' : null,
      deadline: approval.expiresAt,
      bindingHash: approval.bindingHash,
      boundFactsHash: boundFactsHashOf(orgId, approval.boundFacts),
      approvedBy: approval.resolvedBy ? [approval.resolvedBy] : [],
      usedBy: approval.usedByPermitId,
    };
  }
  const escalation = await readEscalation(db, orgId, id, clock);
  if (!escalation) return null;
  const approved = escalation.status === 'approved' || escalation.status === 'auto_approved';
  const refusal =
    escalation.status === 'pending' || escalation.status === 'escalated'
      ? 'APPROVAL_PENDING'
      : escalation.status === 'rejected'
        ? 'APPROVAL_REJECTED'
        : escalation.status === 'timed_out'
          ? 'APPROVAL_EXPIRED'
          : null;
  const votes = approved ? await listVotes(db, escalation.id) : [];
  const [use] = await db.query<{ permit_id: string }>('SELECT permit_id FROM approval_uses WHERE approval_id = $1', [escalation.id]);
  return {
    kind: 'escalation',
    approved,
    refusal,
    deadline: escalation.timeoutAt,
    bindingHash: escalation.bindingHash,
    boundFactsHash: boundFactsHashOf(orgId, escalation.boundFacts),
    approvedBy: votes.filter((vote) => vote.decision === 'approve').map((vote) => vote.userId),
    usedBy: use?.permit_id ?? null,
  };
}

function judge(candidate: Candidate | null, context: ApprovalContext, nowMs: number): string | null {
  if (!candidate) return 'APPROVAL_NOT_FOUND';
  if (!candidate.approved) return candidate.refusal ?? 'APPROVAL_PENDING';
  if (candidate.deadline.getTime() <= nowMs) return 'APPROVAL_EXPIRED';
  if (candidate.bindingHash !== context.bindingHash) return 'APPROVAL_BINDING_MISMATCH';
  if (candidate.approvedBy.some((who) => isActor(context.actorId, who))) return 'APPROVAL_BY_ACTOR';
  if (candidate.usedBy !== null) return 'APPROVAL_ALREADY_USED';
  return null;
}

/** Checks the approvals a caller presents for a fresh evaluation (each id once, in the order given). */
export async function checkApprovals(db: Queryable, clock: Clock, context: ApprovalContext, ids: readonly string[]): Promise<ApprovalCheck> {
  const check: ApprovalCheck = { accepted: [], statuses: [] };
  const nowMs = clock.now();
  for (const id of new Set(ids)) {
    const candidate = UUID.test(id) ? await candidateOf(db, clock, context.orgId, id.toLowerCase()) : null;
    const reason = judge(candidate, context, nowMs);
    check.statuses.push({ id, accepted: reason === null, reason });
    if (reason === null && candidate) {
      check.accepted.push({ id: id.toLowerCase(), kind: candidate.kind, approvedBy: candidate.approvedBy, boundFactsHash: candidate.boundFactsHash });
    }
  }
  return check;
}

/**
 * `check` with every accepted approval opened for other bound facts than `binding` (the binding
 * hash over all the facts the decided action binds) refused as APPROVAL_BINDING_MISMATCH; `check`
 * itself when none is. An approval that keeps no bound facts (older data) was judged on the
 * standard facts alone, as it always was.
 */
export function refuseOtherBindings(check: ApprovalCheck, binding: string): ApprovalCheck {
  const mismatched = new Set(check.accepted.filter((a) => a.boundFactsHash !== null && a.boundFactsHash !== binding).map((a) => a.id));
  if (mismatched.size === 0) return check;
  return {
    accepted: check.accepted.filter((approval) => !mismatched.has(approval.id)),
    statuses: check.statuses.map((status) =>
      mismatched.has(status.id.toLowerCase()) ? { id: status.id, accepted: false, reason: 'APPROVAL_BINDING_MISMATCH' } : status,
    ),
  };
}

/** Another evaluation used one of the approvals first; the caller evaluates again to report it. */
export class ApprovalAlreadyUsedError extends Error {
  readonly code = 'APPROVAL_ALREADY_USED';
}

/** Records that `approvals` backed `permitId`, in the permit's transaction; throws if one was used already. */
export async function claimApprovals(
  tx: Queryable,
  use: { orgId: string; permitId: string; evaluationId: string; at: Date },
  approvals: readonly CheckedApproval[],
): Promise<void> {
  if (approvals.length === 0) return;
  const claimed = await tx.query<{ approval_id: string }>(
    `INSERT INTO approval_uses (approval_id, kind, org_id, permit_id, evaluation_id, used_at)
     SELECT id, kind, $3, $4, $5, $6 FROM unnest($1::text[], $2::text[]) AS a(id, kind)
     ON CONFLICT (approval_id) DO NOTHING RETURNING approval_id`,
    [approvals.map((a) => a.id), approvals.map((a) => a.kind), use.orgId, use.permitId, use.evaluationId, use.at],
  );
  if (claimed.length !== approvals.length) throw new ApprovalAlreadyUsedError('an approval was used for another permit meanwhile');
}
