#!/usr/bin/env node
/**
 * `npm run bench`: the evaluate benchmark (test/bench/evaluate-bench.mjs), then the proxy
 * benchmark (test/bench/proxy-bench.mjs, its durability rows from durability-bench.mjs last), on
 * real Postgres and Redis. Starts throwaway servers the
 * way `npm test` does (test/support/servers.mjs), or uses DATABASE_URL / REDIS_URL when they are
 * set (a database is created on that server for each benchmark and dropped after). Exits 0 when
 * the benchmarks ran without errors, whatever the figures; 1 when one could not run or a request
 * failed; 130/143 when interrupted.
 *
 * Settings (environment):
 *   BENCH_SECONDS         measured window per scenario, default 5 (at most 60)
 *   BENCH_WARMUP_SECONDS  discarded warm-up per scenario, default 1 (at most 30)
 *   BENCH_PROCESS_WARMUP_SECONDS  discarded load on each freshly started server before its first
 *                         measured run, default 10 (at most 120): V8 compiles and tiers up the
 *                         hot code over a process's first seconds (see test/bench/README.md)
 *   BENCH_CONCURRENCY     closed-loop clients, default 32 (spread evenly over 16 orgs in that scenario)
 *   BENCH_RATE            open-loop requests per second, default 500 (at most 5000)
 *   BENCH_DURABLE=1       start the throwaway Postgres with fsync and synchronous_commit on
 *                         (npm test's server runs without them)
 *   BENCH_CPU_PROFILE=DIR write CPU profiles into DIR (node --cpu-prof): the authority child of
 *                         the evaluate bench, the proxy child of the proxy bench
 *   BENCH_ONLY            evaluate | proxy | floor | durability | mcp: run only that benchmark (default:
 *                         evaluate and proxy, which includes the floor); floor = the three parts of
 *                         an enforced request's floor alone (floor-bench.mjs); durability = the
 *                         proxy bench's durability rows alone (the enforced route with store
 *                         durability none, aof on disk, replica; each mode on its own
 *                         redis-server processes, started here from PATH or /usr/bin even when
 *                         REDIS_URL is set), with the authority they need; mcp = the proxy
 *                         bench's MCP rows alone (mcp-bench.mjs), with the authority, the
 *                         upstream and the proxy they need
 *   BENCH_PROXY_CONNECTIONS  proxy bench: closed-loop connections, default 32
 *   BENCH_PROXY_RATE      proxy bench: open-loop requests per second, default 1000 (the durability
 *                         rows' open loop too)
 *   BENCH_SOAK_SECONDS    proxy bench: an enforced open-loop soak this long for the proxy's memory,
 *                         default 0 (none); 300 is the 5-minute check
 *   BENCH_SOAK_RATE       proxy bench: the soak's requests per second, default 500
 *   BENCH_NODES=BIN[,BIN] run the whole selection once on each of these Node binaries, one after
 *                         the other, every process of a run (authority, proxy, upstream, load
 *                         generator) on that run's Node; each report names its Node version, and
 *                         ratios are read within one report, never across two
 *
 * Example:
 *   npm run bench
 *   BENCH_SECONDS=10 BENCH_DURABLE=1 npm run bench
 *   BENCH_ONLY=proxy BENCH_SOAK_SECONDS=300 npm run bench
 *   BENCH_ONLY=durability npm run bench
 *   BENCH_ONLY=floor npm run bench
 *   BENCH_NODES=node,/opt/node24/bin/node npm run bench   # the machine's Node, then Node 24
 */
import { spawn, spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { startPostgres, startRedis, stopServers } from '../support/servers.mjs';
import { serverUrl, setting, stopOnSignals } from './bench-common.mjs';
import { runEvaluateBench } from './evaluate-bench.mjs';
import { runProxyBench } from './proxy-bench.mjs';
import { runFloorBench } from './floor-bench.mjs';

const log = (line) => process.stdout.write(`${line}\n`);

const DURABLE_SETTINGS = ['fsync=on', 'synchronous_commit=on', 'full_page_writes=on'];

function readOptions() {
  return {
    seconds: setting('BENCH_SECONDS', 5, { min: 0.5, max: 60 }),
    warmupSeconds: setting('BENCH_WARMUP_SECONDS', 1, { min: 0, max: 30 }),
    processWarmupSeconds: setting('BENCH_PROCESS_WARMUP_SECONDS', 10, { min: 0, max: 120 }),
    concurrency: setting('BENCH_CONCURRENCY', 32, { min: 1, max: 512, integer: true }),
    rate: setting('BENCH_RATE', 500, { min: 1, max: 5_000, integer: true }),
    durable: process.env.BENCH_DURABLE === '1',
    cpuProfileDir: process.env.BENCH_CPU_PROFILE || undefined,
    connections: setting('BENCH_PROXY_CONNECTIONS', 32, { min: 1, max: 512, integer: true }),
    proxyRate: setting('BENCH_PROXY_RATE', 1_000, { min: 1, max: 5_000, integer: true }),
    soakSeconds: setting('BENCH_SOAK_SECONDS', 0, { min: 0, max: 3_600, integer: true }),
    soakRate: setting('BENCH_SOAK_RATE', 500, { min: 1, max: 2_000, integer: true }),
  };
}

const BENCHES = {
  evaluate: (options) => runEvaluateBench(options),
  // The proxy bench's open loop has its own rate: the targets are stated at 1,000 requests/s.
  proxy: (options) => runProxyBench({ ...options, rate: options.proxyRate }),
  // The proxy bench's durability rows alone (the full proxy bench runs them too).
  durability: (options) => runProxyBench({ ...options, rate: options.proxyRate, only: 'durability' }),
  // The proxy bench's MCP rows alone (the full proxy bench runs them too).
  mcp: (options) => runProxyBench({ ...options, rate: options.proxyRate, only: 'mcp' }),
  // The floor of an enforced request alone: Ed25519 verify, Redis round trip, undici dispatch.
  floor: (options) => runFloorBench(options),
};

/** The benchmarks BENCH_ONLY names, or all of them (evaluate and proxy: proxy includes durability). */
function selectedBenches() {
  const only = process.env.BENCH_ONLY;
  if (only === undefined || only === '') return ['evaluate', 'proxy'];
  if (!Object.hasOwn(BENCHES, only)) throw new Error(`BENCH_ONLY=${only}: expected one of ${Object.keys(BENCHES).join(', ')}`);
  return [only];
}

const stop = stopOnSignals(log);

async function main() {
  const options = readOptions();
  const benches = selectedBenches();
  const databaseUrl = serverUrl('postgres', await startPostgres({ log, settings: options.durable ? DURABLE_SETTINGS : [] }));
  const redisUrl = serverUrl('redis', await startRedis({ log }));
  let allOk = true;
  for (const name of benches) {
    if (stop.signal.aborted) break;
    log(`\n== the ${name} benchmark ==`);
    // One benchmark that cannot run does not keep the other from running; the exit code says so.
    try {
      const { ok } = await BENCHES[name]({ ...options, databaseUrl, redisUrl, log, signal: stop.signal });
      allOk &&= ok;
    } catch (err) {
      if (stop.signal.aborted) throw err;
      log(`${name} bench error: ${err?.stack ?? err}`);
      allOk = false;
    }
  }
  return allOk ? 0 : 1;
}

/**
 * BENCH_NODES: this script again on each binary (BENCH_NODES cleared), its output streamed; the
 * exit code is the first failing run's, else 0.
 */
async function onEachNode(binaries) {
  let code = 0;
  for (const binary of binaries) {
    if (stop.signal.aborted) break;
    const version = spawnSync(binary, ['--version'], { encoding: 'utf8' });
    if (version.status !== 0) {
      log(`\n== BENCH_NODES: ${binary} does not run (${version.error?.message ?? version.stderr.trim()}) ==`);
      code ||= 1;
      continue;
    }
    log(`\n==== Node ${version.stdout.trim()} (${binary}) ====`);
    // A process group of its own, so that a Ctrl-C reaches it once, from here, and the run can
    // stop its servers (a second signal would make it exit at once).
    const child = spawn(binary, [fileURLToPath(import.meta.url)], { env: { ...process.env, BENCH_NODES: '' }, stdio: 'inherit', detached: true });
    const kill = () => child.kill('SIGINT');
    stop.signal.addEventListener('abort', kill, { once: true });
    const exit = await new Promise((resolve) => child.once('close', (status, signal) => resolve(status ?? (signal ? 1 : 0))));
    stop.signal.removeEventListener('abort', kill);
    code ||= exit;
  }
  return code;
}

const nodes = (process.env.BENCH_NODES ?? '').split(',').map((binary) => binary.trim()).filter(Boolean);
let exitCode = 1;
try {
  exitCode = nodes.length > 0 ? await onEachNode(nodes) : await main();
} catch (err) {
  log(stop.interrupted() ? `bench stopped: ${err?.message ?? err}` : `bench error: ${err?.stack ?? err}`);
} finally {
  await stopServers();
}
process.exit(stop.interrupted() || exitCode);
