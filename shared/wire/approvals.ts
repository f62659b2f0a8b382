/**
 * Approval requests on the wire: what a `hold` opens (`approval_request_id` in the evaluate
 * response), `GET /v1/approvals`, `GET /v1/approvals/:id` (approvals:read) and
 * `POST /v1/approvals/:id/resolve` (approvals:write). Each request carries the bound facts of its
 * action (`bound_facts`), so that whoever may read it sees what it would let through.
 *
 * @example
 *   POST /v1/approvals/2f0c…/resolve  { "decision": "approve", "note": "checked with treasury" }
 *   → { "approval": { "id": "2f0c…", "status": "approved", "resolved_by": "user:u-42", … } }
 */
import { z } from 'zod';
import { isRecordable, RECORDABLE_MESSAGE } from './recordable-text.js';

export const APPROVAL_STATUSES = ['pending', 'approved', 'rejected', 'expired'] as const;

/**
 * What an approver is asked to let through: the facts of the action as a permit for it binds them
 * (`action_type`, `actor_id`, whichever of `environment`, `target`, `amount_usd` and
 * `account_code` it has, and the context keys its action class binds). Never the rest of the
 * evaluation's context.
 */
export const BoundFacts = z.record(z.string(), z.unknown());

export const ApprovalRecord = z.object({
  id: z.string(),
  organization_id: z.string(),
  evaluation_id: z.string(),
  request_id: z.string(),
  action_type: z.string(),
  actor_id: z.string(),
  binding_hash: z.string(),
  bound_facts: BoundFacts,
  risk_score: z.number(),
  reason_codes: z.array(z.string()),
  status: z.enum(APPROVAL_STATUSES),
  expires_at: z.string(),
  created_at: z.string(),
  /** The identity that asked for the held action (`user:<sub>` or a root `api_key:<id>`); it cannot resolve it. */
  requested_by: z.string(),
  resolved_at: z.string().nullable(),
  resolved_by: z.string().nullable(),
  note: z.string().nullable(),
  /** The permit this approval backed, once a fresh evaluation used it (an approval backs one permit). */
  used_by_permit_id: z.string().nullable(),
});
export type ApprovalRecord = z.infer<typeof ApprovalRecord>;

export const ApprovalIdParams = z.object({ id: z.uuid({ message: 'not an approval id' }) });

export const ListApprovalsQuery = z.object({
  status: z.enum(APPROVAL_STATUSES).optional(),
  limit: z.coerce.number().int().min(1).max(500).default(50),
  cursor: z.string().min(1).max(200).optional(),
});

export const ListApprovalsResponse = z.object({
  approvals: z.array(ApprovalRecord),
  next_cursor: z.string().nullable(),
});

export const ApprovalResponse = z.object({ approval: ApprovalRecord });

export const ResolveApprovalRequest = z
  .object({
    decision: z.enum(['approve', 'reject']),
    note: z.string().min(1).max(2000).refine(isRecordable, RECORDABLE_MESSAGE).optional(),
  })
  .strict();
