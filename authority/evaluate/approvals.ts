/**
 * Evaluate's side of human approval. Before deciding, the approvals a caller presents are checked
 * (authority/approvals/check.ts); after deciding, those opened for other bound facts than the
 * decided action binds are refused and the action decided again (`decideWithApprovals`). A `hold`
 * then opens an approval request and an `escalate` an escalation, in the evaluation's own
 * transaction, bound to the action's bound facts. Their ids go into the response, so they are
 * chosen before the evaluation is stored.
 *
 * With `reuse_approvals`, an approval opened for exactly this action by the same requester is
 * reused (authority/approvals/reuse.ts): an approved one is applied as if presented
 * (`reuseApproval`), and a pending one is what a new hold or escalate names instead of opening
 * another (`planHumanApproval`'s `reuse`).
 *
 * A caller that presents approvals which are refused, for an action that still needs a human, is
 * denied with the refusal reasons (`denyForRefusedApprovals`): a used, mismatched or self-given
 * approval must fail visibly, not quietly open a fresh approval request.
 *
 * @example
 *   const human = planHumanApproval({ decided, principal, reuse: null, … });
 *   await db.transaction(async (tx) => {
 *     const prepared = await human.prepare(tx);
 *     await storeEvaluations(tx, [writeFor(responseFor(prepared.opened))]);
 *     await prepared.open(tx);
 *   });
 */
import { randomUUID } from 'node:crypto';
import type { EscalationStatus } from '../../shared/wire/escalations.js';
import type { EvaluateWireRequest } from '../../shared/wire/evaluate.js';
import { openApprovalRequest } from '../approvals/approval-requests.js';
import { refuseOtherBindings, type ApprovalCheck, type ApprovalContext, type ApprovalStatus } from '../approvals/check.js';
import { findReusableApproval, lockReuse, type ReuseKey } from '../approvals/reuse.js';
import type { Principal } from '../auth/principal.js';
import type { AuthorityConfig } from '../config.js';
import { autoApproveThreshold, createEscalation } from '../escalations/escalations.js';
import type { PolicyDecision, Remediation } from '../policy/types.js';
import type { Queryable } from '../store/db.js';
import type { Clock } from '../time.js';

export { ApprovalAlreadyUsedError, checkApprovals, claimApprovals, type ApprovalCheck, type ApprovalContext, type ApprovalStatus } from '../approvals/check.js';
export type { ReuseKey } from '../approvals/reuse.js';

export interface OpenedApproval {
  approval_request_id?: string;
  escalation_id?: string;
}

/** What the answer names, chosen in the evaluation's transaction. */
export interface PreparedApproval {
  opened: OpenedApproval;
  /** The reused pending approval's status, for the answer and its record; none when a new one opens. */
  statuses: ApprovalStatus[];
  /** Opens the new one (after the evaluation row); an escalation's status for the metrics; nothing when reused. */
  open(tx: Queryable): Promise<EscalationStatus | null>;
}

export interface HumanApproval {
  /**
   * Before the evaluation is stored, in its transaction. With `reuse`, under a lock per action and
   * requester, so that concurrent evaluations agree on one approval: the pending one opened for
   * exactly this action, if any, else a new one.
   */
  prepare(tx: Queryable): Promise<PreparedApproval>;
}

export interface HumanApprovalInput {
  decided: PolicyDecision;
  principal: Principal;
  request: EvaluateWireRequest;
  requestId: string;
  evaluationId: string;
  /** The action's standard binding hash (see ApprovalContext). */
  bindingHash: string;
  /**
   * The action's bound facts, the class's own bound keys included: what the approvers are shown.
   * The approval or escalation keeps these and nothing else of the context.
   */
  boundFacts: Record<string, unknown>;
  /** Set with `reuse_approvals`: reuse the pending approval opened for this action by this requester. */
  reuse: ReuseKey | null;
  config: AuthorityConfig;
  clock: Clock;
  now: Date;
}

/** The decision on an action, the facts its permit binds, and the approvals behind it. */
export interface DecidedAction {
  decided: PolicyDecision;
  bound: { facts: Record<string, unknown>; keys: string[] };
  /** The binding hash over `bound.facts`. */
  binding: string;
  approvals: ApprovalCheck;
}

export const NO_APPROVALS: ApprovalCheck = { accepted: [], statuses: [] };

export const needsHuman = (decided: PolicyDecision): boolean => decided.decision === 'hold' || decided.decision === 'escalate';

/**
 * Decides with `check`'s approvals, then refuses those opened for other bound facts than the
 * decided action binds (APPROVAL_BINDING_MISMATCH) and decides again without them, until every
 * approval left backs exactly this action. Each round has fewer approvals, so it ends.
 */
export function decideWithApprovals(check: ApprovalCheck, decide: (check: ApprovalCheck) => Omit<DecidedAction, 'approvals'>): DecidedAction {
  for (let approvals = check; ; ) {
    const outcome = decide(approvals);
    const settled = refuseOtherBindings(approvals, outcome.binding);
    if (settled === approvals) return { decided: outcome.decided, bound: outcome.bound, binding: outcome.binding, approvals };
    approvals = settled;
  }
}

/**
 * `reuse_approvals` before a hold or escalate is answered: the action decided again with the
 * approved approval opened for it, when there is one; otherwise the same decision, with the most
 * recent approval's refusal to report (rejected, expired) when that is why a new one opens. A
 * pending one is left to `planHumanApproval`, and a used one is simply done.
 */
export async function reuseApproval(
  db: Queryable,
  clock: Clock,
  context: ApprovalContext,
  key: ReuseKey,
  action: DecidedAction,
  decide: (check: ApprovalCheck) => Omit<DecidedAction, 'approvals'>,
): Promise<{ action: DecidedAction; reported: ApprovalStatus[] }> {
  const found = await findReusableApproval(db, clock, context, key);
  // Named in context.approvals as well: it already counts, and counts once.
  const counted = action.approvals.accepted.some((approval) => approval.id === found?.accepted?.id);
  if (found?.accepted && !counted) {
    const check = { accepted: [...action.approvals.accepted, found.accepted], statuses: [...action.approvals.statuses, found.status] };
    return { action: decideWithApprovals(check, decide), reported: [] };
  }
  const reason = found?.status.reason;
  const explains = found !== null && reason !== 'APPROVAL_PENDING' && reason !== 'APPROVAL_ALREADY_USED';
  return { action, reported: explains ? [found.status] : [] };
}

/** The bound facts other than the two that name the action itself. */
function contextOf(boundFacts: Record<string, unknown>): Record<string, unknown> {
  const { action_type: _type, actor_id: _actor, ...context } = boundFacts;
  return context;
}

/** The pending approval of `kind` opened for this action by this requester, taking the lock; null when a new one must open. */
async function pendingToReuse(tx: Queryable, input: HumanApprovalInput, kind: 'approval' | 'escalation'): Promise<ApprovalStatus | null> {
  if (!input.reuse) return null;
  const context = { orgId: input.principal.org.id, actorId: input.request.actor_id, bindingHash: input.bindingHash };
  await lockReuse(tx, context.orgId, input.reuse);
  const found = await findReusableApproval(tx, input.clock, context, input.reuse);
  return found?.kind === kind && found.status.reason === 'APPROVAL_PENDING' ? found.status : null;
}

const reused = (status: ApprovalStatus, opened: OpenedApproval): PreparedApproval => ({ opened, statuses: [status], open: () => Promise.resolve(null) });

/** The approval request or escalation a `hold` or `escalate` opens (or reuses); null for other decisions. */
export function planHumanApproval(input: HumanApprovalInput): HumanApproval | null {
  const { decided, principal, request, requestId, evaluationId, bindingHash, boundFacts, now } = input;
  const orgId = principal.org.id;
  if (decided.decision === 'hold' && decided.hold) {
    const timeoutMs = decided.hold.timeoutMs;
    return {
      prepare: async (tx) => {
        const pending = await pendingToReuse(tx, input, 'approval');
        if (pending) return reused(pending, { approval_request_id: pending.id });
        const id = randomUUID();
        return {
          opened: { approval_request_id: id },
          statuses: [],
          open: async (inner) => {
            await openApprovalRequest(
              inner,
              {
                id, orgId, evaluationId, requestId, actionType: request.action_type, actorId: request.actor_id, bindingHash, boundFacts,
                riskScore: decided.risk.score, reasonCodes: decided.reasonCodes, timeoutMs, credential: principal.credential,
              },
              now,
            );
            return null;
          },
        };
      },
    };
  }
  if (decided.decision === 'escalate' && decided.escalation) {
    const settings = decided.escalation;
    return {
      prepare: async (tx) => {
        const pending = await pendingToReuse(tx, input, 'escalation');
        if (pending) return reused(pending, { escalation_id: pending.id });
        const id = randomUUID();
        return {
          opened: { escalation_id: id },
          statuses: [],
          open: async (inner) => {
            const escalation = await createEscalation(
              inner,
              {
                id,
                orgId,
                agentId: request.actor_id,
                escalationReason: decided.reasonCodes.join(', '),
                // Readable by any credential of the organization: the bound facts, never the whole context.
                proposedAction: { action_type: request.action_type, actor_id: request.actor_id, context: contextOf(boundFacts) },
                riskScore: decided.risk.score,
                quorumRequired: settings.quorum,
                approverPoolSize: settings.approverPoolSize,
                minApprovers: settings.minApprovers,
                timeoutMs: settings.timeoutMs,
                fallbackDecision: settings.fallbackDecision,
                metadata: { evaluation_id: evaluationId, action_class: decided.actionClass, reason_codes: decided.reasonCodes },
                createdBy: principal.credential,
                requestId,
                binding: { hash: bindingHash, facts: boundFacts },
                autoApproveBelow: autoApproveThreshold(input.config.escalations, orgId),
              },
              input.clock,
            );
            return escalation.status;
          },
        };
      },
    };
  }
  return null;
}

const WAIT: Remediation = { code: 'WAIT_FOR_APPROVAL', message: 'The approval is not decided yet: evaluate again once it is approved.' };
const ASK_AGAIN: Remediation = {
  code: 'REQUEST_APPROVAL',
  message: 'This approval cannot back this action: evaluate without context.approvals to open a new approval request.',
};

/**
 * `decided` turned into a deny when approvals were presented, some were refused, and the action
 * would still need a human (hold or escalate). Reason codes: the refusals first, then the policy's.
 *
 * @example
 *   denyForRefusedApprovals(holdDecision, [{ id, accepted: false, reason: 'APPROVAL_ALREADY_USED' }]).reasonCodes;
 *   // ['APPROVAL_ALREADY_USED', 'AMOUNT_OVER_HOLD_THRESHOLD']
 */
export function denyForRefusedApprovals(decided: PolicyDecision, statuses: readonly ApprovalStatus[]): PolicyDecision {
  const refusals = [...new Set(statuses.flatMap((status) => (status.reason === null ? [] : [status.reason])))];
  if (refusals.length === 0 || (decided.decision !== 'hold' && decided.decision !== 'escalate')) return decided;
  const remediation = refusals.every((reason) => reason === 'APPROVAL_PENDING') ? [WAIT] : [ASK_AGAIN];
  return Object.assign({}, decided, { decision: 'deny' as const, reasonCodes: [...refusals, ...decided.reasonCodes], remediation, hold: null, escalation: null });
}
