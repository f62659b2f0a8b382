/**
 * Evaluate's side of human approval. Before deciding, the approvals a caller presents are checked
 * (authority/approvals/check.ts); after deciding, a `hold` opens an approval request and an
 * `escalate` opens an escalation, in the evaluation's own transaction, bound to the action's
 * binding hash. Their ids go into the response, so they are chosen before the evaluation is stored.
 *
 * A caller that presents approvals which are refused, for an action that still needs a human, is
 * denied with the refusal reasons (`denyForRefusedApprovals`): a used, mismatched or self-given
 * approval must fail visibly, not quietly open a fresh approval request.
 *
 * @example
 *   const human = planHumanApproval({ decided, principal, … });
 *   const answer = responseFor(human?.opened ?? {});
 *   await db.transaction(async (tx) => { await storeEvaluations(tx, [write]); await human?.open(tx); });
 */
import { randomUUID } from 'node:crypto';
import type { EscalationStatus } from '../../shared/wire/escalations.js';
import type { EvaluateWireRequest } from '../../shared/wire/evaluate.js';
import { openApprovalRequest } from '../approvals/approval-requests.js';
import type { Principal } from '../auth/principal.js';
import type { AuthorityConfig } from '../config.js';
import { autoApproveThreshold, createEscalation } from '../escalations/escalations.js';
import type { ApprovalStatus } from '../approvals/check.js';
import type { PolicyDecision, Remediation } from '../policy/types.js';
import type { Queryable } from '../store/db.js';
import type { Clock } from '../time.js';

export { ApprovalAlreadyUsedError, checkApprovals, claimApprovals, type ApprovalContext, type ApprovalStatus } from '../approvals/check.js';

export interface OpenedApproval {
  approval_request_id?: string;
  escalation_id?: string;
}

export interface HumanApproval {
  /** What the response says was opened. */
  opened: OpenedApproval;
  /** Opens it, in the evaluation's transaction (after the evaluation row); an escalation's status for the metrics. */
  open(tx: Queryable): Promise<EscalationStatus | null>;
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
  config: AuthorityConfig;
  clock: Clock;
  now: Date;
}

/** The bound facts other than the two that name the action itself. */
function contextOf(boundFacts: Record<string, unknown>): Record<string, unknown> {
  const { action_type: _type, actor_id: _actor, ...context } = boundFacts;
  return context;
}

/** The approval request or escalation a `hold` or `escalate` opens; null for other decisions. */
export function planHumanApproval(input: HumanApprovalInput): HumanApproval | null {
  const { decided, principal, request, requestId, evaluationId, bindingHash, boundFacts, now } = input;
  const orgId = principal.org.id;
  if (decided.decision === 'hold' && decided.hold) {
    const id = randomUUID();
    const timeoutMs = decided.hold.timeoutMs;
    return {
      opened: { approval_request_id: id },
      open: async (tx) => {
        await openApprovalRequest(
          tx,
          {
            id, orgId, evaluationId, requestId, actionType: request.action_type, actorId: request.actor_id, bindingHash, boundFacts,
            riskScore: decided.risk.score, reasonCodes: decided.reasonCodes, timeoutMs, credential: principal.credential,
          },
          now,
        );
        return null;
      },
    };
  }
  if (decided.decision === 'escalate' && decided.escalation) {
    const id = randomUUID();
    const settings = decided.escalation;
    return {
      opened: { escalation_id: id },
      open: async (tx) => {
        const escalation = await createEscalation(
          tx,
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
