/**
 * How a request is decided from its facts, without the database: the compiled policy's `decide`,
 * then `denyForRefusedApprovals` with the statuses of the approvals presented. `POST /v1/evaluate`,
 * policy tests and policy replay all decide through here, so none of them can drift into a copy.
 *
 * @example
 *   const decided = decideAsEvaluate(policy, { action_type: 'demo.echo', actor_id: 'demo-agent', context: {} }, {
 *     accepted: [], statuses: [], now: new Date(),
 *   });
 *   decided.decision; // 'allow'
 */
import type { EvaluateWireRequest } from '../../shared/wire/evaluate.js';
import type { CheckedApproval, CompiledPolicy, PolicyDecision } from '../policy/types.js';
import { denyForRefusedApprovals, type ApprovalStatus } from './approvals.js';

export interface DecisionFacts {
  /** The approvals the authority accepted for this request. */
  accepted: readonly CheckedApproval[];
  /** What became of every approval presented (refusals turn a hold or escalate into a deny). */
  statuses: readonly ApprovalStatus[];
  now: Date;
  /** Keep the policy's explanation of each rule (the request's `explain`). */
  explain?: boolean;
}

export function decideAsEvaluate(
  policy: CompiledPolicy,
  request: Pick<EvaluateWireRequest, 'action_type' | 'actor_id' | 'context'>,
  facts: DecisionFacts,
): PolicyDecision {
  const decided = policy.decide({
    action_type: request.action_type,
    actor_id: request.actor_id,
    context: request.context,
    approvals: [...facts.accepted],
    now: facts.now,
    explain: facts.explain === true,
  });
  return denyForRefusedApprovals(decided, facts.statuses);
}
