/**
 * Bounded evaluation: the worst-case cost estimator, the refusal of over-budget
 * conditions when a policy is written (with the condition's path and why), and the deny
 * CONDITION_BUDGET_EXCEEDED at evaluation, both before a condition runs (a request larger than
 * the write-time assumption) and while it runs (the meter).
 */
import t from 'tap';
import { compileCondition, runCondition, ActionFacts, ActorFacts, NO_APPROVALS, PRE_RISK_ENV } from '../../authority/policy/cel.js';
import type { AstNode } from '../../authority/policy/cel-ast.js';
import { compilePolicy } from '../../authority/policy/compile.js';
import { estimateCost, measureShape } from '../../authority/policy/cost.js';
import { configurePolicyLimits, DEFAULT_POLICY_LIMITS } from '../../authority/policy/limits.js';
import { BudgetExceededError, metered } from '../../authority/policy/meter.js';
import type { CompileResult, DecisionInput } from '../../authority/policy/types.js';
import { oneRulePolicy, toolsInput } from '../helpers/one-rule-policy.js';

const bounds = { list: 1_000, string: 4_096 };
const costOf = (source: string, at = bounds): number => {
  const compiled = compileCondition(source, PRE_RISK_ENV, false);
  if (!compiled.ok) throw new Error(compiled.message);
  return estimateCost(compiled.ast as AstNode, at);
};

const policy = (when: string) => oneRulePolicy(when, { ruleId: 'check', reason: 'CHECKED' });
const input = (context: Record<string, unknown>): DecisionInput => toolsInput(context, true);
const ok = (result: CompileResult) => {
  if (!result.ok) throw new Error(JSON.stringify(result.errors));
  return result.policy;
};

const NESTED = 'context.xs.exists(a, context.xs.exists(b, context.xs.exists(c, a + b + c == 0.5)))';

t.test('the estimator: constants are cheap, comprehensions multiply, nesting multiplies again', async (t) => {
  const flat = costOf('context.amount_usd > 10000.0');
  t.ok(flat < 10, `a comparison costs a few units (${flat})`);
  const one = costOf('context.xs.all(x, x > 1.0)');
  const two = costOf('context.xs.all(x, context.xs.all(y, x > y))');
  const three = costOf(NESTED);
  t.ok(one >= 1_000 && one < 20_000, `one comprehension ≈ list × body (${one})`);
  t.ok(two >= 1_000_000, `two nested ≈ list² (${two})`);
  t.ok(three >= 1_000_000_000, `three nested ≈ list³ (${three})`);
  t.ok(costOf('[1.0, 2.0].all(x, x > 0.5)') < 50, 'a literal list is sized exactly');
  t.ok(costOf('context.xs.all(x, x > 1.0)', { list: 10, string: 10 }) < one, 'the bound scales with the list size');
  const regex = costOf(`context.s.matches('^[a-z]+$')`);
  t.ok(regex > 4_096 / 32 && regex < 10_000, `matches ∝ input × pattern (${regex})`);
  t.ok(costOf('context.s.matches(context.p)') > regex * 50, 'a pattern from the request is sized at the string bound');
  t.ok(costOf(`context.s.split(',').exists(p, p == 'x')`) > 4_096, 'split yields a list as long as its input');
});

t.test('a policy whose condition is over the limit is refused when written, with path and why', async (t) => {
  const result = compilePolicy(policy(NESTED));
  t.notOk(result.ok);
  const [error] = result.ok ? [] : result.errors;
  t.equal(error?.path, 'action_classes.0.rules.0.when');
  t.match(error?.message, /worst-case cost is \d+ units, over the limit of 1000000 .*lists of up to 1000 items/);
  t.ok(compilePolicy(policy('context.xs.all(x, x > 1.0)')).ok, 'one comprehension fits');

  const restore = configurePolicyLimits({ maxConditionCost: 100 });
  t.teardown(() => configurePolicyLimits(restore));
  t.notOk(compilePolicy(policy('context.xs.all(x, x > 1.0)')).ok, 'the limit is configurable');
  configurePolicyLimits(restore);
  t.throws(() => configurePolicyLimits({ maxListItems: 0 }), /positive integer/);
});

t.test('a stored policy over the limit still loads, and the condition denies when reached', async (t) => {
  const compiled = ok(compilePolicy(policy(NESTED), 'yaml', { purpose: 'stored' }));
  const decision = compiled.decide(input({ xs: [0.1, 0.2] }));
  t.equal(decision.decision, 'deny');
  t.same(decision.reasonCodes, ['CONDITION_BUDGET_EXCEEDED']);
  t.equal(decision.remediation[0]?.code, 'REDUCE_CONDITION_COST');
  t.match(decision.remediation[0]?.message, /action_classes\.0\.rules\.0\.when.*worst-case cost/);
});

t.test('a request larger than the write-time assumption is denied before the condition runs', async (t) => {
  const compiled = ok(compilePolicy(policy('context.xs.exists(x, x == 0.5)')));
  t.equal(compiled.decide(input({ xs: Array.from({ length: 1_000 }, () => 1) })).decision, 'allow', 'at the bound: runs');
  t.equal(compiled.decide(input({ xs: Array.from({ length: 20_000 }, () => 1) })).decision, 'allow', 'a cheap body still fits');
  const big = compiled.decide(input({ xs: Array.from({ length: 300_000 }, () => 1) }));
  t.equal(big.decision, 'deny');
  t.same(big.reasonCodes, ['CONDITION_BUDGET_EXCEEDED']);
  t.match(big.remediation[0]?.message, /largest list 300000 items.*over the limit/);
  t.match(big.explanation?.find((step) => step.rule === 'rule:check')?.error, /evaluation budget exceeded/);

  const regex = ok(compilePolicy(policy(`context.s.matches('^(a+)+$')`)));
  t.equal(regex.decide(input({ s: 'a'.repeat(4_000) })).decision, 'deny', 'matched: the rule denies');
  t.same(regex.decide(input({ s: 'a'.repeat(4_000) })).reasonCodes, ['CHECKED']);
  const long = regex.decide(input({ s: `${'a'.repeat(8_000_000)}!` }));
  t.same(long.reasonCodes, ['CONDITION_BUDGET_EXCEEDED'], 'a string too long for the budget is not scanned');
  t.equal(compiled.decide(input({ other: 'x'.repeat(100_000), xs: [] })).decision, 'allow', 'only the cost at the actual sizes counts');
});

t.test('a running condition is stopped by the meter', async (t) => {
  const compiled = compileCondition('context.xs.all(x, context.xs.all(y, x >= 0.0))', PRE_RISK_ENV, false);
  if (!compiled.ok) throw new Error(compiled.message);
  const variables = { action: new ActionFacts('t'), actor: new ActorFacts('a', []), context: { xs: Array.from({ length: 100 }, () => 1) }, approvals: NO_APPROVALS, now: new Date() };
  t.equal(metered(1_000_000, () => runCondition(compiled.program, variables)), true, 'within budget: runs to the end');
  t.throws(() => metered(1_000, () => runCondition(compiled.program, variables)), BudgetExceededError, 'comprehensions charge the meter');
});

t.test('measureShape finds the largest list, map and string', async (t) => {
  t.same(measureShape([{ a: [1, 2, 3], b: { c: 'hello', d: { e: 'x'.repeat(10) } } }]), { list: 3, string: 10 });
  t.same(measureShape([{ k: Object.fromEntries(Array.from({ length: 7 }, (_, i) => [`k${i}`, i])) }]), { list: 7, string: 2 });
  t.equal(DEFAULT_POLICY_LIMITS.maxConditionCost, 1_000_000);
});
