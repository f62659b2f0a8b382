/**
 * Which denials no argument could change (tool-policy.ts), read from the policy's rule trace: the
 * conservative reading of conditions, and each way a deny can be certain or not.
 *
 * @example
 *   npx tap --disable-coverage dist/test/unit/mcp-tool-policy.test.js
 */
import t from 'tap';
import type { EvaluateResponse } from '../../shared/wire/evaluate.js';
import { deniedWhateverTheArguments, readsOnlyTheTool } from '../../proxy/mcp/tool-policy.js';

type Step = { rule: string; condition: string | null; matched: boolean; decision: string | null; error: string | null };
const step = (rule: string, condition: string | null, matched: boolean, decision: string | null = null, error: string | null = null): Step => ({ rule, condition, matched, decision, error });
const answer = (decision: string, explanation: unknown) => ({ decision, decisionObject: { explanation } }) as unknown as EvaluateResponse;

t.test('a condition reads only the tool when it names nothing but action, actor and context.target', async (t) => {
  t.ok(readsOnlyTheTool('context.target.id == "helpdesk/drop_tables" && actor.id != "agent:dba"'));
  t.ok(readsOnlyTheTool("action.type.startsWith('agent.') && 'context' in actor.groups"), 'words inside strings are not variables');
  t.notOk(readsOnlyTheTool('context.amount_usd > 100'), 'another fact: the arguments bring it');
  t.notOk(readsOnlyTheTool('has(context.ticket)'));
  t.notOk(readsOnlyTheTool('context["target"].id == "x"'), 'context read any other way');
  t.notOk(readsOnlyTheTool('now.getHours() > 18'), 'the clock');
  t.notOk(readsOnlyTheTool('risk.score > 0.5'), 'risk, which conditions on the call feed');
  t.notOk(readsOnlyTheTool('approvals.count == 0'), 'approvals');
  t.notOk(readsOnlyTheTool('actor.id == "a\\"b" || context.x'), 'an escape: not read with certainty');
  t.notOk(readsOnlyTheTool('actor.id == "x" // context.amount'), 'a comment: not read with certainty');
  t.notOk(readsOnlyTheTool('actor.id == "x'), 'an unclosed string');
});

t.test('a deny is certain only when the trace shows no argument could change it', async (t) => {
  const cls = step('class:agent.tool', null, true);
  t.ok(deniedWhateverTheArguments(answer('deny', [])), 'no class for the action');
  t.ok(deniedWhateverTheArguments(answer('deny', [cls, step('authority', null, false, 'deny')])), 'the actor is not authorized');
  t.ok(
    deniedWhateverTheArguments(answer('deny', [cls, step('authority', null, true), step('rule:destructive', 'context.target.id == "x"', true, 'deny'), step('rule:vip', 'context.ticket == "V"', false)])),
    'a deny rule on the tool matched, whatever the other rules read',
  );
  t.ok(deniedWhateverTheArguments(answer('deny', [cls, step('authority', null, true), step('rule:a', 'actor.id == "x"', false), step('default', null, true, 'deny')])), "the class's default deny, no rule reading the call");

  t.notOk(deniedWhateverTheArguments(answer('deny', [cls, step('authority', null, true), step('rule:big', 'context.amount_usd > 100', true, 'deny')])), 'a deny on an argument');
  t.notOk(deniedWhateverTheArguments(answer('deny', [cls, step('authority', null, true), step('rule:big', 'context.amount_usd > 100', false), step('default', null, true, 'deny')])), 'a default deny a rule on an argument could lift');
  t.notOk(deniedWhateverTheArguments(answer('deny', [step('class:big', 'context.amount_usd > 100', false)])), 'no class, but one on an argument might match');
  t.notOk(deniedWhateverTheArguments(answer('deny', [step('class:c', 'context.amount_usd > 1', false, null, 'no such key: amount_usd')])), 'a condition that failed');
  t.notOk(deniedWhateverTheArguments(answer('deny', [step('class:a', 'context.ticket == "x"', false), cls, step('authority', null, false, 'deny')])), 'an earlier class on an argument might be chosen instead');
  t.notOk(deniedWhateverTheArguments(answer('hold', [cls, step('authority', null, true)])), 'a hold');
  t.notOk(deniedWhateverTheArguments(answer('deny', null)), 'no trace');
  t.notOk(deniedWhateverTheArguments(answer('deny', [{ rule: 'class:x' }])), 'a trace it cannot read');
});
