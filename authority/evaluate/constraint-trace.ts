/**
 * The constraint trace of an evaluation (`?include=constraint_trace`, the @atlasent/sdk's
 * preflight): the policy's own rule-by-rule explanation, in the shape the SDK reads. The
 * organization has one policy, so the trace has one entry.
 *
 * @example
 *   const trace = constraintTraceOf(response); // response evaluated with explain: true
 *   trace.rules_evaluated[0].stages[0]; // { stage: 'rule', rule: 'allow-demo', matched: true, detail: '…', order: 0 }
 */
import type { ConstraintTrace, EvaluateResponse } from '../../shared/wire/evaluate.js';
import type { RuleTrace } from '../policy/types.js';

export function constraintTraceOf(response: EvaluateResponse): ConstraintTrace {
  const decided = response.decisionObject;
  const policyId = decided.policy.id ?? 'none';
  // The explanation is the engine's RuleTrace list; the wire leaves its items open.
  const steps = (decided.explanation ?? []) as RuleTrace[];
  return {
    rules_evaluated: [
      {
        policy_id: policyId,
        decision: decided.decision,
        fingerprint: decided.policy.version === null ? 'none' : `v${decided.policy.version}`,
        risk_score: response.risk_score,
        stages: steps.map((step, order) => ({ stage: 'rule' as const, rule: step.rule, matched: step.matched, detail: step.error ?? step.condition, order })),
      },
    ],
    matching_policy_id: decided.decision === 'allow' ? null : policyId,
  };
}
