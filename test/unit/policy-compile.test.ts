/**
 * The policy compiler: every error names its document path and, for text, its line and column;
 * JSON works like YAML; every CEL expression is checked at load; the class matching order.
 */
import { readFileSync } from 'node:fs';
import t from 'tap';
import { compilePolicy, compilePolicyDocument } from '../../authority/policy/compile.js';
import type { CompileResult, DecisionInput, PolicyError } from '../../authority/policy/types.js';
import { repoPath } from '../helpers/repo.js';

/** One payments class; `extra` goes before `rules:` (class keys), `rules` is the rule list. */
const policy = (rules: string, extra = '') => `version: 1
action_classes:
  - id: payments
    match:
      action_type: payments.*
    actors: [finance-bot]
${extra}    rules:
${rules}`;

const SMALL_RULE = `      - id: small
        decision: allow
        reason: SMALL
`;

const errorsOf = (result: CompileResult): PolicyError[] => (result.ok ? [] : result.errors);

const input = (action_type: string, context: Record<string, unknown> = {}): DecisionInput => ({
  action_type,
  actor_id: 'a',
  context,
  approvals: [],
  now: new Date('2025-06-02T10:00:00Z'),
  explain: false,
});

t.test('a YAML syntax error has its line and column', async (t) => {
  const errors = errorsOf(compilePolicy('version: 1\n  bad: indent\naction_classes: []\n'));
  t.ok(errors.length > 0);
  t.match(errors[0], { path: '', message: /^YAML syntax error: /, line: 1, column: 10 });
  t.notMatch(errors[0]?.message ?? '', /\n/, 'one line, no source excerpt');
});

t.test('an unknown key is an error at the key; a missing key names itself', async (t) => {
  const errors = errorsOf(
    compilePolicy(
      policy(`      - id: small
        when: context.amount_usd <= 10000
        decison: allow
        reason: SMALL
`),
    ),
  );
  t.same(errors, [
    { path: 'action_classes.0.rules.0.decision', message: 'missing required key "decision"', line: 8, column: 9 },
    { path: 'action_classes.0.rules.0.decison', message: 'unknown key "decison"', line: 10, column: 9 },
  ]);
});

t.test('a wrong type is an error at the value', async (t) => {
  const errors = errorsOf(compilePolicy(policy(SMALL_RULE, '    permit:\n      lifetime_seconds: sixty\n')));
  t.same(errors, [
    { path: 'action_classes.0.permit.lifetime_seconds', message: 'Invalid input: expected number, received string', line: 8, column: 25 },
  ]);
});

t.test('a CEL syntax error points into the rule\'s when', async (t) => {
  const source = policy(`      - id: small
        when: context.amount_usd <= 10000
        decision: allow
        reason: SMALL
      - id: big
        when: context.amount_usd > > 10000
        decision: hold
        reason: BIG
`);
  const errors = errorsOf(compilePolicy(source));
  t.equal(errors.length, 1);
  t.match(errors[0], { path: 'action_classes.0.rules.1.when', message: /^CEL syntax error: Unexpected token/, line: 13 });
  const line = source.split('\n')[12] ?? '';
  t.equal(line.slice((errors[0]?.column ?? 0) - 1), '> 10000', 'the column is the offending second ">"');
});

t.test('CEL errors inside quoted and block scalars are located on their own line', async (t) => {
  const quoted = errorsOf(
    compilePolicy(policy(`      - id: big
        when: 'has(context.amount_usd) && context.amount_usd >'
        decision: hold
        reason: BIG
`)),
  );
  t.match(quoted, [{ path: 'action_classes.0.rules.0.when', message: /Unexpected token: EOF/, line: 9, column: 63 }]);

  const block = errorsOf(
    compilePolicy(policy(`      - id: big
        when: |
          has(context.amount_usd) &&
            context.amount_usd > 10000 &&
            risk.scor > 0.5
        decision: hold
        reason: BIG
`)),
  );
  t.match(block, [{ path: 'action_classes.0.rules.0.when', message: /CEL type error: No such key: scor/, line: 12, column: 18 }]);
});

t.test('CEL type errors are load-time errors: unknown variables, non-bool conditions, risk in a factor', async (t) => {
  const errors = errorsOf(
    compilePolicy(
      policy(
        `      - id: sum
        when: context.amount_usd + 1
        decision: hold
        reason: BIG
      - id: unknown
        when: foo.bar
        decision: hold
        reason: BIG
`,
        `    risk:
      factors:
        - {name: f, when: 'risk.score > 0.5', weight: 0.1, description: d}
`,
      ),
    ),
  );
  t.match(errors, [
    { path: 'action_classes.0.risk.factors.0.when', message: /Unknown variable: risk/, line: 9, column: 28 },
    { path: 'action_classes.0.rules.0.when', message: /must evaluate to bool, this one evaluates to int/, line: 12 },
    { path: 'action_classes.0.rules.1.when', message: /Unknown variable: foo/, line: 16 },
  ]);
});

t.test('duplicate rule ids, class ids and unknown groups', async (t) => {
  const errors = errorsOf(compilePolicy(policy(`${SMALL_RULE}      - id: small
        decision: hold
        reason: BIG
`)));
  t.same(errors, [{ path: 'action_classes.0.rules.1.id', message: 'duplicate rule id "small"', line: 11, column: 13 }]);

  const classes = errorsOf(
    compilePolicyDocument({
      version: 1,
      action_classes: [
        { id: 'a', match: { action_type: 'x.y', when: 'true' }, actors: ['*'] },
        { id: 'a', match: { action_type: 'x.z' }, actor_groups: ['nope'] },
      ],
    }),
  );
  t.same(classes, [
    { path: 'action_classes.1.id', message: 'duplicate class id "a"', line: null, column: null },
    { path: 'action_classes.1.actor_groups.0', message: 'unknown actor group "nope" (define it under actor_groups)', line: null, column: null },
  ]);
});

t.test('an escalation tier above single_approver needs approver_pool_size', async (t) => {
  const errors = errorsOf(compilePolicy(policy(SMALL_RULE, '    escalation:\n      quorum: two_thirds\n')));
  t.same(errors, [
    {
      path: 'action_classes.0.escalation.approver_pool_size',
      message: 'quorum two_thirds needs approver_pool_size (the number of eligible approvers)',
      line: 8,
      column: 7,
    },
  ]);
  t.ok(compilePolicy(policy(SMALL_RULE, '    escalation:\n      quorum: single_approver\n')).ok, 'single_approver does not');
});

t.test('a permit lifetime over 300 seconds is refused', async (t) => {
  const errors = errorsOf(compilePolicy(policy(SMALL_RULE, '    permit:\n      lifetime_seconds: 301\n')));
  t.same(errors, [
    { path: 'action_classes.0.permit.lifetime_seconds', message: 'lifetime_seconds must be at most 300 (permits are short-lived)', line: 8, column: 25 },
  ]);
  t.ok(compilePolicy(policy(SMALL_RULE, '    permit:\n      lifetime_seconds: 300\n')).ok);
});

t.test('other document rules: reserved reasons, no authority given, unreachable classes, empty input', async (t) => {
  const errors = errorsOf(
    compilePolicyDocument({
      version: 1,
      action_classes: [
        { id: 'a', match: { action_type: 'x.y' }, rules: [{ id: 'r', decision: 'deny', reason: 'CONDITION_ERROR' }] },
        { id: 'b', match: { action_type: 'x.y' }, actors: ['*'] },
      ],
    }),
  );
  t.match(errors, [
    { path: 'action_classes.0.rules.0.reason', message: /must not be one of the engine's own codes/ },
    { path: 'action_classes.0.actors', message: /say who may request this class/ },
  ]);
  const unreachable = errorsOf(
    compilePolicyDocument({
      version: 1,
      action_classes: [
        { id: 'a', match: { action_type: 'x.y' }, actors: ['*'] },
        { id: 'b', match: { action_type: 'x.y' }, actors: ['*'] },
      ],
    }),
  );
  t.match(unreachable, [{ path: 'action_classes.1.match.action_type', message: /unreachable: class "a" already matches/ }]);
  t.match(errorsOf(compilePolicy('')), [{ path: '', message: /a policy document is a mapping/ }]);
  t.match(errorsOf(compilePolicy('name: x\n')), [{ path: 'version' }, { path: 'action_classes', message: 'missing required key "action_classes"' }]);
});

t.test('JSON: compiles, and its errors have positions too', async (t) => {
  const document = {
    version: 1,
    action_classes: [{ id: 'a', match: { action_type: 'a.b' }, actors: ['*'], rules: [{ id: 'r', when: 'true', decision: 'allow', reason: 'OK' }] }],
  };
  const result = compilePolicy(JSON.stringify(document, null, 2), 'json');
  t.ok(result.ok);
  if (result.ok) {
    t.same(result.policy.document, document, 'document is the value as parsed');
    t.equal(result.policy.decide(input('a.b')).decision, 'allow');
  }
  t.ok(compilePolicy(JSON.stringify(document)).ok, 'YAML is a superset of JSON: the default format reads it');
  t.ok(compilePolicyDocument(document).ok);

  t.match(errorsOf(compilePolicy('{\n  "version": 1,\n  "action_classes": [\n    {"id": "a",}\n  ]\n}', 'json')), [
    { path: '', message: /^JSON syntax error/, line: 4, column: 16 },
  ]);
  t.same(
    errorsOf(compilePolicy('{\n  "version": 1,\n  "action_classes": [\n    {"id": "a", "match": {"action_type": "a.b"}, "actors": ["*"], "mode": "loud"}\n  ]\n}', 'json')),
    [{ path: 'action_classes.0.mode', message: 'Invalid option: expected one of "live"|"shadow"', line: 4, column: 75 }],
  );
  t.match(errorsOf(compilePolicy('version: 1\naction_classes: []\n', 'json')), [{ message: /^JSON syntax error/ }], 'json means JSON');
  t.match(errorsOf(compilePolicy('{"version": 1, "version": 1, "action_classes": []}', 'json')), [{ message: /unique/ }], 'duplicate keys');
});

t.test('all errors are reported at once, in document order', async (t) => {
  const errors = errorsOf(
    compilePolicy(
      policy(
        `      - id: r
        when: 'context.x >'
        decision: maybe
        reason: lower_case
`,
        '    permit:\n      lifetime_seconds: 900\n',
      ),
    ),
  );
  t.same(
    errors.map((e) => e.path),
    ['action_classes.0.permit.lifetime_seconds', 'action_classes.0.rules.0.when', 'action_classes.0.rules.0.decision', 'action_classes.0.rules.0.reason'],
  );
});

t.test('the example policy compiles with no errors', async (t) => {
  const result = compilePolicy(readFileSync(repoPath('config', 'policies', 'default.yaml'), 'utf8'));
  t.same(errorsOf(result), []);
  t.ok(result.ok);
});

t.test('class matching order: exact, then the longest prefix, then document order; a false when falls through', async (t) => {
  const result = compilePolicyDocument({
    version: 1,
    action_classes: [
      { id: 'any-deploy', match: { action_type: 'deploy.*' }, actors: ['*'], default: 'allow' },
      { id: 'eu-deploy-first', match: { action_type: 'deploy.eu.*', when: 'true' }, actors: ['*'], default: 'allow' },
      { id: 'eu-deploy-second', match: { action_type: 'deploy.eu.*' }, actors: ['*'], default: 'allow' },
      { id: 'prod-frozen', match: { action_type: 'deploy.eu.prod', when: 'has(context.freeze)' }, actors: ['*'] },
      { id: 'prod', match: { action_type: 'deploy.eu.prod' }, actors: ['*'], default: 'allow' },
    ],
  });
  t.ok(result.ok);
  if (!result.ok) return;
  const classOf = (type: string, context: Record<string, unknown> = {}) => result.policy.decide(input(type, context)).actionClass;
  t.equal(classOf('deploy.eu.prod', { freeze: true }), 'prod-frozen', 'the first exact class whose when holds');
  t.equal(classOf('deploy.eu.prod'), 'prod', 'its when is false: the next exact class');
  t.equal(classOf('deploy.eu.staging'), 'eu-deploy-first', 'longest prefix, first in document order');
  t.equal(classOf('deploy.us.prod'), 'any-deploy');
  t.equal(classOf('deploy'), null, 'a prefix pattern needs something after the dot');
  t.equal(classOf('deployment.x'), null);
});

t.test('a key that is not text is an error when written, and a stored version is read as it was accepted', async (t) => {
  const numbered = `version: 1
actor_groups:
  2024: [finance-bot]
action_classes:
  - id: payments
    match: { action_type: payments.* }
    actor_groups: ['2024']
    default: allow
`;
  t.match(errorsOf(compilePolicy(numbered)), [{ path: 'actor_groups.2024', message: /a key must be text/, line: 3, column: 3 }], 'written: refused at the key');
  t.ok(compilePolicy(numbered.replace('2024:', '"2024":')).ok, 'quoted, it is text');
  const stored = compilePolicy(numbered, 'yaml', { purpose: 'stored' });
  t.ok(stored.ok, 'stored: loads as before');
  if (stored.ok) t.equal(stored.policy.decide({ ...input('payments.wire'), actor_id: 'finance-bot' }).decision, 'allow', 'and decides with the group as it read it');
});

t.test('version is the policy format version: 1 is read, any other value or none is an error at `version`', async (t) => {
  t.ok(compilePolicy(policy(SMALL_RULE)).ok, 'version: 1');
  for (const [what, head] of [['2', 'version: 2\n'], ['"1" (text)', 'version: "1"\n']] as const) {
    const errors = errorsOf(compilePolicy(policy(SMALL_RULE).replace('version: 1\n', head)));
    t.same(errors, [{ path: 'version', message: 'version must be 1 (the policy format version)', line: 1, column: 10 }], `version ${what}`);
  }
  t.same(errorsOf(compilePolicy(policy(SMALL_RULE).replace('version: 1\n', ''))), [{ path: 'version', message: 'missing required key "version"', line: 1, column: 1 }], 'no version');
  t.same(errorsOf(compilePolicy(`${policy(SMALL_RULE)}revision: 3\n`)), [{ path: 'revision', message: 'unknown key "revision"', line: 11, column: 1 }], 'an unknown top-level key');
});
