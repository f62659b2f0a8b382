/**
 * The seam between evaluate and human approval (holds and escalations come with their own
 * capability). Today no approval or escalation exists, so every id a caller passes in
 * `context.approvals` is reported as not accepted (APPROVAL_NOT_FOUND) and a hold or escalate
 * opens nothing yet; the evaluate code around it does not change when they arrive.
 */
import type { Queryable } from '../store/db.js';
import type { CheckedApproval, PolicyDecision } from '../policy/types.js';

export interface ApprovalStatus {
  id: string;
  accepted: boolean;
  /** null when accepted; otherwise a stable reason code. */
  reason: string | null;
}

export interface ApprovalCheck {
  accepted: CheckedApproval[];
  statuses: ApprovalStatus[];
}

export interface ApprovalContext {
  orgId: string;
  actorId: string;
  bindingHash: string;
}

/** Checks the approvals a caller presents for a fresh evaluation. */
export async function checkApprovals(_tx: Queryable | null, _context: ApprovalContext, ids: readonly string[]): Promise<ApprovalCheck> {
  return { accepted: [], statuses: ids.map((id) => ({ id, accepted: false, reason: 'APPROVAL_NOT_FOUND' })) };
}

export interface OpenedApproval {
  approval_request_id?: string;
  escalation_id?: string;
}

/** Opens the approval request (hold) or escalation (escalate) for a decision, inside its transaction. */
export async function openHumanApproval(_tx: Queryable, _context: ApprovalContext, _decision: PolicyDecision): Promise<OpenedApproval> {
  return {};
}
