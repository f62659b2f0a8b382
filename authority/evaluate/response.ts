/**
 * The evaluate response: every field of the API (decision, authorization_state, permit_token,
 * request_id, mode, human_approval_required, human_approval_status, expires_at,
 * permit_expires_at, risk_score) plus risk_envelope, decisionObject and remediation.
 */
import type { EvaluateResponse } from '../../shared/wire/evaluate.js';
import type { PolicyDecision } from '../policy/types.js';
import type { CurrentPolicy } from '../policy/versions.js';
import type { ApprovalStatus, OpenedApproval } from './approvals.js';

export interface ResponseInput {
  decided: PolicyDecision;
  mode: 'live' | 'shadow';
  requestId: string;
  evaluationId: string;
  permit: { id: string; token: string; expiresAt: Date } | null;
  policy: CurrentPolicy | null;
  bindingHash: string;
  boundKeys: string[];
  approvals: ApprovalStatus[];
  opened: OpenedApproval;
  now: Date;
}

/**
 * `approved` when an accepted approval backs an allow; `pending` while a hold or escalate waits for
 * humans or a presented approval is still undecided; otherwise what became of the approvals
 * presented (`rejected`, `expired`), or `not_required`.
 */
function humanApprovalStatus(decided: PolicyDecision, approvals: ApprovalStatus[]): EvaluateResponse['human_approval_status'] {
  if (decided.decision === 'allow' && approvals.some((approval) => approval.accepted)) return 'approved';
  if (decided.decision === 'hold' || decided.decision === 'escalate') return 'pending';
  if (approvals.some((approval) => approval.reason === 'APPROVAL_PENDING')) return 'pending';
  if (approvals.some((approval) => approval.reason === 'APPROVAL_REJECTED')) return 'rejected';
  if (approvals.some((approval) => approval.reason === 'APPROVAL_EXPIRED')) return 'expired';
  return 'not_required';
}

export function buildEvaluateResponse(input: ResponseInput): EvaluateResponse {
  const { decided, permit } = input;
  const needsHuman = decided.decision === 'hold' || decided.decision === 'escalate';
  const response: EvaluateResponse = {
    decision: decided.decision,
    authorization_state: {
      permit_requirement: decided.permit.required ? 'required' : 'not_required',
      permit_status: permit ? 'present' : 'not_issued',
      verification_status: 'not_verified',
    },
    request_id: input.requestId,
    evaluation_id: input.evaluationId,
    mode: input.mode,
    human_approval_required: needsHuman,
    human_approval_status: humanApprovalStatus(decided, input.approvals),
    expires_at: (permit?.expiresAt ?? new Date(input.now.getTime() + decided.permit.lifetimeSeconds * 1000)).toISOString(),
    permit_expires_at: permit ? permit.expiresAt.toISOString() : null,
    risk_score: decided.risk.score,
    risk_envelope: decided.risk,
    decisionObject: {
      decision: decided.decision,
      reason_codes: decided.reasonCodes,
      action_class: decided.actionClass,
      matched_rules: decided.matchedRules,
      policy: { id: input.policy?.id ?? null, version: input.policy?.version ?? null },
      binding_hash: input.bindingHash,
      bound_facts: input.boundKeys,
      risk_envelope: decided.risk,
      approvals: input.approvals,
    },
    ...input.opened,
  };
  if (permit) {
    response.permit_token = permit.token;
    response.permit_id = permit.id;
  }
  if (decided.decision !== 'allow' && decided.remediation.length > 0) response.remediation = decided.remediation;
  return response;
}
