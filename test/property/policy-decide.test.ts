/**
 * Random facts never make the decision engine throw: any actor, any action type, any JSON in the
 * context (including the keys the example policy reads, with values of the wrong type), any
 * approvals, any instant (even an invalid Date). The decision is always one of the four, the
 * risk score in [0, 1], and the settings fields agree with the decision.
 */
import { readFileSync } from 'node:fs';
import fc from 'fast-check';
import t from 'tap';
import { compilePolicy, compilePolicyDocument } from '../../authority/policy/compile.js';
import type { CompiledPolicy, DecisionInput } from '../../authority/policy/types.js';
import { repoPath } from '../helpers/repo.js';

const example = compilePolicy(readFileSync(repoPath('config', 'policies', 'default.yaml'), 'utf8'));
/** Conditions that fail on most inputs: the error paths get exercised too. */
const fragile = compilePolicyDocument({
  version: 1,
  action_classes: [
    {
      id: 'fragile',
      match: { action_type: 'payments.*', when: 'context.amount_usd * 2.0 > 1.0' },
      actors: ['*'],
      risk: { base: 0.5, factors: [{ name: 'f', when: '100 / size(context.items) > 1', weight: 0.7, description: 'f' }] },
      rules: [
        { id: 'a', when: 'context.target.id.startsWith("x")', decision: 'allow', reason: 'A' },
        { id: 'b', when: 'now.getHours(context.tz) > 3', decision: 'escalate', reason: 'B' },
        { id: 'c', when: 'dyn(context.x)', decision: 'hold', reason: 'C' },
      ],
    },
  ],
});
if (!example.ok || !fragile.ok) throw new Error('policies must compile');

const ACTORS = ['finance-bot', 'alice', 'ci-deployer', 'iam-bot', 'grace', 'support-agent', 'demo-agent', 'unknown-bot'];
const ACTIONS = ['payments.wire', 'deploy.production', 'deploy.staging', 'access.grant', 'data.release', 'data.export', 'agent.tool.invoke', 'demo.echo', 'nothing'];
const KEYS = ['environment', 'target', 'amount_usd', 'account_code', 'approvals', 'checks_passed', 'incident_id', 'role', 'grantee', 'duration_hours', 'dataset', 'contains_pii', 'destination_type', 'record_count', 'recipient_count', 'items', 'tz', 'x'];

const anyValue = fc.oneof(
  fc.jsonValue(),
  fc.record({ type: fc.oneof(fc.constant('tool'), fc.jsonValue()), id: fc.oneof(fc.constantFrom('send_email', 'drop_database', 'issue_refund'), fc.jsonValue()) }, { requiredKeys: [] }),
  fc.double(),
  fc.constantFrom('production', 'ACCT-SANCTIONED-001', 'admin', 'UTC', 'Not/AZone'),
);

const context = fc.oneof(
  fc.dictionary(fc.string(), fc.jsonValue()),
  fc.dictionary(fc.constantFrom(...KEYS), anyValue),
) as fc.Arbitrary<Record<string, unknown>>;

const input: fc.Arbitrary<DecisionInput> = fc.record({
  action_type: fc.oneof(fc.constantFrom(...ACTIONS), fc.string(), fc.stringMatching(/^[a-z]{1,6}(\.[a-z*]{1,6}){0,3}$/)),
  actor_id: fc.oneof(fc.constantFrom(...ACTORS), fc.string()),
  context,
  approvals: fc.array(
    fc.record({ id: fc.string(), kind: fc.constantFrom('approval' as const, 'escalation' as const), approvedBy: fc.array(fc.string(), { maxLength: 3 }) }),
    { maxLength: 3 },
  ),
  now: fc.date(),
  explain: fc.boolean(),
});

const DECISIONS = new Set(['allow', 'deny', 'hold', 'escalate']);

const check = (policy: CompiledPolicy) => (facts: DecisionInput) => {
  const decided = policy.decide(facts);
  if (!DECISIONS.has(decided.decision)) throw new Error(`decision ${decided.decision}`);
  const { score } = decided.risk;
  if (!(score >= 0 && score <= 1)) throw new Error(`risk score ${score}`);
  if (decided.reasonCodes.length === 0) throw new Error('no reason code');
  if ((decided.escalation !== null) !== (decided.decision === 'escalate')) throw new Error('escalation settings disagree');
  if ((decided.hold !== null) !== (decided.decision === 'hold')) throw new Error('hold settings disagree');
  if ((decided.explanation !== null) !== facts.explain) throw new Error('explanation disagrees with explain');
};

t.test('random facts against the example policy: never a throw, always a valid decision', async (t) => {
  t.doesNotThrow(() => fc.assert(fc.property(input, check(example.policy)), { numRuns: 1000 }), '1000 random requests, each a valid decision');
});

t.test('random facts against fragile conditions: errors become decisions, not exceptions', async (t) => {
  const payments = input.map((facts) => ({ ...facts, action_type: 'payments.wire' }));
  t.doesNotThrow(() => fc.assert(fc.property(payments, check(fragile.policy)), { numRuns: 500 }), '500 random requests, each a valid decision');
});
