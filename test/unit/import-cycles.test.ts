/**
 * No import cycles anywhere in the repository's code, type imports included: a module's
 * dependencies must be understandable without the module itself, and a cycle through a type
 * import is still a cycle for the reader (and becomes a runtime one the day the import loses its
 * `type`).
 *
 * The graph is dpdm's (a maintained cycle finder), run as its CLI over every source folder: the
 * product (authority, proxy, shared, bin), the console, and the tests with their helpers and
 * scripts. dpdm reads TypeScript's own syntax tree and, without `-T`, keeps type-only imports;
 * the root tsconfig.json lets it resolve `./x.js` to `./x.ts` as the compiler does. A specifier it
 * cannot resolve would hide a cycle, so the test also requires every relative import to resolve.
 *
 * @example
 *   npx dpdm --no-warning --no-tree --exit-code circular:1 'authority/**' 'proxy/**' 'shared/**' 'bin/**' 'console/**' 'test/**'
 */
import { spawnSync } from 'node:child_process';
import { copyFileSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import t from 'tap';
import { REPO_ROOT, repoPath } from '../helpers/repo.js';

/** Every folder that holds our TypeScript or JavaScript sources, as dpdm globs (relative to the root). */
const SOURCES = [
  'authority/**/*.ts',
  'proxy/**/*.ts',
  'shared/**/*.ts',
  'bin/**/*.ts',
  'console/**/*.{ts,tsx}',
  'test/**/*.{ts,mjs}',
];

const DPDM_BIN = join(dirname(createRequire(import.meta.url).resolve('dpdm/package.json')), 'lib', 'bin', 'dpdm.js');

interface DpdmResult {
  status: number | null;
  output: string;
  tree: Record<string, ReadonlyArray<{ request: string; id: string | null }> | null>;
  circulars: string[][];
}

/** Runs the dpdm CLI in `cwd` over `globs` (type imports kept), with its JSON result. */
function dpdm(cwd: string, globs: readonly string[]): DpdmResult {
  const json = join(mkdtempSync(join(tmpdir(), 'dpdm-')), 'result.json');
  try {
    const run = spawnSync(
      process.execPath,
      [DPDM_BIN, '--no-warning', '--no-tree', '--no-progress', '--exit-code', 'circular:1', '-o', json, ...globs],
      { cwd, encoding: 'utf8' },
    );
    const result = JSON.parse(readFileSync(json, 'utf8')) as Pick<DpdmResult, 'tree' | 'circulars'>;
    return { status: run.status, output: `${run.stdout}${run.stderr}`, ...result };
  } finally {
    rmSync(dirname(json), { recursive: true, force: true });
  }
}

t.test('no module of the repository reaches itself through its imports, type imports included', async (t) => {
  const result = dpdm(REPO_ROOT, SOURCES);
  const modules = Object.keys(result.tree).filter((module) => !module.includes('node_modules'));
  t.ok(modules.length > 400, `dpdm read the sources (${modules.length} modules)`);
  for (const folder of ['authority/', 'proxy/', 'shared/', 'bin/', 'console/src/', 'test/helpers/', 'test/unit/', 'test/bench/']) {
    t.ok(modules.some((module) => module.startsWith(folder)), `${folder} is in the graph`);
  }
  const unresolved = Object.values(result.tree)
    .flatMap((dependencies) => dependencies ?? [])
    .filter((dependency) => dependency.request.startsWith('.') && dependency.id === null)
    .map((dependency) => dependency.request);
  t.same(unresolved, [], 'every relative import resolves to a module (an unresolved one could hide a cycle)');
  t.same(result.circulars.map((cycle) => cycle.join(' -> ')), [], 'no cycles');
  t.equal(result.status, 0, 'dpdm exits 0', { output: result.output });
});

t.test('the check finds a cycle made of type-only imports', async (t) => {
  const folder = mkdtempSync(join(tmpdir(), 'cycle-'));
  t.teardown(() => rmSync(folder, { recursive: true, force: true }));
  copyFileSync(repoPath('tsconfig.json'), join(folder, 'tsconfig.json'));
  writeFileSync(join(folder, 'a.ts'), "import type { B } from './b.js';\nexport interface A { b?: B }\n");
  writeFileSync(join(folder, 'b.ts'), "import type { A } from './a.js';\nexport interface B { a?: A }\n");
  writeFileSync(join(folder, 'c.ts'), "import type { A } from './a.js';\nexport const c: A = {};\n");
  const result = dpdm(folder, ['*.ts']);
  t.equal(result.status, 1, 'dpdm exits 1');
  t.same(result.circulars.map((cycle) => [...cycle].sort()), [['a.ts', 'b.ts']], 'the one cycle, named once; c.ts only reaches it');
});
