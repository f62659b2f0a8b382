/**
 * Policy tests (`countersign policy test`): the runner decides each case with the compiled policy
 * and reports what differs (decision, reason subset or exact list, action class, risk bounds); a
 * bad tests file or a policy that does not compile is a usage error naming the path in the file;
 * the JUnit XML is well formed and escaped; the shipped example policy passes its own tests; the
 * CLI function exits 0 / 1 / 2 accordingly.
 */
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import t, { type Test } from 'tap';
import { runPolicyCommand } from '../../authority/cli/policy-commands.js';
import type { CliIo } from '../../authority/cli/admin-commands.js';
import { escapeXml, junitReport, loadTestSuite, parseTestSuite, PolicyTestFileError, runSuites, textReport } from '../../authority/policy/testing/index.js';
import { repoPath } from '../helpers/repo.js';


interface XmlElement {
  name: string;
  attributes: Record<string, string>;
  children: XmlElement[];
  text: string;
}

const ENTITIES: Record<string, string> = { amp: '&', lt: '<', gt: '>', quot: '"', apos: "'" };
const decode = (raw: string): string =>
  raw.replace(/&([a-z]+);/g, (_, name: string) => {
    const value = ENTITIES[name];
    if (value === undefined) throw new Error(`unknown entity &${name};`);
    return value;
  });

/**
 * Just enough XML to read a JUnit report back: elements, quoted attributes, text, the five
 * entities; throws on anything malformed (a stray < or &, unbalanced tags, unquoted attributes).
 */
function parseXml(xml: string): XmlElement {
  const body = xml.replace(/^<\?xml [^?]*\?>\s*/, '');
  const root: XmlElement = { name: '#root', attributes: {}, children: [], text: '' };
  const stack = [root];
  const token = /<(\/?)([A-Za-z_][\w.-]*)((?:\s+[A-Za-z_][\w.-]*="[^"<]*")*)\s*(\/?)>|([^<]+)/gy;
  let match: RegExpExecArray | null;
  let at = 0;
  while (at < body.length) {
    token.lastIndex = at;
    match = token.exec(body);
    if (!match) throw new Error(`malformed XML at ${at}: ${body.slice(at, at + 30)}`);
    at = token.lastIndex;
    const [, closing, name, attrs, selfClosing, text] = match;
    const top = stack[stack.length - 1] as XmlElement;
    if (text !== undefined) {
      if (/&(?![a-z]+;)/.test(text)) throw new Error('a stray &');
      top.text += decode(text);
      continue;
    }
    if (closing) {
      if (top.name !== name) throw new Error(`</${name}> closes <${top.name}>`);
      stack.pop();
      continue;
    }
    const attributes: Record<string, string> = {};
    for (const [, key, value] of (attrs ?? '').matchAll(/([A-Za-z_][\w.-]*)="([^"]*)"/g)) {
      if (/&(?![a-z]+;)/.test(value ?? '')) throw new Error('a stray & in an attribute');
      attributes[key as string] = decode(value ?? '');
    }
    const element: XmlElement = { name: name as string, attributes, children: [], text: '' };
    top.children.push(element);
    if (!selfClosing) stack.push(element);
  }
  if (stack.length !== 1) throw new Error(`<${stack[stack.length - 1]?.name}> is not closed`);
  if (root.children.length !== 1) throw new Error('an XML document has one root element');
  return root.children[0] as XmlElement;
}

const childrenNamed = (element: XmlElement, name: string) => element.children.filter((child) => child.name === name);

const EXAMPLE_TESTS = repoPath('config', 'policies', 'default.tests.yaml');

const POLICY = `version: 1
actor_groups:
  finance: [finance-bot]
action_classes:
  - id: payments
    match: { action_type: payments.* }
    actor_groups: [finance]
    risk:
      base: 0.2
      factors:
        - name: large
          description: More than 1,000 USD
          when: 'has(context.amount_usd) && context.amount_usd > 1000'
          weight: 0.3
    rules:
      - id: small
        when: 'has(context.amount_usd) && context.amount_usd <= 1000'
        decision: allow
        reason: SMALL
      - id: large
        when: '"large" in risk.factors && approvals.count == 0'
        decision: hold
        reason: LARGE
      - id: approved
        when: '"large" in risk.factors && approvals.count >= 1'
        decision: allow
        reason: APPROVED
`;

const made: string[] = [];
t.teardown(() => {
  for (const dir of made) rmSync(dir, { recursive: true, force: true });
});

function workspace(files: Record<string, string>): string {
  const dir = mkdtempSync(join(tmpdir(), 'policy-tests-'));
  made.push(dir);
  for (const [name, text] of Object.entries(files)) writeFileSync(join(dir, name), text);
  return dir;
}

const pay = (amount: number) => `{ action_type: payments.wire, actor_id: finance-bot, context: { amount_usd: ${amount} } }`;

function capture(env: NodeJS.ProcessEnv = {}): CliIo & { lines: string[] } {
  const lines: string[] = [];
  return { lines, out: (line) => lines.push(line), env };
}

async function usageError(t: Test, promise: Promise<unknown>): Promise<Error & { code?: string }> {
  const error = await promise.then(
    () => null,
    (e: unknown) => e as Error & { code?: string },
  );
  t.ok(error, 'it throws');
  return error ?? new Error('did not throw');
}

t.test('passing and failing cases: decision, reasons subset and exact, class, risk bounds', async (t) => {
  const dir = workspace({
    'p.yaml': POLICY,
    'p.tests.yaml': `policy: p.yaml
cases:
  - name: small payment runs
    input: ${pay(10)}
    expect: { decision: allow, reasons: [SMALL], action_class: payments, risk: { min: 0.2, max: 0.2, band: low } }
  - name: large payment held
    input: ${pay(5000)}
    expect: { decision: hold, reasons_exactly: [LARGE], risk: { min: 0.5 } }
  - name: approved large payment
    input: ${pay(5000)}
    approvals: [{ kind: approval, approved_by: [erin] }]
    expect: { decision: allow, reasons: [APPROVED] }
  - name: wrong decision
    input: ${pay(5000)}
    expect: { decision: allow }
  - name: missing reason and risk above its bound
    input: ${pay(5000)}
    expect: { decision: hold, reasons: [LARGE, NOT_THERE], risk: { max: 0.3 } }
  - name: reasons not exactly
    input: ${pay(10)}
    expect: { decision: allow, reasons_exactly: [SMALL, OTHER], action_class: other }
`,
  });
  const suite = await loadTestSuite(join(dir, 'p.tests.yaml'));
  const results = runSuites([suite]);
  t.equal(results.passed, 3);
  t.equal(results.failed, 3);
  const byName = new Map(results.suites[0]?.cases.map((c) => [c.name, c]));
  t.same(byName.get('wrong decision')?.failures, ['decision: expected allow, got hold']);
  t.same(byName.get('missing reason and risk above its bound')?.failures, [
    'reasons: expected to include [NOT_THERE], got [LARGE]',
    'risk: expected at most 0.3, got 0.5',
  ]);
  t.same(byName.get('reasons not exactly')?.failures, [
    'reasons: expected exactly [SMALL, OTHER], got [SMALL]',
    'action_class: expected other, got payments',
  ]);

  const text = textReport(results);
  t.ok(text.includes('  ✓ small payment runs'));
  t.ok(text.includes('  ✗ wrong decision'));
  t.ok(text.includes('      decision: expected allow, got hold'), 'the difference is printed under the failing case');
  t.equal(text.at(-1), '3 passed, 3 failed');
});

t.test('a fixed clock decides time-dependent conditions: file-level now, overridden per case', async (t) => {
  const dir = workspace({
    'w.yaml': `version: 1
action_classes:
  - id: ops
    match: { action_type: ops.* }
    actors: ['*']
    default: allow
    rules:
      - id: weekend
        when: 'now.getDayOfWeek() in [0, 6]'
        decision: hold
        reason: WEEKEND
`,
    'w.tests.yaml': `policy: w.yaml
now: 2026-01-05T10:00:00Z
cases:
  - name: monday
    input: { action_type: ops.restart, actor_id: x }
    expect: { decision: allow }
  - name: saturday
    now: 2026-01-10T10:00:00Z
    input: { action_type: ops.restart, actor_id: x }
    expect: { decision: hold, reasons: [WEEKEND] }
`,
  });
  const results = runSuites([await loadTestSuite(join(dir, 'w.tests.yaml'))]);
  t.equal(results.failed, 0, textReport(results).join('\n'));
});

t.test('a bad tests file is a usage error naming the path in the file and its line', async (t) => {
  const bad = `policy: p.yaml
cases:
  - name: typo in the decision
    input: ${pay(10)}
    expect: { decision: alow }
  - name: not an evaluate request
    input: { action_type: "Not Valid", actor_id: finance-bot }
    expect: { decision: allow, surprise: 1 }
`;
  const error = await usageError(t, parseTestSuite('/x/p.tests.yaml', bad));
  t.type(error, PolicyTestFileError);
  const problems = (error as PolicyTestFileError).problems;
  const decision = problems.find((p) => p.path === 'cases.0.expect.decision');
  t.ok(decision, 'the bad decision is reported at its path');
  t.equal(decision?.line, 5, 'with its line');
  t.ok(problems.some((p) => p.path === 'cases.1.expect.surprise' && /unknown key/.test(p.message)), 'unknown keys are refused');
  t.match(error.message, /\/x\/p\.tests\.yaml:5:\d+ cases\.0\.expect\.decision:/);

  const inputError = await usageError(t, parseTestSuite('/x/p.tests.yaml', `policy: p.yaml\ncases:\n  - name: a\n    input: { action_type: "Not Valid", actor_id: b }\n    expect: { decision: allow }\n`));
  t.ok((inputError as PolicyTestFileError).problems.some((p) => p.path === 'cases.0.input.action_type'), 'the input is checked with the evaluate schema');

  const both = await usageError(t, parseTestSuite('/x/p.tests.yaml', `policy: p.yaml\ncases:\n  - name: a\n    input: ${pay(1)}\n    expect: { decision: allow, reasons: [A], reasons_exactly: [A] }\n`));
  t.match(both.message, /either reasons .* or reasons_exactly/);

  const yaml = await usageError(t, parseTestSuite('/x/p.tests.yaml', 'policy: [unclosed\n'));
  t.match(yaml.message, /cannot be parsed/);
});

t.test('a policy that does not compile is a usage error with the compile error', async (t) => {
  const dir = workspace({
    'broken.yaml': 'version: 1\naction_classes:\n  - id: x\n    match: { action_type: x.* }\n    actors: ["*"]\n    rules:\n      - id: r\n        when: "context.a >"\n        decision: deny\n        reason: R\n',
    'broken.tests.yaml': `policy: broken.yaml\ncases:\n  - name: a\n    input: { action_type: x.y, actor_id: a }\n    expect: { decision: deny }\n`,
  });
  const io = capture();
  const error = await usageError(t, runPolicyCommand(['test', join(dir, 'broken.tests.yaml')], io));
  t.equal(error.code, 'USAGE', 'the dispatcher maps it to exit 2');
  t.match(error.message, /does not compile/);
  t.match(error.message, /action_classes\.0\.rules\.0\.when/, 'the compile error names the condition');
});

t.test('JUnit XML: well formed, one testsuite per file, failures carry the difference, text escaped', async (t) => {
  t.equal(escapeXml(`a<b>&"c"'\u0001`), 'a&lt;b&gt;&amp;&quot;c&quot;&apos;\uFFFD');
  const dir = workspace({
    'p.yaml': POLICY,
    'p.tests.yaml': `policy: p.yaml
cases:
  - name: 'fine & dandy <ok>'
    input: ${pay(10)}
    expect: { decision: allow }
  - name: 'fails "quoted" <tag>'
    input: ${pay(5000)}
    expect: { decision: deny }
`,
  });
  const results = runSuites([await loadTestSuite(join(dir, 'p.tests.yaml'))]);
  const xml = junitReport(results);
  const suites = parseXml(xml);
  t.equal(suites.name, 'testsuites');
  t.equal(suites.attributes.tests, '2');
  t.equal(suites.attributes.failures, '1');
  const [suite] = childrenNamed(suites, 'testsuite');
  t.equal(suite?.attributes.name, join(dir, 'p.tests.yaml'));
  const cases = childrenNamed(suite as XmlElement, 'testcase');
  t.same(cases.map((c) => c.attributes.name), ['fine & dandy <ok>', 'fails "quoted" <tag>'], 'names survive escaping');
  t.same(childrenNamed(cases[0] as XmlElement, 'failure'), []);
  const [failure] = childrenNamed(cases[1] as XmlElement, 'failure');
  t.equal(failure?.attributes.message, 'decision: expected deny, got hold');
  t.match(failure?.text, /got hold \[LARGE\]/);
  t.throws(() => parseXml('<a><b></a>'), 'the reader refuses malformed XML');
});

t.test('the shipped example policy passes its own tests', async (t) => {
  const results = runSuites([await loadTestSuite(EXAMPLE_TESTS)]);
  t.equal(results.failed, 0, textReport(results).join('\n'));
  t.ok(results.passed >= 8);
  const decisions = new Set(results.suites[0]?.cases.map((c) => c.actual.decision));
  t.same([...decisions].sort(), ['allow', 'deny', 'escalate', 'hold'], 'every decision is covered');
});

t.test('countersign policy test: exit codes, text, JSON and --junit', async (t) => {
  const dir = workspace({
    'p.yaml': POLICY,
    'good.tests.yaml': `policy: p.yaml\ncases:\n  - name: small\n    input: ${pay(10)}\n    expect: { decision: allow }\n`,
    'bad.tests.yaml': `policy: p.yaml\ncases:\n  - name: wrong\n    input: ${pay(5000)}\n    expect: { decision: allow }\n`,
  });
  const good = capture();
  t.equal(await runPolicyCommand(['test', join(dir, 'good.tests.yaml')], good), 0, 'all pass: exit 0');
  t.equal(good.lines.at(-1), '1 passed, 0 failed');

  const junit = join(dir, 'out.xml');
  const bad = capture();
  t.equal(await runPolicyCommand(['test', join(dir, 'good.tests.yaml'), join(dir, 'bad.tests.yaml'), '--junit', junit], bad), 1, 'a failure: exit 1');
  t.equal(bad.lines.at(-1), '1 passed, 1 failed');
  const xml = readFileSync(junit, 'utf8');
  t.equal(parseXml(xml).attributes.failures, '1', 'well formed');
  t.match(xml, /<testsuites name="countersign policy test" tests="2" failures="1"/);

  const json = capture();
  t.equal(await runPolicyCommand(['test', dir, '--format', 'json'], json), 1, 'a directory runs every *.tests.yaml in it');
  const report = JSON.parse(json.lines.join('\n'));
  t.equal(report.passed, 1);
  t.equal(report.failed, 1);
  t.equal(report.suites.length, 2);
  t.same(report.suites.find((s: { file: string }) => s.file.endsWith('bad.tests.yaml')).cases[0].actual.decision, 'hold');

  t.equal((await usageError(t, runPolicyCommand(['test'], capture()))).code, 'USAGE', 'no file: usage error');
  t.equal((await usageError(t, runPolicyCommand(['test', join(dir, 'missing.tests.yaml')], capture()))).code, 'USAGE', 'a missing file: usage error');
  t.equal((await usageError(t, runPolicyCommand(['test', dir, '--format', 'xml'], capture()))).code, 'USAGE', 'a bad --format: usage error');
  t.equal((await usageError(t, runPolicyCommand(['nonsense'], capture()))).code, 'USAGE');
});

t.test('policy test --junit creates the folders the report goes in', async (t) => {
  const dir = workspace({ 'p.yaml': POLICY, 'good.tests.yaml': `policy: p.yaml\ncases:\n  - name: small\n    input: ${pay(10)}\n    expect: { decision: allow }\n` });
  const report = join(dir, 'reports', 'policy', 'tests.xml');
  const io = capture();
  t.equal(await runPolicyCommand(['test', join(dir, 'good.tests.yaml'), '--junit', report], io), 0, 'exit 0: the report was written');
  t.equal(io.lines.at(-1), '1 passed, 0 failed');
  t.equal(parseXml(readFileSync(report, 'utf8')).attributes.tests, '1', 'reports/policy/ did not exist; the report is in it');
});
