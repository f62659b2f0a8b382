/**
 * The example policy (config/policies/default.yaml) as a table: request → decision, reason codes
 * (exact, in order) and risk score (exact), per action family; then precedence, approvals and
 * the fail-closed paths, some with small policies of their own.
 */
import { readFileSync } from 'node:fs';
import t from 'tap';
import { compilePolicy, compilePolicyDocument } from '../../authority/policy/compile.js';
import type { CheckedApproval, CompiledPolicy, Decision, DecisionInput } from '../../authority/policy/types.js';
import { repoPath } from '../helpers/repo.js';

const compiled = compilePolicy(readFileSync(repoPath('config', 'policies', 'default.yaml'), 'utf8'));
if (!compiled.ok) throw new Error(`example policy: ${JSON.stringify(compiled.errors)}`);
const policy: CompiledPolicy = compiled.policy;

/** Monday 10:00 UTC: inside the deploy change window. */
const IN_WINDOW = new Date('2025-06-02T10:00:00Z');
/** Saturday 03:00 UTC: outside it. */
const OUTSIDE_WINDOW = new Date('2025-06-07T03:00:00Z');

const APPROVAL: CheckedApproval = { id: 'apr_1', kind: 'approval', approvedBy: ['carol'] };
const ESCALATION: CheckedApproval = { id: 'esc_1', kind: 'escalation', approvedBy: ['carol', 'dave'] };

interface Row {
  name: string;
  action: string;
  actor: string;
  context: Record<string, unknown>;
  approvals?: CheckedApproval[];
  now?: Date;
  decision: Decision;
  reasons: string[];
  risk: number;
  actionClass?: string | null;
}

const decideRow = (row: Pick<Row, 'action' | 'actor' | 'context' | 'approvals' | 'now'>, explain = false) =>
  policy.decide({
    action_type: row.action,
    actor_id: row.actor,
    context: row.context,
    approvals: row.approvals ?? [],
    now: row.now ?? IN_WINDOW,
    explain,
  });

const PROD = { environment: 'production', checks_passed: true, commit_sha: 'abc123' };
const tool = (id: string, extra: Record<string, unknown> = {}) => ({ target: { type: 'tool', id }, ...extra });

const TABLE: Record<string, Row[]> = {
  deploy: [
    { name: 'in the change window', action: 'deploy.production', actor: 'ci-deployer', context: PROD, decision: 'allow', reasons: ['IN_CHANGE_WINDOW'], risk: 0.3 },
    { name: 'outside the window', action: 'deploy.production', actor: 'ci-deployer', context: PROD, now: OUTSIDE_WINDOW, decision: 'hold', reasons: ['OUTSIDE_CHANGE_WINDOW'], risk: 0.5 },
    { name: 'outside the window, approved', action: 'deploy.production', actor: 'ci-deployer', context: PROD, now: OUTSIDE_WINDOW, approvals: [APPROVAL], decision: 'allow', reasons: ['APPROVED_OUTSIDE_CHANGE_WINDOW'], risk: 0.5 },
    { name: 'on-call emergency fix', action: 'deploy.production', actor: 'alice', context: { ...PROD, incident_id: 'INC-7' }, now: OUTSIDE_WINDOW, decision: 'allow', reasons: ['ONCALL_EMERGENCY_CHANGE'], risk: 0.6 },
    { name: 'incident id from a non-on-call deployer', action: 'deploy.production', actor: 'ci-deployer', context: { ...PROD, incident_id: 'INC-7' }, now: OUTSIDE_WINDOW, decision: 'hold', reasons: ['OUTSIDE_CHANGE_WINDOW'], risk: 0.5 },
    { name: 'failed checks', action: 'deploy.production', actor: 'ci-deployer', context: { ...PROD, checks_passed: false }, decision: 'deny', reasons: ['CHECKS_FAILED', 'IN_CHANGE_WINDOW'], risk: 0.3 },
    { name: 'checks not reported', action: 'deploy.production', actor: 'ci-deployer', context: { environment: 'production' }, decision: 'allow', reasons: ['IN_CHANGE_WINDOW'], risk: 0.4 },
    { name: 'wrong environment', action: 'deploy.production', actor: 'ci-deployer', context: { ...PROD, environment: 'staging' }, decision: 'deny', reasons: ['ENVIRONMENT_MISMATCH', 'IN_CHANGE_WINDOW'], risk: 0.3 },
    { name: 'an engineer may not deploy production', action: 'deploy.production', actor: 'carol', context: PROD, decision: 'deny', reasons: ['ACTOR_NOT_AUTHORIZED'], risk: 0.3 },
    { name: 'staging via the prefix class', action: 'deploy.staging', actor: 'carol', context: { environment: 'staging' }, decision: 'allow', reasons: ['DEFAULT_ALLOW'], risk: 0.1, actionClass: 'deploy.nonproduction' },
    { name: 'production via the prefix class', action: 'deploy.web', actor: 'ci-deployer', context: { environment: 'production' }, decision: 'deny', reasons: ['PRODUCTION_NEEDS_PRODUCTION_ACTION'], risk: 0.1, actionClass: 'deploy.nonproduction' },
  ],
  payments: [
    { name: 'smoke: 500 USD', action: 'payments.wire', actor: 'finance-bot', context: { environment: 'production', amount_usd: 500 }, decision: 'allow', reasons: ['AMOUNT_WITHIN_LIMIT'], risk: 0.3, actionClass: 'payments' },
    { name: 'smoke: 50,000 USD', action: 'payments.wire', actor: 'finance-bot', context: { environment: 'production', amount_usd: 50000 }, decision: 'hold', reasons: ['AMOUNT_OVER_HOLD_THRESHOLD'], risk: 0.5 },
    { name: 'smoke: 2,000,000 USD (hold + escalate → escalate)', action: 'payments.wire', actor: 'finance-bot', context: { environment: 'production', amount_usd: 2000000 }, decision: 'escalate', reasons: ['AMOUNT_OVER_ESCALATION_THRESHOLD', 'AMOUNT_OVER_HOLD_THRESHOLD'], risk: 0.8 },
    { name: 'a fractional amount with an account code', action: 'payments.wire', actor: 'erin', context: { environment: 'production', amount_usd: 500.5, account_code: 'ACCT-1' }, decision: 'allow', reasons: ['AMOUNT_WITHIN_LIMIT'], risk: 0.2 },
    { name: 'exactly the limit', action: 'payments.wire', actor: 'finance-bot', context: { amount_usd: 10000, account_code: 'ACCT-1' }, decision: 'allow', reasons: ['AMOUNT_WITHIN_LIMIT'], risk: 0.2 },
    { name: 'blocked account', action: 'payments.wire', actor: 'finance-bot', context: { amount_usd: 500, account_code: 'ACCT-SANCTIONED-001' }, decision: 'deny', reasons: ['ACCOUNT_BLOCKED', 'AMOUNT_WITHIN_LIMIT'], risk: 0.2 },
    { name: 'no amount', action: 'payments.wire', actor: 'finance-bot', context: { environment: 'production' }, decision: 'deny', reasons: ['AMOUNT_REQUIRED'], risk: 0.3 },
    { name: '50,000 USD approved', action: 'payments.wire', actor: 'finance-bot', context: { amount_usd: 50000, account_code: 'ACCT-1' }, approvals: [APPROVAL], decision: 'allow', reasons: ['PAYMENT_APPROVED'], risk: 0.4 },
    { name: '2,000,000 USD with a plain approval: still a vote', action: 'payments.wire', actor: 'finance-bot', context: { amount_usd: 2000000, account_code: 'ACCT-1' }, approvals: [APPROVAL], decision: 'escalate', reasons: ['AMOUNT_OVER_ESCALATION_THRESHOLD', 'PAYMENT_APPROVED'], risk: 0.7 },
    { name: '2,000,000 USD after the vote', action: 'payments.wire', actor: 'finance-bot', context: { amount_usd: 2000000, account_code: 'ACCT-1' }, approvals: [ESCALATION], decision: 'allow', reasons: ['PAYMENT_APPROVED'], risk: 0.7 },
    { name: 'blocked account, approved: still denied', action: 'payments.wire', actor: 'finance-bot', context: { amount_usd: 50000, account_code: 'ACCT-FROZEN-042' }, approvals: [APPROVAL], decision: 'deny', reasons: ['ACCOUNT_BLOCKED', 'PAYMENT_APPROVED'], risk: 0.4 },
    { name: 'ACH through the same class', action: 'payments.ach', actor: 'erin', context: { amount_usd: 20, account_code: 'ACCT-2' }, decision: 'allow', reasons: ['AMOUNT_WITHIN_LIMIT'], risk: 0.2, actionClass: 'payments' },
    { name: 'a deployer may not pay', action: 'payments.wire', actor: 'ci-deployer', context: { amount_usd: 20 }, decision: 'deny', reasons: ['ACTOR_NOT_AUTHORIZED'], risk: 0.2 },
  ],
  'access grant': [
    { name: 'ordinary role for a day', action: 'access.grant', actor: 'iam-bot', context: { role: 'viewer', grantee: 'carol', duration_hours: 24 }, decision: 'allow', reasons: ['ORDINARY_ROLE'], risk: 0.3 },
    { name: 'ordinary role, no expiry', action: 'access.grant', actor: 'iam-bot', context: { role: 'viewer', grantee: 'carol' }, decision: 'hold', reasons: ['LONG_LIVED_GRANT', 'ORDINARY_ROLE'], risk: 0.4 },
    { name: 'ordinary role, no expiry, approved', action: 'access.grant', actor: 'iam-bot', context: { role: 'viewer', grantee: 'carol' }, approvals: [APPROVAL], decision: 'allow', reasons: ['ORDINARY_ROLE'], risk: 0.4 },
    { name: 'privileged role', action: 'access.grant', actor: 'iam-bot', context: { role: 'admin', grantee: 'carol', duration_hours: 8 }, decision: 'escalate', reasons: ['PRIVILEGED_ROLE'], risk: 0.7 },
    { name: 'privileged role, no expiry (hold + escalate → escalate)', action: 'access.grant', actor: 'iam-bot', context: { role: 'admin', grantee: 'carol' }, decision: 'escalate', reasons: ['PRIVILEGED_ROLE', 'LONG_LIVED_GRANT'], risk: 0.8 },
    { name: 'privileged role after the vote', action: 'access.grant', actor: 'iam-bot', context: { role: 'admin', grantee: 'carol', duration_hours: 8 }, approvals: [ESCALATION], decision: 'allow', reasons: ['PRIVILEGED_ROLE_APPROVED'], risk: 0.7 },
    { name: 'self grant (deny + hold + allow → deny)', action: 'access.grant', actor: 'frank', context: { role: 'viewer', grantee: 'frank' }, decision: 'deny', reasons: ['SELF_GRANT', 'LONG_LIVED_GRANT', 'ORDINARY_ROLE'], risk: 0.4 },
    { name: 'no grantee', action: 'access.grant', actor: 'frank', context: { role: 'viewer', duration_hours: 1 }, decision: 'deny', reasons: ['GRANT_INCOMPLETE', 'ORDINARY_ROLE'], risk: 0.3 },
  ],
  'data release': [
    { name: 'no personal data', action: 'data.release', actor: 'grace', context: { dataset: 'sales_2024', destination: 'warehouse', destination_type: 'internal' }, decision: 'allow', reasons: ['NO_PERSONAL_DATA'], risk: 0.2 },
    { name: 'PII', action: 'data.export', actor: 'export-bot', context: { dataset: 'customers', contains_pii: true }, decision: 'escalate', reasons: ['PERSONAL_DATA_RELEASE'], risk: 0.6 },
    { name: 'PII after the vote', action: 'data.export', actor: 'export-bot', context: { dataset: 'customers', contains_pii: true }, approvals: [ESCALATION], decision: 'allow', reasons: ['PERSONAL_DATA_RELEASE_APPROVED'], risk: 0.6 },
    { name: 'bulk, external', action: 'data.export', actor: 'export-bot', context: { dataset: 'clicks', destination_type: 'external', record_count: 250000 }, decision: 'hold', reasons: ['BULK_EXTERNAL_RELEASE', 'NO_PERSONAL_DATA'], risk: 0.5 },
    { name: 'no dataset', action: 'data.release', actor: 'grace', context: {}, decision: 'deny', reasons: ['DATASET_REQUIRED'], risk: 0.2 },
    { name: 'data.delete is no release (match.when)', action: 'data.delete', actor: 'grace', context: { dataset: 'x' }, decision: 'deny', reasons: ['NO_MATCHING_CLASS'], risk: 0, actionClass: null },
  ],
  'agent tools': [
    { name: 'smoke: send_email', action: 'agent.tool.invoke', actor: 'support-agent', context: tool('send_email'), decision: 'allow', reasons: ['ALLOWLISTED_TOOL'], risk: 0.3, actionClass: 'agent.tool' },
    { name: 'smoke: drop_database', action: 'agent.tool.invoke', actor: 'support-agent', context: tool('drop_database'), decision: 'deny', reasons: ['DESTRUCTIVE_TOOL'], risk: 0.9 },
    { name: 'drop_database, approved: still denied', action: 'agent.tool.invoke', actor: 'support-agent', context: tool('drop_database'), approvals: [APPROVAL], decision: 'deny', reasons: ['DESTRUCTIVE_TOOL'], risk: 0.9 },
    { name: 'read-only tool', action: 'agent.tool.invoke', actor: 'ops-agent', context: tool('search_kb', { environment: 'production' }), decision: 'allow', reasons: ['READ_ONLY_TOOL'], risk: 0.1 },
    { name: 'bulk email', action: 'agent.tool.invoke', actor: 'support-agent', context: tool('send_email', { recipient_count: 500 }), decision: 'hold', reasons: ['BULK_EMAIL', 'ALLOWLISTED_TOOL'], risk: 0.5 },
    { name: 'small refund', action: 'agent.tool.invoke', actor: 'support-agent', context: tool('issue_refund', { amount_usd: 50 }), decision: 'allow', reasons: ['SMALL_REFUND'], risk: 0.3 },
    { name: 'large refund', action: 'agent.tool.invoke', actor: 'support-agent', context: tool('issue_refund', { amount_usd: 500 }), decision: 'hold', reasons: ['REFUND_NEEDS_APPROVAL'], risk: 0.3 },
    { name: 'large refund, approved', action: 'agent.tool.invoke', actor: 'support-agent', context: tool('issue_refund', { amount_usd: 500 }), approvals: [APPROVAL], decision: 'allow', reasons: ['REFUND_APPROVED'], risk: 0.3 },
    { name: 'an unlisted tool', action: 'agent.tool.invoke', actor: 'support-agent', context: tool('mine_bitcoin'), decision: 'deny', reasons: ['DEFAULT_DENY'], risk: 0.1 },
    { name: 'no tool target (next class)', action: 'agent.tool.invoke', actor: 'support-agent', context: { target: { type: 'repo', id: 'x' } }, decision: 'deny', reasons: ['TOOL_TARGET_REQUIRED'], risk: 0, actionClass: 'agent.tool.malformed' },
    { name: 'not an agent', action: 'agent.tool.invoke', actor: 'demo-agent', context: tool('send_email'), decision: 'deny', reasons: ['ACTOR_NOT_AUTHORIZED'], risk: 0.1 },
  ],
  demo: [
    { name: 'smoke: demo-agent', action: 'demo.echo', actor: 'demo-agent', context: { environment: 'dev', target: { type: 'demo', id: 'hello' } }, decision: 'allow', reasons: ['DEFAULT_ALLOW'], risk: 0.05, actionClass: 'demo' },
    { name: 'smoke: unknown-bot', action: 'demo.echo', actor: 'unknown-bot', context: { environment: 'dev', target: { type: 'demo', id: 'hello' } }, decision: 'deny', reasons: ['ACTOR_NOT_AUTHORIZED'], risk: 0.05, actionClass: 'demo' },
    { name: 'never in production', action: 'demo.echo', actor: 'demo-agent', context: { environment: 'production' }, decision: 'deny', reasons: ['DEMO_NOT_IN_PRODUCTION'], risk: 0.05 },
    { name: 'any demo action', action: 'demo.anything.else', actor: 'demo-agent', context: {}, decision: 'allow', reasons: ['DEFAULT_ALLOW'], risk: 0.05 },
  ],
};

for (const [family, rows] of Object.entries(TABLE)) {
  t.test(`example policy: ${family}`, async (t) => {
    for (const row of rows) {
      const got = decideRow(row);
      t.same(
        { decision: got.decision, reasons: got.reasonCodes, risk: got.risk.score },
        { decision: row.decision, reasons: row.reasons, risk: row.risk },
        row.name,
      );
      if (row.actionClass !== undefined) t.equal(got.actionClass, row.actionClass, `${row.name}: class`);
      t.equal(got.escalation !== null, got.decision === 'escalate', `${row.name}: escalation settings only on escalate`);
      t.equal(got.hold !== null, got.decision === 'hold', `${row.name}: hold settings only on hold`);
      t.equal(got.explanation, null, `${row.name}: no explanation unless asked`);
    }
  });
}

t.test('the smoke contract in full', async (t) => {
  const demo = decideRow({ action: 'demo.echo', actor: 'demo-agent', context: { environment: 'dev', target: { type: 'demo', id: 'x-1' } } });
  t.match(demo, { decision: 'allow', mode: 'live', permit: { required: true, lifetimeSeconds: 60, bind: [] }, remediation: [] });
  const stranger = decideRow({ action: 'demo.echo', actor: 'unknown-bot', context: { environment: 'dev', target: { type: 'demo', id: 'x-1' } } });
  t.match(stranger, { decision: 'deny', reasonCodes: ['ACTOR_NOT_AUTHORIZED'], remediation: [{ code: 'REQUEST_AUTHORITY' }] });

  const wire = (amount_usd: number) => decideRow({ action: 'payments.wire', actor: 'finance-bot', context: { environment: 'production', amount_usd } });
  t.match(wire(500), { decision: 'allow', permit: { required: true, lifetimeSeconds: 120, bind: ['account_code'] } });
  t.match(wire(50000), { decision: 'hold', hold: { timeoutMs: 7_200_000 }, escalation: null, remediation: [{ code: 'APPROVAL_REQUIRED' }, { code: 'REDUCE_AMOUNT' }] });
  t.same(wire(2000000).escalation, { quorum: 'two_thirds', approverPoolSize: 3, minApprovers: 2, timeoutMs: 14_400_000, fallbackDecision: 'reject' });
  t.match(wire(2000000).remediation[0]?.message, /two thirds of 3 approvers/);
  t.same(wire(2000000).risk, {
    score: 0.8,
    base: 0.2,
    band: 'critical',
    factors: [
      { name: 'large_amount', weight: 0.2, description: 'More than 10,000 USD' },
      { name: 'very_large_amount', weight: 0.3, description: 'More than 1,000,000 USD' },
      { name: 'no_account_code', weight: 0.1, description: 'No account code given' },
    ],
  });

  t.equal(decideRow({ action: 'agent.tool.invoke', actor: 'support-agent', context: tool('send_email') }).decision, 'allow');
  t.equal(decideRow({ action: 'agent.tool.invoke', actor: 'support-agent', context: tool('drop_database') }).decision, 'deny');
});

t.test('approvals: a hold becomes an allow, a deny stays a deny', async (t) => {
  const held = { action: 'payments.wire', actor: 'finance-bot', context: { amount_usd: 50000, account_code: 'ACCT-1' } };
  t.equal(decideRow(held).decision, 'hold');
  t.equal(decideRow({ ...held, approvals: [APPROVAL] }).decision, 'allow');
  const blocked = { ...held, context: { ...held.context, account_code: 'ACCT-SANCTIONED-002' } };
  t.equal(decideRow({ ...blocked, approvals: [APPROVAL, ESCALATION] }).decision, 'deny');
  t.match(decideRow({ ...blocked, approvals: [APPROVAL] }).remediation, [{ code: 'USE_APPROVED_ACCOUNT' }]);
});

t.test('explain: every class, the authority check, the risk factors and every rule', async (t) => {
  const got = decideRow({ action: 'deploy.production', actor: 'ci-deployer', context: PROD, now: OUTSIDE_WINDOW }, true);
  t.same(
    got.explanation?.map((step) => [step.rule, step.matched, step.decision]),
    [
      ['class:deploy.production', true, null],
      ['authority', true, null],
      ['risk:outside_change_window', true, null],
      ['risk:emergency_change', false, null],
      ['risk:checks_unknown', false, null],
      ['rule:wrong-environment', false, null],
      ['rule:checks-failed', false, null],
      ['rule:in-window', false, null],
      ['rule:emergency-fix', false, null],
      ['rule:outside-window', true, 'hold'],
      ['rule:approved-outside-window', false, null],
    ],
  );
  t.match(got.explanation?.[9], { condition: /approvals.count == 0/, error: null });
  t.same(got.matchedRules, ['outside-window']);

  const fallthrough = decideRow({ action: 'agent.tool.invoke', actor: 'support-agent', context: {} }, true);
  t.same(
    fallthrough.explanation?.map((step) => [step.rule, step.matched, step.decision]),
    [
      ['class:agent.tool', false, null],
      ['class:agent.tool.malformed', true, null],
      ['authority', true, null],
      ['rule:tool-target-required', true, 'deny'],
    ],
  );
  const none = decideRow({ action: 'payments.wire', actor: 'finance-bot', context: { amount_usd: 1, account_code: 'A' } }, true);
  t.match(none.explanation?.at(-1), { rule: 'rule:approved', matched: false });
  const byDefault = decideRow({ action: 'demo.echo', actor: 'demo-agent', context: {} }, true);
  t.match(byDefault.explanation?.at(-1), { rule: 'default', matched: true, decision: 'allow' });
});

t.test('fail closed: no class, no authority', async (t) => {
  const none = decideRow({ action: 'rockets.launch', actor: 'alice', context: {} });
  t.match(none, {
    decision: 'deny',
    reasonCodes: ['NO_MATCHING_CLASS'],
    actionClass: null,
    matchedRules: [],
    mode: 'live',
    permit: { required: true, lifetimeSeconds: 60, bind: [] },
    risk: { score: 0, band: 'low', factors: [] },
    remediation: [{ code: 'REQUEST_POLICY_CHANGE', message: /rockets\.launch/ }],
  });
  const stranger = decideRow({ action: 'payments.wire', actor: 'mallory', context: { amount_usd: 5 } }, true);
  t.match(stranger, { decision: 'deny', reasonCodes: ['ACTOR_NOT_AUTHORIZED'], actionClass: 'payments', remediation: [{ code: 'REQUEST_AUTHORITY', message: /mallory/ }] });
  t.same(
    stranger.explanation?.map((step) => step.rule),
    ['class:payments', 'authority'],
    'no rule or risk condition runs for an actor without authority',
  );
});

/** A small policy whose conditions can fail at run time. */
const fragile = compilePolicyDocument({
  version: 1,
  actor_groups: { ops: ['op'] },
  action_classes: [
    {
      id: 'guarded',
      match: { action_type: 'jobs.run', when: 'context.queue == "main"' },
      actors: ['*'],
      risk: { base: 0.1, factors: [{ name: 'per_item', when: '100 / size(context.items) > 10', weight: 0.2, description: 'Few items' }] },
      rules: [
        { id: 'ok', when: 'true', decision: 'allow', reason: 'OK' },
        { id: 'owner', when: 'context.target.owner == "ops"', decision: 'allow', reason: 'OWNED' },
      ],
    },
  ],
});

t.test('fail closed: a condition that cannot be evaluated denies CONDITION_ERROR', async (t) => {
  if (!fragile.ok) throw new Error(JSON.stringify(fragile.errors));
  const run = (context: Record<string, unknown>) =>
    fragile.policy.decide({ action_type: 'jobs.run', actor_id: 'op', context, approvals: [], now: IN_WINDOW, explain: true } satisfies DecisionInput);

  const missingNested = run({ queue: 'main', items: [1], target: { id: 'x' } });
  t.match(missingNested, { decision: 'deny', reasonCodes: ['CONDITION_ERROR'], actionClass: 'guarded', matchedRules: ['ok'] });
  t.match(missingNested.remediation, [{ code: 'FIX_POLICY_CONDITION', message: /rule "owner" \(action_classes\.0\.rules\.1\.when\).*No such key: owner/ }]);
  t.match(missingNested.explanation?.at(-1), { rule: 'rule:owner', condition: 'context.target.owner == "ops"', matched: false, error: 'No such key: owner' });
  t.equal(missingNested.risk.score, 0.3, 'the risk was computed before the rules');

  const divideByZero = run({ queue: 'main', items: [], target: { owner: 'ops' } });
  t.match(divideByZero, { decision: 'deny', reasonCodes: ['CONDITION_ERROR'], matchedRules: [], risk: { score: 0.1, factors: [] } });
  t.match(divideByZero.explanation?.find((step) => step.error !== null), { rule: 'risk:per_item', condition: '100 / size(context.items) > 10', error: /division by zero/ });
  t.notOk(divideByZero.explanation?.some((step) => step.rule.startsWith('rule:')), 'rules do not run without a risk score');

  const classError = run({ items: [1] });
  t.match(classError, { decision: 'deny', reasonCodes: ['CONDITION_ERROR'], actionClass: null, remediation: [{ message: /match\.when of class "guarded"/ }] });

  t.match(run({ queue: 'main', items: [1, 2], target: { owner: 'ops' } }), { decision: 'allow', reasonCodes: ['OK', 'OWNED'] });
  t.match(run({ queue: 'main', items: ['a'], target: { owner: 'ops' } }), { decision: 'allow', risk: { score: 0.3 } }, 'a double item count is fine: size() is an int');
});

t.test('risk: clamped, rounded, banded; a number compares the same as int or double', async (t) => {
  const scored = compilePolicyDocument({
    version: 1,
    action_classes: [
      {
        id: 'r',
        match: { action_type: 'r.x' },
        actors: ['*'],
        risk: {
          base: 0.1,
          factors: [
            { name: 'a', when: 'context.amount_usd > 10000', weight: 0.2, description: 'a' },
            { name: 'b', when: 'context.amount_usd >= 10000.5', weight: 0.9, description: 'b' },
            { name: 'c', when: 'context.amount_usd < 0', weight: -0.5, description: 'c' },
          ],
        },
        rules: [{ id: 'score', when: 'risk.score >= 0.3 && risk.band == "medium" && "a" in risk.factors', decision: 'hold', reason: 'MEDIUM' }],
        default: 'allow',
        mode: 'shadow',
        hold: { timeout_seconds: 60 },
      },
    ],
  });
  if (!scored.ok) throw new Error(JSON.stringify(scored.errors));
  const risk = (amount_usd: number) => scored.policy.decide({ action_type: 'r.x', actor_id: 'x', context: { amount_usd }, approvals: [], now: IN_WINDOW, explain: false });
  t.match(risk(500), { risk: { score: 0.1, band: 'low' }, decision: 'allow', mode: 'shadow' });
  t.match(risk(10000.25), { risk: { score: 0.3, band: 'medium' }, decision: 'hold', hold: { timeoutMs: 60_000 } }, '0.1 + 0.2 is reported as 0.3');
  t.match(risk(20000), { risk: { score: 1, band: 'critical' } }, 'clamped at 1');
  t.match(risk(-1), { risk: { score: 0, band: 'low' } }, 'clamped at 0');
});
