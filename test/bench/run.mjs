#!/usr/bin/env node
/**
 * `npm run bench`: the evaluate benchmark (test/bench/evaluate-bench.mjs) on real Postgres and
 * Redis. Starts throwaway servers the way `npm test` does (test/support/servers.mjs), or uses
 * DATABASE_URL / REDIS_URL when they are set (a database is created on that server for the run
 * and dropped after). Exits 0 when the benchmark ran without errors, whatever the figures;
 * 1 when it could not run or a request failed; 130/143 when interrupted.
 *
 * Settings (environment):
 *   BENCH_SECONDS         measured window per scenario, default 5 (at most 60)
 *   BENCH_WARMUP_SECONDS  discarded warm-up per scenario, default 1 (at most 30)
 *   BENCH_CONCURRENCY     closed-loop clients, default 32 (spread evenly over 16 orgs in that scenario)
 *   BENCH_RATE            open-loop requests per second, default 500 (at most 5000)
 *   BENCH_DURABLE=1       start the throwaway Postgres with fsync and synchronous_commit on
 *                         (npm test's server runs without them)
 *   BENCH_CPU_PROFILE=DIR write a CPU profile of the authority child into DIR (node --cpu-prof)
 *
 * Example:
 *   npm run bench
 *   BENCH_SECONDS=10 BENCH_DURABLE=1 npm run bench
 */
import { startPostgres, startRedis, stopServers } from '../support/servers.mjs';
import { runEvaluateBench } from './evaluate-bench.mjs';

const log = (line) => process.stdout.write(`${line}\n`);

const DURABLE_SETTINGS = ['fsync=on', 'synchronous_commit=on', 'full_page_writes=on'];

/** A bounded number from the environment, or the default; anything else stops the run. */
function setting(name, fallback, { min, max, integer = false }) {
  const raw = process.env[name];
  if (raw === undefined || raw === '') return fallback;
  const value = Number(raw);
  if (!Number.isFinite(value) || value < min || value > max || (integer && !Number.isInteger(value))) {
    throw new Error(`${name}=${raw}: expected ${integer ? 'an integer' : 'a number'} from ${min} to ${max}`);
  }
  return value;
}

function readOptions() {
  return {
    seconds: setting('BENCH_SECONDS', 5, { min: 0.5, max: 60 }),
    warmupSeconds: setting('BENCH_WARMUP_SECONDS', 1, { min: 0, max: 30 }),
    concurrency: setting('BENCH_CONCURRENCY', 32, { min: 1, max: 512, integer: true }),
    rate: setting('BENCH_RATE', 500, { min: 1, max: 5_000, integer: true }),
    durable: process.env.BENCH_DURABLE === '1',
    cpuProfileDir: process.env.BENCH_CPU_PROFILE || undefined,
  };
}

/** The URL of a server to use, or throws with why there is none. */
function urlOf(name, outcome) {
  if (outcome.ok) return outcome.url;
  const why = outcome.failed ? `the server could not be started: ${outcome.reason}\n${outcome.logTail}` : outcome.reason;
  throw new Error(`the bench cannot run: ${name}: ${why}`);
}

const controller = new AbortController();
let interrupted = 0;
for (const [signal, code] of [['SIGINT', 130], ['SIGTERM', 143]]) {
  process.on(signal, () => {
    // The first signal lets the bench stop its child and drop its database; a second one does not wait.
    if (interrupted !== 0) process.exit(code);
    interrupted = code;
    log(`\ninterrupted by ${signal}; stopping the bench`);
    controller.abort();
  });
}

async function main() {
  const options = readOptions();
  const databaseUrl = urlOf('postgres', await startPostgres({ log, settings: options.durable ? DURABLE_SETTINGS : [] }));
  const redisUrl = urlOf('redis', await startRedis({ log }));
  const { ok } = await runEvaluateBench({ ...options, databaseUrl, redisUrl, log, signal: controller.signal });
  return ok ? 0 : 1;
}

let exitCode = 1;
try {
  exitCode = await main();
} catch (err) {
  log(interrupted ? `bench stopped: ${err?.message ?? err}` : `bench error: ${err?.stack ?? err}`);
} finally {
  await stopServers();
}
process.exit(interrupted || exitCode);
