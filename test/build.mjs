/**
 * Compiles the product and its tests (tsconfig.json) into dist/, and the console's pages into
 * dist/console/, for `npm test` (test/run.mjs).
 * The tests run as the compiled JavaScript: transpiling TypeScript again in each of the test
 * processes tap starts cost about as much CPU as many of those tests themselves. The `.mjs`
 * support files the helpers import are copied beside them, as are the Envoy external
 * authorizer's `.proto` files beside its module, and dist/test/ is emptied first so that a
 * deleted or renamed test does not linger there.
 *
 * Example:
 *   node test/build.mjs    # then: npx tap dist/test/unit/config.test.js
 */
import { chmodSync, cpSync, rmSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { runToEnd } from './support/servers.mjs';

const root = resolve(dirname(fileURLToPath(import.meta.url)), '..');

/** Type-checks and emits everything in tsconfig.json; resolves on success, rejects with tsc's output. */
export async function buildTests() {
  rmSync(join(root, 'dist', 'test'), { recursive: true, force: true });
  const require = createRequire(import.meta.url);
  const tsc = require.resolve('typescript/bin/tsc');
  const vite = join(dirname(require.resolve('vite/package.json')), 'bin', 'vite.js');
  // The console's pages (dist/console, served by the authority) and their type check, beside the rest.
  const runs = await Promise.all([
    ['tsc -p tsconfig.json', [tsc, '-p', join(root, 'tsconfig.json')]],
    ['tsc -p console/tsconfig.json', [tsc, '-p', join(root, 'console', 'tsconfig.json')]],
    ['vite build', [vite, 'build', '--config', join(root, 'console', 'vite.config.ts'), '--logLevel', 'warn']],
  ].map(async ([name, args]) => ({ name, run: await runToEnd(process.execPath, args, { cwd: root }) })));
  for (const { name, run } of runs) {
    if (run.status !== 0) throw new Error(`${name} failed:\n${run.error?.message ?? ''}${run.stdout}${run.stderr}`);
  }
  cpSync(join(root, 'test', 'support'), join(root, 'dist', 'test', 'support'), { recursive: true, filter: (src) => !src.endsWith('.d.mts') });
  // The Envoy external authorizer's .proto files, found beside its compiled module (as `npm run build` does).
  cpSync(join(root, 'proxy', 'ext-authz', 'protos'), join(root, 'dist', 'proxy', 'ext-authz', 'protos'), { recursive: true });
  chmodSync(join(root, 'dist', 'bin', 'countersign.js'), 0o755);
}

if (process.argv[1] && resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  try {
    await buildTests();
  } catch (err) {
    process.stderr.write(`${err.message}\n`);
    process.exit(1);
  }
}
