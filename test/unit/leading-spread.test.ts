/**
 * Per-request code builds no object that starts with a spread and then gets more members:
 * `{ ...base, limit }`, `{ ...a, ...b }`. On Node 20's V8 such an object gets a hidden class of
 * its own on every call, allocated in the old generation, so each request leaves old-generation
 * garbage behind and full collections follow every few seconds; the authority's slowest requests
 * at 500/s gathered around them (docs/architecture.md, "No leading spreads in per-request objects").
 * The same members with a spread after the literal ones (`{ limit, ...base }`), a literal without a
 * spread, a spread alone (`{ ...base }`) or `Object.assign({}, base, { limit })` share one hidden
 * class. A clone made by a spread that gets a member afterwards has the same cost.
 *
 * This reads the modules every evaluation, gate check or recorded verification runs through, and
 * names each such literal it finds.
 */
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import t from 'tap';
import ts from 'typescript';
import { REPO_ROOT as root } from '../helpers/repo.js';

/** Directories whose every module runs per request, and single modules that do. */
const PER_REQUEST = [
  'authority/auth',
  'authority/authzen',
  'authority/evaluate',
  'authority/http',
  'authority/ratelimit',
  'authority/verifications',
  'authority/audit/chain.ts',
  'authority/permits/verify-route.ts',
  'authority/permits/sign.ts',
  'authority/store/group-commit.ts',
  'proxy/ext-authz/check.ts',
  'proxy/ext-authz/grpc-server.ts',
  'proxy/ext-authz/http-server.ts',
  'proxy/forward.ts',
  'proxy/gate.ts',
  'proxy/gate-records.ts',
  'proxy/http-messages.ts',
  'proxy/metrics.ts',
  'proxy/server.ts',
  'shared/canonical-json.ts',
  'shared/errors.ts',
  'shared/labeled-metrics.ts',
  'shared/permits',
  'shared/store/redis.ts',
  'shared/store/redis-connection.ts',
];

function modulesOf(entry: string): string[] {
  if (entry.endsWith('.ts')) return [entry];
  return readdirSync(join(root, entry))
    .filter((name) => name.endsWith('.ts') && !name.endsWith('.test.ts'))
    .map((name) => `${entry}/${name}`);
}

/** `file:line: text` of each object literal that starts with a spread and has more members. */
function leadingSpreads(file: string, source: string): string[] {
  const tree = ts.createSourceFile(file, source, ts.ScriptTarget.Latest, true);
  const found: string[] = [];
  const visit = (node: ts.Node): void => {
    if (ts.isObjectLiteralExpression(node) && node.properties.length > 1 && ts.isSpreadAssignment(node.properties[0]!)) {
      const line = tree.getLineAndCharacterOfPosition(node.getStart()).line + 1;
      found.push(`${file}:${line}: ${node.getText().replace(/\s+/g, ' ').slice(0, 80)}`);
    }
    ts.forEachChild(node, visit);
  };
  visit(tree);
  return found;
}

t.test('the scanner names a leading spread with more members, and nothing else', async (t) => {
  const source = [
    'const a = { ...base, limit };',
    'const b = { ...x, ...y };',
    'const c = { limit, ...base };',
    'const d = { ...base };',
    'const e = { a: 1, b: 2 };',
    'const f = { ...(ok ? { x } : {}), y };',
  ].join('\n');
  t.same(
    leadingSpreads('example.ts', source).map((hit) => hit.split(':')[1]),
    ['1', '2', '6'],
  );
});

t.test('per-request modules build no object that starts with a spread and has more members', async (t) => {
  const modules = PER_REQUEST.flatMap(modulesOf);
  t.ok(modules.length > 20, `read ${modules.length} modules`);
  const found = modules.flatMap((file) => leadingSpreads(file, readFileSync(join(root, file), 'utf8')));
  t.same(found, [], 'write the literal members first, or list the fields');
});
