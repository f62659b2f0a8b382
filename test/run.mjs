#!/usr/bin/env node
/**
 * `npm test`: compiles the product and the tests into dist/ (test/build.mjs) and runs tap on the
 * compiled tests, with throwaway Postgres and Redis servers when the binaries are installed
 * and DATABASE_URL / REDIS_URL are not set, so the real-server variants of the suites run too;
 * likewise a 3-primary Redis Cluster (REDIS_CLUSTER_NODES) and a Redis Sentinel group
 * (REDIS_SENTINELS, REDIS_SENTINEL_MASTER), exported to the test processes as those variables.
 * Prints `N passed, N failed` last (N = named subtests one level inside each test file, plus test
 * files that failed without a failing subtest), after a `failed: file › subtest` line for each
 * failure, and exits with tap's exit code.
 *
 * The browser tests (test/browser/: Chromium, the console) run after the rest, one file at a
 * time: a Chromium beside three other test files would starve the CPU-bound ones on a 2-core
 * machine past their timeout. Their coverage is not measured (the console's server side is
 * covered by the integration suites).
 *
 * Example:
 *   npm test                                    # every test file from .taprc
 *   npm test -- test/integration/db.test.ts     # extra arguments go to tap (a test's .ts path
 *                                               # stands for its compiled dist/test/….js)
 *   DATABASE_URL=postgres://u:p@db/x npm test   # use that server, start none
 *   npm run test:fuzz                           # (--fuzz) only the generated bad input, at its full
 *                                               # count; `npm test` sends a tenth of it
 */
import { spawn } from 'node:child_process';
import { readdirSync, realpathSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { buildTests } from './build.mjs';
import { startRedisCluster as startRedisClusterServers, startRedisSentinel as startRedisSentinelServers } from './support/redis-topologies.mjs';
import { startPostgres as startPostgresServer, startRedis as startRedisServer, stopServers } from './support/servers.mjs';

const root = resolve(dirname(fileURLToPath(import.meta.url)), '..');

let extraFailures = 0;

const log = (line) => process.stdout.write(`${line}\n`);

/** Says why a real-server suite does not run; a server that was found but did not start is a failure. */
function reportUnavailable(name, outcome) {
  if (!outcome.failed) {
    log(`real-server suite skipped: ${name}: ${outcome.reason}`);
    return;
  }
  extraFailures++;
  log(`real-server suite skipped: ${name}: the server could not be started (counted as a failure): ${outcome.reason}`);
  log(outcome.logTail);
}

async function startPostgres() {
  const outcome = await startPostgresServer({ log });
  if (outcome.ok) process.env.DATABASE_URL = outcome.url;
  else reportUnavailable('postgres', outcome);
}

async function startRedis() {
  const outcome = await startRedisServer({ log });
  if (outcome.ok) process.env.REDIS_URL = outcome.url;
  else reportUnavailable('redis', outcome);
}

async function startRedisCluster() {
  const outcome = await startRedisClusterServers({ log });
  if (outcome.ok) process.env.REDIS_CLUSTER_NODES = outcome.nodes.join(',');
  else reportUnavailable('redis-cluster', outcome);
}

async function startRedisSentinel() {
  const outcome = await startRedisSentinelServers({ log });
  if (outcome.ok) {
    process.env.REDIS_SENTINELS = outcome.sentinels.join(',');
    process.env.REDIS_SENTINEL_MASTER = outcome.masterName;
  } else {
    reportUnavailable('redis-sentinel', outcome);
  }
}

/**
 * Counts results in tap's TAP output. Each test file is a subtest at indent 0, either
 * `# Subtest: file` … `ok N - file` (streamed) or `ok N - file {` … `}` (buffered, when files run
 * in parallel); the lines at exactly 4 spaces inside are its named subtests.
 */
function createCounter() {
  const counts = { passed: 0, failed: 0 };
  /** `file › subtest` for each failure, so the end of a long run names what failed. */
  const failures = [];
  let file; // { name, failedSubtests, failed }
  const finish = () => {
    if (file?.failed && file.failedSubtests === 0) {
      counts.failed++;
      failures.push(file.name.replace(/ # time=\S+$/, ''));
    }
    file = undefined;
  };
  const line = (text) => {
    const sub = /^ {4}(not )?ok \d+( - .*)?$/.exec(text);
    if (sub) {
      // `not ok … # TODO` is not a failure in TAP (nor for tap's exit code).
      if (sub[1] && /# TODO\b/.test(text)) return;
      if (sub[1]) {
        counts.failed++;
        failures.push(`${file?.name ?? '?'} › ${(sub[2] ?? '').replace(/^ - /, '').replace(/ # time=\S+$/, '')}`);
        if (file) file.failedSubtests++;
      } else {
        counts.passed++;
      }
      return;
    }
    const subtest = /^# Subtest: (.*)$/.exec(text);
    if (subtest) {
      file = { name: subtest[1], failedSubtests: 0, failed: false };
      return;
    }
    const top = /^(not )?ok \d+(?: - (.*?))?( \{)?$/.exec(text);
    if (top) {
      if (top[3]) {
        file = { name: top[2] ?? '?', failedSubtests: 0, failed: Boolean(top[1]) };
      } else {
        file ??= { name: top[2] ?? '?', failedSubtests: 0, failed: false };
        file.failed = Boolean(top[1]);
        finish();
      }
      return;
    }
    if (text === '}') finish();
  };
  return { counts, failures, line };
}

function runTap(args) {
  return new Promise((resolveRun, reject) => {
    // Run the bin's script with this node rather than through its `#!/usr/bin/env node` line,
    // which depends on PATH.
    const tapBin = realpathSync(join(root, 'node_modules', '.bin', 'tap'));
    const child = spawn(process.execPath, [tapBin, '--reporter=tap', ...args], {
      cwd: root,
      // The tests run compiled: the TypeScript loader (ts-node) tap puts into every test process
      // would only cost each about a second of CPU. TAP_TYPE_STRIP_ONLY=1 leaves it out; tap
      // keeps it on Node 20, which cannot strip types itself.
      env: { TAP_TYPE_STRIP_ONLY: '1', ...process.env },
      stdio: ['ignore', 'pipe', 'inherit'],
    });
    runTap.child = child;
    const counter = createCounter();
    let pending = '';
    child.stdout.on('data', (chunk) => {
      process.stdout.write(chunk);
      pending += chunk.toString();
      const lines = pending.split('\n');
      pending = lines.pop() ?? '';
      for (const l of lines) counter.line(l.replace(/\r$/, ''));
    });
    child.once('error', reject);
    child.once('close', (code, signal) => {
      if (pending) counter.line(pending);
      resolveRun({ code: code ?? (signal ? 1 : 0), counts: counter.counts, failures: counter.failures });
    });
  });
}

/** `test/x.test.ts` (as a user types it) → `dist/test/x.test.js` (what runs); other arguments as they are. */
function compiledPath(arg) {
  const match = /^(?:\.\/)?(test\/.+)\.ts$/.exec(arg);
  return match ? `dist/${match[1]}.js` : arg;
}

function cleanup() {
  return stopServers();
}

for (const [signal, code] of [['SIGINT', 130], ['SIGTERM', 143]]) {
  process.on(signal, () => {
    runTap.child?.kill(signal);
    log(`\ninterrupted by ${signal}; stopping test servers`);
    cleanup().finally(() => process.exit(code));
  });
}

/**
 * `--fuzz`: the generated bad input (test/property/bad-input*.test.ts) at its full count, which
 * `npm test` runs at a tenth (test/property/bad-input-requests.ts reads BAD_INPUT_FULL). It runs
 * on the embedded backends only, so no server is started; coverage is the whole suite's business.
 */
function fuzzPhase() {
  process.env.BAD_INPUT_FULL = '1';
  const folder = join('dist', 'test', 'property');
  const files = readdirSync(join(root, folder)).filter((name) => /^bad-input(-\d+)?\.test\.js$/.test(name));
  return ['--disable-coverage', ...files.sort().map((name) => join(folder, name))];
}

async function main() {
  const fuzz = process.argv.includes('--fuzz');
  // Side by side: the compiler, and the servers, which each take a second or a few (initdb; Redis'
  // own timers for the Cluster and Sentinel).
  const built = buildTests();
  built.catch(() => {}); // awaited below, after the servers are up
  if (!fuzz) await Promise.all([startPostgres(), startRedis(), startRedisCluster(), startRedisSentinel()]);
  await built;
  const args = process.argv.slice(2).filter((arg) => arg !== '--fuzz').map(compiledPath);
  const phases = fuzz
    ? [[...fuzzPhase(), ...args]]
    : args.length > 0
      ? [args]
      : [['--exclude', 'dist/test/browser/**', '--exclude', '**/node_modules/**'], ['--jobs=1', '--disable-coverage', 'dist/test/browser']];
  let code = 0;
  const counts = { passed: 0, failed: 0 };
  const failures = [];
  for (const phase of phases) {
    const run = await runTap(phase);
    code ||= run.code;
    counts.passed += run.counts.passed;
    counts.failed += run.counts.failed;
    failures.push(...run.failures);
  }
  for (const failure of failures) log(`failed: ${failure}`);
  counts.failed += extraFailures;
  if (code !== 0 && counts.failed === 0) {
    log(`tap exited with code ${code} without a failing test (coverage below the thresholds in .taprc, or a runner error; see above)`);
  }
  log(`${counts.passed} passed, ${counts.failed} failed`);
  return code !== 0 ? code : counts.failed > 0 ? 1 : 0;
}

let exitCode = 1;
try {
  exitCode = await main();
} catch (err) {
  log(`test runner error: ${err?.stack ?? err}`);
  // Keep the promise that the summary is the last line, even when nothing could run.
  log(`0 passed, ${extraFailures + 1} failed`);
} finally {
  await cleanup();
}
process.exit(exitCode);
