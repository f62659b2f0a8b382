/**
 * A policy of one action class with one deny rule, for the tests of conditions: the rule's `when`
 * is what is under test, at `action_classes.0.rules.0.when`.
 *
 * @example
 *   compilePolicy(oneRulePolicy("context.s.matches('^a')"), 'yaml');
 *   policy.decide(toolsInput({ s: 'abc' })); // deny, reason RULE_MATCHED
 */
import type { DecisionInput } from '../../authority/policy/types.js';

export function oneRulePolicy(when: string, options: { actionPrefix?: string; ruleId?: string; reason?: string } = {}): string {
  const prefix = options.actionPrefix ?? 'tools';
  return `version: 1
action_classes:
  - id: ${prefix}
    match:
      action_type: ${prefix}.*
    actors: ['*']
    default: allow
    rules:
      - id: ${options.ruleId ?? 'rule'}
        when: ${JSON.stringify(when)}
        decision: deny
        reason: ${options.reason ?? 'RULE_MATCHED'}
`;
}

/** A `tools.run` request of actor `a` with `context`. */
export function toolsInput(context: Record<string, unknown>, explain = false): DecisionInput {
  return { action_type: 'tools.run', actor_id: 'a', context, approvals: [], now: new Date('2025-06-02T10:00:00Z'), explain };
}
