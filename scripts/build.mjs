/**
 * `npm run build`, which `npm pack` and `npm publish` run first (prepack): compiles the product
 * (tsconfig.build.json: authority/, proxy/, shared/, bin/) into dist/ and the console's pages into
 * dist/console/, then copies the Envoy external authorizer's `.proto` files beside its module and
 * makes the `countersign` command executable. The product's folders in dist/ are emptied first,
 * so a package never carries a module whose source was deleted or renamed; dist/test/ (the
 * compiled tests, which the package leaves out) is not touched.
 *
 * Example:
 *   node scripts/build.mjs    # then: node dist/bin/countersign.js --version
 */
import { spawn } from 'node:child_process';
import { chmodSync, cpSync, rmSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = resolve(dirname(fileURLToPath(import.meta.url)), '..');
const require = createRequire(import.meta.url);

/** The compilers, run with this node: TypeScript's tsc and Vite (the console). */
export const TSC = require.resolve('typescript/bin/tsc');
export const VITE = join(dirname(require.resolve('vite/package.json')), 'bin', 'vite.js');
/** Vite's arguments for the console's pages (dist/console/). */
export const CONSOLE_BUILD = ['build', '--config', join(root, 'console', 'vite.config.ts'), '--logLevel', 'warn'];

/** The folders of dist/ that tsconfig.build.json writes (dist/console/ is Vite's, emptied by it). */
const PRODUCT_FOLDERS = ['authority', 'proxy', 'shared', 'bin'];

/** Runs `node <args>` to its end; resolves its exit status and output. */
function runNode(args) {
  return new Promise((resolveRun) => {
    const child = spawn(process.execPath, args, { cwd: root, stdio: ['ignore', 'pipe', 'pipe'] });
    let output = '';
    child.stdout.setEncoding('utf8').on('data', (chunk) => (output += chunk));
    child.stderr.setEncoding('utf8').on('data', (chunk) => (output += chunk));
    child.once('error', (error) => resolveRun({ status: null, output: `${output}${error.message}\n` }));
    child.once('close', (status) => resolveRun({ status, output }));
  });
}

/** Runs the named `node` commands side by side; rejects with the output of those that failed. */
export async function runAll(commands) {
  const runs = await Promise.all(commands.map(async ([name, args]) => ({ name, run: await runNode(args) })));
  const failed = runs.filter(({ run }) => run.status !== 0);
  if (failed.length > 0) throw new Error(failed.map(({ name, run }) => `${name} failed:\n${run.output}`).join('\n'));
}

/** What the compilers do not write: the .proto files the gRPC server loads, and the command's mode. */
export function finishDist() {
  cpSync(join(root, 'proxy', 'ext-authz', 'protos'), join(root, 'dist', 'proxy', 'ext-authz', 'protos'), { recursive: true });
  chmodSync(join(root, 'dist', 'bin', 'countersign.js'), 0o755);
}

export async function buildProduct() {
  for (const folder of PRODUCT_FOLDERS) rmSync(join(root, 'dist', folder), { recursive: true, force: true });
  await runAll([
    ['tsc -p tsconfig.build.json', [TSC, '-p', join(root, 'tsconfig.build.json')]],
    ['vite build', [VITE, ...CONSOLE_BUILD]],
  ]);
  finishDist();
}

if (process.argv[1] && resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  try {
    await buildProduct();
  } catch (err) {
    process.stderr.write(`${err.message}\n`);
    process.exit(1);
  }
}
