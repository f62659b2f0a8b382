#!/usr/bin/env node
/**
 * Compares builds of the authority's evaluate path in one run, alternating them round by round.
 * Two full `npm run bench` runs of the same code differ by tens of percent on a shared 2-core
 * machine, so a change worth 10–30 % only shows when the builds are measured side by side, under
 * the same drift.
 *
 *   node test/bench/evaluate-compare.mjs LABEL=BUILD[@NODE_OPTIONS] ...
 *
 *   BUILD  `.`: this checkout's dist/ (run `npm run build` first); anything else: a git revision,
 *          checked out into a temporary worktree and built there with this checkout's node_modules
 *   @NODE_OPTIONS  the authority's Node flags for that entry (default: none, as in the evaluate bench)
 *
 * Environment: BENCH_ROUNDS (3), BENCH_SECONDS (4), BENCH_WARMUP_SECONDS (1), BENCH_PROCESS_WARMUP_SECONDS
 * (10: a closed loop on each fresh authority before its measured runs), BENCH_CONCURRENCY
 * (32), BENCH_RATE (500), BENCH_ORGS (1: the closed loop's clients spread over this many
 * organizations, as the evaluate bench's 16-organization row does; the open loop uses the first),
 * BENCH_CPU_PROFILE=DIR (a CPU profile of each build's authority, the last round's, in
 * DIR/LABEL/authority.cpuprofile), BENCH_TRACING=LABEL[,LABEL] (those entries'
 * authorities run with OpenTelemetry tracing on, exporting with the SDK's defaults to an OTLP sink
 * that accepts and discards; see proxy-compare.mjs), and DATABASE_URL / REDIS_URL (else a
 * throwaway Postgres and redis-server, as `npm test` starts them).
 *
 * Each build gets a database of its own, migrated by its own authority on its first start, with its
 * organizations (admin key, the example policy) created through that build's dist/ modules, so a
 * build whose schema differs is set up as its code expects; the database is kept across rounds.
 * Every run starts that build's authority afresh (evaluate-bench.mjs's child), warms it up, then
 * measures the evaluate bench's scenarios: a closed loop of BENCH_CONCURRENCY clients
 * (throughput, and the authority's CPU per evaluation from its own accounting in /proc, with
 * Postgres's beside it when Postgres runs on this machine) and an open loop at BENCH_RATE (p99
 * from the scheduled send times). It prints every run, then per build the medians and the ratio to
 * the first entry within each round.
 *
 * @example
 *   npm run build
 *   node test/bench/evaluate-compare.mjs base=HEAD~1 new=.
 *   BENCH_ROUNDS=6 node test/bench/evaluate-compare.mjs semi16=.@--max-semi-space-size=16 default=.
 *   BENCH_ORGS=16 node test/bench/evaluate-compare.mjs base=HEAD~1 new=.
 *   BENCH_TRACING=on node test/bench/evaluate-compare.mjs off=. on=.
 */
import { mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { startPostgres, startRedis, stopServers } from '../support/servers.mjs';
import { createBenchDatabase, fmt, formatTable, serverUrl, setting, stopOnSignals } from './bench-common.mjs';
import {
  abortOnExit, authoritySecrets, createEvaluateOrgs, evaluatePool, evaluateSender, loadProduct, spread, startEvaluateAuthority,
} from './evaluate-bench.mjs';
import { closedLoop, measureScenario, openLoop } from './evaluate-report.mjs';
import {
  createBuilds, exportSummary, median, parseEntry, PROCESS_WARMUP, ROUNDS, roundOrder, SECONDS, sinkStats, tracedLabels, tracingEnv, WARMUP,
} from './compare-builds.mjs';
import { startBenchServer, stopAll } from './proxy-processes.mjs';
import { localStorePids } from './proxy-setup.mjs';

const log = (line) => process.stdout.write(`${line}\n`);
const CONCURRENCY = setting('BENCH_CONCURRENCY', 32, { min: 1, max: 512, integer: true });
const RATE = setting('BENCH_RATE', 500, { min: 1, max: 5_000, integer: true });
const ORGS = setting('BENCH_ORGS', 1, { min: 1, max: 64, integer: true });

const entries = process.argv.slice(2).map(parseEntry);
/** The entries whose authority traces (BENCH_TRACING=LABEL,…). */
const TRACED = tracedLabels(entries, log);
if (entries.length < 2 || new Set(entries.map((entry) => entry.label)).size !== entries.length || TRACED === null) {
  log('usage: node test/bench/evaluate-compare.mjs LABEL=BUILD[@NODE_OPTIONS] LABEL=BUILD[@NODE_OPTIONS] ...  (labels distinct; BENCH_TRACING=LABEL,…)');
  process.exit(2);
}

const stop = stopOnSignals(log);
const builds = createBuilds({ log, onInterrupt: stop.interruptedBy });

/** The build's organizations, created through its own modules once its authority has migrated the database. */
async function organizationsOf(entry) {
  const product = await loadProduct(dirname(dirname(entry.cli)));
  const db = new product.PgDb({ connectionString: entry.database.url });
  try {
    return await createEvaluateOrgs(product, db, ORGS);
  } finally {
    await db.close().catch(() => undefined);
  }
}

const PROFILE_DIR = process.env.BENCH_CPU_PROFILE || undefined;

/** One run of one build: its authority started afresh, the closed loop, then the open loop. */
async function measure(entry, round, redisUrl, postgresPids, sink) {
  const traced = TRACED.has(entry.label);
  const authority = await startEvaluateAuthority({
    databaseUrl: entry.database.url, redisUrl, dir: entry.dir, cli: entry.cli, nodeOptions: entry.nodeOptions, secrets: entry.secrets,
    cpuProfileDir: PROFILE_DIR && join(PROFILE_DIR, entry.label),
    env: traced ? tracingEnv(sink, 'countersign-authority-bench') : {},
  });
  const exportsBefore = traced ? await sinkStats(sink) : null;
  const pool = evaluatePool(authority.url, CONCURRENCY);
  let measured;
  try {
    entry.orgs ??= await organizationsOf(entry);
    const signal = AbortSignal.any([stop.signal, abortOnExit(authority)]);
    const run = { authority, warmupMs: WARMUP * 1000, windowMs: SECONDS * 1000, signal, postgresPids };
    const tag = `${entry.label}-${round}`;
    const closedLoopOf = (name, clientTag) => (window) =>
      closedLoop(name, spread(entry.orgs, CONCURRENCY, (org, i) => evaluateSender(pool, org.key, `${tag}-${clientTag}${i}`)), { window, signal });
    // The process warm-up: the fresh authority compiles its hot code under this load, unmeasured.
    const warm = PROCESS_WARMUP > 0
      ? await measureScenario('process warm-up', closedLoopOf('process warm-up', 'w'), { ...run, warmupMs: 0, windowMs: PROCESS_WARMUP * 1000 })
      : null;
    const closed = await measureScenario('closed loop', closedLoopOf('closed loop', 'c'), run);
    const open = await measureScenario('open loop', (window) =>
      openLoop('open loop', evaluateSender(pool, entry.orgs[0].key, `${tag}-o`), { rate: RATE, window, signal }), run);
    const runs = [warm, closed, open].filter((row) => row !== null);
    const kinds = runs.flatMap((row) => [...row.errorKinds]).map(([kind, { count, example }]) => `${count}× ${kind}, e.g. ${example}`);
    measured = { perSecond: closed.perSecond, cpuUs: closed.authorityUs, postgresUs: closed.postgresUs, p99: open.p99, errors: runs.reduce((sum, row) => sum + row.errors, 0), kinds };
  } finally {
    await pool.close();
    await authority.stop();
  }
  // After the stop, so the last export (at shutdown) is counted.
  if (traced) measured.exported = exportSummary(exportsBefore, await sinkStats(sink), authority.output());
  return measured;
}


/** Higher throughput is better; less CPU and a lower p99 (every build runs at the same rate) too. */
const METRICS = [
  { name: '/s', of: (r) => r.perSecond, digits: 0, better: 1 },
  { name: 'µs', of: (r) => r.cpuUs, digits: 0, better: -1 },
  { name: 'pg µs', of: (r) => r.postgresUs, digits: 0, better: -1 },
  { name: 'p99', of: (r) => r.p99, digits: 2, better: -1 },
];

function summary(results) {
  const firstLabel = entries[0].label;
  const first = results.get(firstLabel);
  const rows = entries.map(({ label }) => {
    const own = results.get(label);
    const cells = [label];
    const ahead = [];
    for (const metric of METRICS) {
      const ratios = own.map((result, i) => metric.of(result) / metric.of(first[i]));
      cells.push(fmt(median(own.map(metric.of)), metric.digits), fmt(median(ratios), 2));
      ahead.push(ratios.filter((ratio) => Math.sign(ratio - 1) === metric.better).length);
    }
    cells.push(label === firstLabel ? '-' : `${ahead.join(' / ')} of ${own.length}`);
    return cells;
  });
  const versus = `÷ ${firstLabel}'s`;
  const header = ['build', 'median /s', versus, 'authority µs/eval', versus, 'postgres µs/eval', versus, `p99 ms at ${RATE}/s`, versus,
    'rounds ahead (/s, µs, pg µs, p99)'];
  return [
    formatTable(header, rows),
    `(÷ ${firstLabel}'s: the median over rounds of the ratio to ${firstLabel}'s figure in the same round; ahead: more /s, fewer µs, lower p99; postgres µs/eval is blank when Postgres runs elsewhere)`,
  ].join('\n');
}

async function main() {
  const dir = mkdtempSync(join(tmpdir(), 'countersign-compare-'));
  try {
    for (const entry of entries) entry.cli = builds.cliOf(entry.build);
    const databaseUrl = serverUrl('postgres', await startPostgres({ log }));
    const redisUrl = serverUrl('redis', await startRedis({ log }));
    const postgresPids = await localStorePids(undefined, databaseUrl);
    for (const entry of entries) {
      entry.database = await createBenchDatabase(databaseUrl, 'countersign_compare');
      entry.dir = join(dir, entry.label);
      mkdirSync(entry.dir);
      entry.secrets = authoritySecrets();
    }
    const sink = TRACED.size > 0 ? await startBenchServer('otlp-sink', {}) : undefined;
    if (sink) log(`tracing on for ${[...TRACED].join(', ')}: OTLP/HTTP (protobuf) to the sink at ${sink.url}, the SDK's default batching; off for the others`);
    log(`\n== evaluate, ${ORGS} org${ORGS === 1 ? '' : 's'}: closed loop of ${CONCURRENCY} clients, then open loop at ${RATE}/s; ${ROUNDS} rounds of ${WARMUP} s + ${SECONDS} s each, ` +
      `each on a fresh authority after ${PROCESS_WARMUP} s of process warm-up ==`);
    const results = new Map(entries.map((entry) => [entry.label, []]));
    for (let round = 1; round <= ROUNDS; round += 1) {
      for (const entry of roundOrder(entries, round)) {
        const result = await measure(entry, round, redisUrl, postgresPids, sink);
        results.get(entry.label).push(result);
        log(`round ${round} ${entry.label}: ${fmt(result.perSecond, 0)}/s, ${fmt(result.cpuUs, 0)} µs authority and ${fmt(result.postgresUs, 0)} µs Postgres CPU/eval, ` +
          `p99 at ${RATE}/s ${fmt(result.p99, 2)} ms, ${result.errors} errors${result.kinds.length > 0 ? ` (${result.kinds.join('; ')})` : ''}` +
          `${result.exported ? `; tracing on: ${result.exported}` : ''}`);
      }
    }
    log(`\n${summary(results)}`);
    return [...results.values()].flat().every((result) => result.errors === 0) ? 0 : 1;
  } finally {
    for (const entry of entries) {
      // On Ctrl-C a throwaway Postgres got the signal too and is gone with its databases.
      await entry.database?.drop().catch((error) => stop.interrupted() || log(`could not drop a compare database: ${error.message}`));
    }
    await stopAll();
    await stopServers();
    builds.cleanUp();
    rmSync(dir, { recursive: true, force: true });
  }
}

let exitCode = 1;
try {
  exitCode = await main();
} catch (error) {
  log(stop.interrupted() ? `evaluate-compare stopped: ${error?.message ?? error}` : `evaluate-compare failed: ${error?.stack ?? error}`);
}
process.exit(stop.interrupted() || exitCode);
