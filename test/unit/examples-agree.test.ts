/**
 * The shipped examples agree with the example policy (config/policies/default.yaml): every action
 * type that a gated route or an example request names is governed by one of its classes, as the
 * policy engine itself selects the class. A route whose type no class matches is denied
 * NO_MATCHING_CLASS on every request, so an example that drifts from the policy fails here.
 *
 * Read: the proxy configurations in config/ (through the proxy's own loader, and the routes shown
 * commented out; an MCP route's tools each with the target the gate binds), the Helm examples'
 * `countersignProxy.routes` (through the proxy's route schema),
 * and the fenced examples of README.md and docs/: routes and policy test cases in YAML or JSON
 * blocks, and the request bodies of `curl -d '…'` in shell blocks (evaluate in its three forms,
 * verify-permit, AuthZEN evaluations with their action names mapped as the authority maps them).
 *
 * @example
 *   npx tap --disable-coverage dist/test/unit/examples-agree.test.js
 */
import { readdirSync, readFileSync } from 'node:fs';
import { join, relative } from 'node:path';
import t, { type Test } from 'tap';
import { parse as parseYaml } from 'yaml';
import { actionNameMapping } from '../../authority/authzen/action-names.js';
import { planEvaluations, toEvaluateRequest } from '../../authority/authzen/mapping.js';
import { loadAuthorityConfig } from '../../authority/config.js';
import { compilePolicy } from '../../authority/policy/compile.js';
import { loadProxyConfig, parseProxyConfig, type ProxyRoute } from '../../proxy/config.js';
import { AuthzenEvaluationsRequest } from '../../shared/wire/authzen.js';
import { parseEvaluateRequest } from '../../shared/wire/evaluate.js';
import { REPO_ROOT as root, repoPath } from '../helpers/repo.js';

/** One action type an example names, where, and the context it comes with (class conditions may read it). */
interface Named {
  where: string;
  actionType: string;
  context: Record<string, unknown>;
}

const compiled = compilePolicy(readFileSync(repoPath('config', 'policies', 'default.yaml'), 'utf8'));
if (!compiled.ok) throw new Error(`the example policy does not compile: ${JSON.stringify(compiled.errors)}`);
const policy = compiled.policy;

/** The class the example policy's engine picks for this action type, or why none governs it. */
function classOf(named: Named): { actionClass: string | null; reasons: string[] } {
  const decision = policy.decide({ action_type: named.actionType, actor_id: 'examples-agree', context: named.context, approvals: [], now: new Date(), explain: false });
  return { actionClass: decision.actionClass, reasons: decision.reasonCodes };
}

const isObject = (value: unknown): value is Record<string, unknown> => typeof value === 'object' && value !== null && !Array.isArray(value);
const relativeName = (file: string) => relative(root, file);

/**
 * What a route of a loaded configuration names: its action type, or for an MCP route each tool
 * entry's, with the target the gate binds (`<server>/<tool>`; a pattern's prefix stands for its tools).
 */
function routeNamed(route: ProxyRoute, where: string): Named[] {
  if (route.mcp === undefined) return [{ where: `${where} route ${route.name}`, actionType: route.action_type, context: {} }];
  const { server, tools } = route.mcp;
  return tools.map((tool) => {
    const id = tool.target.id ?? `${server}/${tool.name.replace(/\*$/, '')}`;
    return { where: `${where} route ${route.name} tool ${tool.name}`, actionType: tool.action_type, context: { target: { type: tool.target.type, id } } };
  });
}

/** `# action_type: x` lines: routes a file shows commented out, for the reader to enable. */
function commentedActionTypes(text: string, where: string): Named[] {
  return [...text.matchAll(/^\s*#.*?\baction_type:\s*([^\s#]+)/gm)].map((match) => ({ where: `${where} (commented out)`, actionType: match[1]!, context: {} }));
}

const authority = await loadAuthorityConfig({ file: repoPath('config', 'authority.yaml'), env: {} });
const actionNames = actionNameMapping(authority.authzen);

/**
 * Every action type a parsed example names. An object naming `action_type` in a form this test
 * does not know is reported as a problem rather than skipped, so that no example escapes it.
 */
function namedIn(value: unknown, where: string, problems: string[], parentKey = ''): Named[] {
  if (Array.isArray(value)) return value.flatMap((item, index) => namedIn(item, `${where}[${index}]`, problems));
  if (!isObject(value)) return [];
  const evaluate = 'action_type' in value || 'actor' in value || 'agent' in value ? parseEvaluateRequest(value) : null;
  if (evaluate?.success) return [{ where, actionType: evaluate.data.action_type, context: evaluate.data.context }];
  if (isObject(value.action) && typeof value.action.name === 'string') return authzenNamed(value, where);
  if (typeof value.action_type === 'string') {
    if (isObject(value.match) && typeof value.match.path === 'string') return [{ where: `${where} route ${String(value.name)}`, actionType: value.action_type, context: {} }];
    // A policy class's `match.action_type` is a pattern of the policy itself, not an example of it.
    if (parentKey !== 'match') problems.push(`${where}: names action_type ${value.action_type} in an object that is neither a route nor a request`);
  }
  return Object.entries(value).flatMap(([key, child]) => namedIn(child, `${where}.${key}`, problems, key));
}

/** An AuthZEN evaluation (or batch) in evaluate's terms; a search names its action only. */
function authzenNamed(value: Record<string, unknown>, where: string): Named[] {
  const request = AuthzenEvaluationsRequest.safeParse(value);
  if (request.success) {
    try {
      const plan = planEvaluations(request.data);
      const evaluations = plan.form === 'single' ? [plan.evaluation] : plan.entries.flatMap((entry) => (entry.ok ? [entry.evaluation] : []));
      if (evaluations.length > 0) {
        return evaluations.map((evaluation) => {
          const mapped = toEvaluateRequest(evaluation, actionNames);
          return { where: `${where} (AuthZEN)`, actionType: mapped.action_type, context: mapped.context };
        });
      }
    } catch {
      // Not a complete evaluation (a search body): its action name still names a type.
    }
  }
  const action = value.action as { name: string };
  return [{ where: `${where} (AuthZEN)`, actionType: actionNames.toActionType(action.name), context: {} }];
}

interface Fence {
  language: string;
  line: number;
  text: string;
}

function fencesOf(markdown: string): Fence[] {
  const fences: Fence[] = [];
  let open: { marker: string; language: string; line: number; lines: string[] } | null = null;
  markdown.split('\n').forEach((line, index) => {
    const opener = /^\s*(```+|~~~+)\s*([\w-]*)/.exec(line);
    if (open === null) {
      if (opener) open = { marker: opener[1]!, language: opener[2]!.toLowerCase(), line: index + 1, lines: [] };
      return;
    }
    if (line.trimStart().startsWith(open.marker)) {
      fences.push({ language: open.language, line: open.line, text: open.lines.join('\n') });
      open = null;
    } else {
      open.lines.push(line);
    }
  });
  return fences;
}

/** A shell splice inside a single-quoted body: quoted (`'"$PERMIT"'`) or bare (`'$PERMIT'`). */
const SPLICE = /'"[^"]*"'|'\$\{?\w+\}?'/g;

/** The single-quoted bodies of `curl -d '…'`, with shell splices as placeholder text. */
function curlBodies(shell: string): string[] {
  return [...shell.matchAll(/(?:-d|--data(?:-raw)?)\s+'((?:[^']|'"[^"]*"'|'\$\{?\w+\}?')*)'/g)].map((match) => match[1]!.replace(SPLICE, 'placeholder'));
}

/** Text that names an action type: `action_type`, or an AuthZEN or agent-form `action` object. */
const NAMES_AN_ACTION = /action_type|\baction"?\s*:\s*\{/;

/** What the examples of one Markdown document (`name`, its path in the repository) name. */
function namedInMarkdown(markdown: string, name: string, problems: string[]): Named[] {
  return fencesOf(markdown).flatMap((fence) => {
    const where = `${name}:${fence.line}`;
    const mentions = NAMES_AN_ACTION.test(fence.text);
    if (['yaml', 'yml', 'json'].includes(fence.language)) {
      let parsed: unknown;
      try {
        parsed = parseYaml(fence.text);
      } catch (error) {
        if (mentions) problems.push(`${where}: an example naming an action type does not parse: ${(error as Error).message.split('\n')[0]}`);
        return [];
      }
      return namedIn(parsed, where, problems);
    }
    if (['sh', 'bash', 'shell', 'console'].includes(fence.language)) {
      return curlBodies(fence.text).flatMap((body) => {
        let parsed: unknown;
        try {
          parsed = JSON.parse(body);
        } catch (error) {
          if (NAMES_AN_ACTION.test(body)) problems.push(`${where}: a request body naming an action type is not JSON: ${(error as Error).message}`);
          return [];
        }
        return namedIn(parsed, `${where} curl body`, problems);
      });
    }
    return [];
  });
}

function markdownUnder(folder: string): string[] {
  return readdirSync(folder, { withFileTypes: true }).flatMap((entry) => {
    const path = join(folder, entry.name);
    if (entry.isDirectory()) return markdownUnder(path);
    return entry.name.endsWith('.md') ? [path] : [];
  });
}

/** Fails the test for every named action type that no class of the example policy governs. */
function checkGoverned(t: Test, named: Named[]) {
  for (const example of named) {
    const { actionClass, reasons } = classOf(example);
    t.ok(actionClass, `${example.where}: ${example.actionType} → class ${actionClass ?? `none (${reasons.join(', ')})`}`);
  }
}

t.test('the example policy governs payments.*, and no class governs payment.*', async (t) => {
  t.equal(classOf({ where: 'check', actionType: 'payments.wire', context: {} }).actionClass, 'payments');
  t.same(classOf({ where: 'check', actionType: 'payment.wire', context: {} }), { actionClass: null, reasons: ['NO_MATCHING_CLASS'] }, 'so a route gating payment.wire would deny every request');
});

t.test('every route of the shipped proxy configurations is governed by a class', async (t) => {
  const files = readdirSync(repoPath('config'))
    .filter((entry) => /\.ya?ml$/.test(entry))
    .map((entry) => repoPath('config', entry))
    .filter((file) => isObject(parseYaml(readFileSync(file, 'utf8'))) && 'routes' in (parseYaml(readFileSync(file, 'utf8')) as object));
  t.same(files.map(relativeName).sort(), ['config/proxy-ext-authz.yaml', 'config/proxy.yaml'], 'both shipped proxy configurations are read');
  for (const file of files) {
    const config = await loadProxyConfig(file, {});
    t.ok(config.routes.length > 0, `${relativeName(file)} has routes`);
    const named = config.routes.flatMap((route) => routeNamed(route, relativeName(file)));
    named.push(...commentedActionTypes(readFileSync(file, 'utf8'), relativeName(file)));
    checkGoverned(t, named);
  }
});

t.test("every route of the Helm examples' values is governed by a class", async (t) => {
  const examples = readdirSync(repoPath('helm', 'examples'), { withFileTypes: true }).filter((entry) => entry.isDirectory());
  t.ok(examples.length >= 3, 'the payments-app, istio-ext-authz and mcp-helpdesk examples are read');
  for (const example of examples) {
    const file = repoPath('helm', 'examples', example.name, 'values.yaml');
    const text = readFileSync(file, 'utf8');
    const routes = (parseYaml(text) as { countersignProxy?: { routes?: unknown } }).countersignProxy?.routes;
    // The routes as the proxy would take them from the rendered proxy.yaml.
    const config = parseProxyConfig({ upstream: 'http://127.0.0.1:8080', authority: { url: 'http://127.0.0.1:7070', api_key: 'k' }, organization: 'o', routes }, relativeName(file));
    t.ok(config.routes.length > 0, `${relativeName(file)} has routes`);
    checkGoverned(t, [
      ...config.routes.flatMap((route) => routeNamed(route, relativeName(file))),
      ...commentedActionTypes(text, relativeName(file)),
    ]);
  }
});

t.test('every action type in the examples of README.md and docs/ is governed by a class', async (t) => {
  const documents = [repoPath('README.md'), ...markdownUnder(repoPath('docs'))];
  const problems: string[] = [];
  const named = documents.flatMap((file) => namedInMarkdown(readFileSync(file, 'utf8'), relativeName(file), problems));
  t.same(problems, [], 'every example that names an action type could be read');
  const read = new Set(named.map((example) => example.where.split(':')[0]));
  for (const page of ['README.md', 'docs/proxy.md', 'docs/api.md', 'docs/approvals.md', 'docs/policies.md']) t.ok(read.has(page), `${page}: its examples are read`);
  checkGoverned(t, named);
});

t.test('the reader finds action types in every form an example takes', async (t) => {
  const problems: string[] = [];
  const markdown = [
    '```yaml',
    'routes:',
    '  - { name: r, match: { method: POST, path: /p }, action_type: payment.wire, facts: {} }',
    'action_classes:',
    '  - { id: c, match: { action_type: "deploy.*" } }',
    '```',
    '```sh',
    `curl -d '{"action_type": "a.one", "actor_id": "x", "permit_token": "'"$PERMIT"'"}'`,
    `curl -d '{"actor": {"id": "x"}, "action": {"type": "a.two"}, "approvals": ["'$APPROVAL'"]}'`,
    `curl -d '{"action": "a.three", "agent": "x"}'`,
    `curl -d '{"subject": {"type": "s", "id": "x"}, "action": {"name": "GET"}, "resource": {"type": "r", "id": "1"}}'`,
    `curl -d '{"action": "create", "name": "w"}'`,
    '```',
    '```yaml',
    'odd: { action_type: a.four }',
    '```',
  ].join('\n');
  const named = namedInMarkdown(markdown, 'docs/reader-check.md', problems);
  t.same(
    named.map((example) => example.actionType),
    ['payment.wire', 'a.one', 'a.two', 'a.three', 'http.get'],
    'a route, the three evaluate forms (with quoted and bare shell splices) and an AuthZEN action name; not a policy pattern, not a webhooks action',
  );
  t.same(problems, ['docs/reader-check.md:14.odd: names action_type a.four in an object that is neither a route nor a request'], 'an unknown form is reported, not skipped');
});

