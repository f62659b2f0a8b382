/**
 * CEL `matches` on RE2: normal patterns behave as before (a search, anywhere in the
 * string), catastrophic backtracking is gone, and syntax RE2 lacks is refused when the policy is
 * written, with the condition's path.
 */
import t from 'tap';
import { compileCondition, RULE_ENV, PRE_RISK_ENV } from '../../authority/policy/cel.js';
import { compilePolicy } from '../../authority/policy/compile.js';
import { matchesRe2 } from '../../authority/policy/regex.js';
import { metered } from '../../authority/policy/meter.js';
import { configurePolicyLimits } from '../../authority/policy/limits.js';
import type { CompileResult, DecisionInput } from '../../authority/policy/types.js';
import { oneRulePolicy, toolsInput } from '../helpers/one-rule-policy.js';

const policy = (when: string) => oneRulePolicy(when, { ruleId: 'pattern', reason: 'PATTERN' });
const input = (context: Record<string, unknown>): DecisionInput => toolsInput(context);

const decide = (result: CompileResult, context: Record<string, unknown>) => {
  if (!result.ok) throw new Error(JSON.stringify(result.errors));
  return result.policy.decide(input(context));
};

// A pattern taken from the context costs input × pattern with both at the string bound, over the
// default limit (policy-budget.test.ts); these tests assume shorter strings so that it fits.
const restore = configurePolicyLimits({ maxStringLength: 512 });
t.teardown(() => configurePolicyLimits(restore));

t.test('matches keeps CEL semantics for ordinary patterns', async (t) => {
  const run = (source: string, context: Record<string, unknown> = {}) => {
    const compiled = compileCondition(source, PRE_RISK_ENV);
    if (!compiled.ok) throw new Error(compiled.message);
    return compiled.program({ context } as unknown as Record<string, unknown>);
  };
  t.equal(run(`'hello'.matches('h.*o')`), true);
  t.equal(run(`'hello'.matches('ell')`), true, 'a search, not a full match');
  t.equal(run(`'hello'.matches('^ell')`), false);
  t.equal(run(`'OPS-001'.matches('^[A-Z]{3}-[0-9]{3}$')`), true);
  t.equal(run(`'ops-001'.matches('(?i)^[A-Z]{3}-[0-9]{3}$')`), true, 'RE2 flags');
  t.equal(run(`'naïve'.matches('^na.ve$')`), true, 'a code point is one character');
  t.equal(run(`context.code.matches(context.pattern)`, { code: 'abc', pattern: 'b+' }), true, 'a pattern from the context');
  t.equal(run(`context.tags.exists(x, x.matches('^prod-'))`, { tags: ['dev', 'prod-eu'] }), true, 'inside a macro');
});

t.test('the backtracking pattern runs in linear time', async (t) => {
  // ^(a+)+$ against "aaa…a!" is exponential for a backtracking engine (seconds at 30 characters).
  // Counted, not timed: the meter allows input × pattern units, and this input is 100,000 long.
  const input = `${'a'.repeat(99_999)}!`;
  t.equal(metered(10_000_000, () => matchesRe2(input, '^(a+)+$')), false);
  const result = compilePolicy(policy(`context.s.matches('^(a+)+$')`));
  t.ok(result.ok, 'RE2 accepts the pattern: it cannot backtrack');
  t.equal(decide(result, { s: `${'a'.repeat(40)}!` }).decision, 'allow');
  t.equal(decide(result, { s: 'aaaa' }).decision, 'deny');
});

t.test('syntax RE2 does not have is refused when written, with the path', async (t) => {
  for (const pattern of ['(a)\\\\1', '^(?=a)a', '(?<!x)y', 'a(?!b)']) {
    const result = compilePolicy(policy(`context.s.matches('${pattern}')`));
    t.notOk(result.ok, `${pattern} is refused`);
    const error = result.ok ? undefined : result.errors[0];
    t.equal(error?.path, 'action_classes.0.rules.0.when', pattern);
    t.match(error?.message, /regular expression .* is not supported: .*RE2 syntax/, pattern);
  }
  const compiled = compileCondition(`context.s.matches('(a)\\\\1')`, RULE_ENV);
  t.equal(compiled.ok, false);
});

t.test('an unsupported pattern computed at evaluation denies with CONDITION_ERROR', async (t) => {
  const result = compilePolicy(policy(`context.s.matches(context.p)`));
  const decision = decide(result, { s: 'aa', p: '(a)\\1' });
  t.equal(decision.decision, 'deny');
  t.same(decision.reasonCodes, ['CONDITION_ERROR']);
  t.match(decision.remediation[0]?.message, /not supported/);
});

t.test('type errors name `matches`, not the internal function', async (t) => {
  const compiled = compileCondition(`context.n == 1 && 1.matches('a')`, RULE_ENV);
  t.equal(compiled.ok, false);
  t.match(compiled.ok ? '' : compiled.message, /int\.matches\(string\)/);
  t.notMatch(compiled.ok ? '' : compiled.message, /matches_re2/);
});
