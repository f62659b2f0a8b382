/**
 * Compiles the product and its tests (tsconfig.json) into dist/, and the console's pages into
 * dist/console/, for `npm test` (test/run.mjs).
 * The tests run as the compiled JavaScript: transpiling TypeScript again in each of the test
 * processes tap starts cost about as much CPU as many of those tests themselves. The `.mjs`
 * support files the helpers import are copied beside them, the Envoy external authorizer's
 * `.proto` files beside its module (as `npm run build`, scripts/build.mjs, does), and dist/test/
 * is emptied first so that a deleted or renamed test does not linger there.
 *
 * Example:
 *   node test/build.mjs    # then: npx tap dist/test/unit/config.test.js
 */
import { cpSync, rmSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { CONSOLE_BUILD, finishDist, runAll, TSC, VITE } from '../scripts/build.mjs';

const root = resolve(dirname(fileURLToPath(import.meta.url)), '..');

/** Type-checks and emits everything in tsconfig.json; resolves on success, rejects with tsc's output. */
export async function buildTests() {
  rmSync(join(root, 'dist', 'test'), { recursive: true, force: true });
  // The console's pages (dist/console, served by the authority) and their type check, beside the rest.
  await runAll([
    ['tsc -p tsconfig.json', [TSC, '-p', join(root, 'tsconfig.json')]],
    ['tsc -p console/tsconfig.json', [TSC, '-p', join(root, 'console', 'tsconfig.json')]],
    ['vite build', [VITE, ...CONSOLE_BUILD]],
  ]);
  cpSync(join(root, 'test', 'support'), join(root, 'dist', 'test', 'support'), { recursive: true, filter: (src) => !src.endsWith('.d.mts') });
  finishDist();
}

if (process.argv[1] && resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  try {
    await buildTests();
  } catch (err) {
    process.stderr.write(`${err.message}\n`);
    process.exit(1);
  }
}
