#!/usr/bin/env node
/**
 * Compares builds of the proxy on one of its paths (BENCH_PATH), alternating them round by round.
 * Two full `npm run bench` runs of the same code differ by up to 40 % on the 2-core development
 * machine, so a change worth 10–30 % only shows when both builds are measured side by side, under
 * the same drift. This is how the thread-pool verify and the semi-space size were chosen.
 *
 *   node test/bench/proxy-compare.mjs LABEL=BUILD[@NODE_OPTIONS] ...
 *
 *   BUILD  `.`: this checkout's dist/ (run `npm run build` first); anything else but the
 *          yardsticks below: a git revision, checked out into a temporary worktree and built
 *          there with this checkout's node_modules. The yardsticks are measured the same way,
 *          without tracing or Node flags: `naive-gate` (enforced path only), the proxy bench's
 *          naive gate (bench-servers.mjs: jose, SET NX, http-proxy), the yardstick of the enforce
 *          targets; `composed-floor` (enforced path only), the floor's three parts in one server
 *          and nothing else (bench-servers.mjs); `nginx` and `undici-dispatch` (pass-through
 *          only), nginx as the proxy bench runs it, the yardstick of the pass-through targets, and
 *          the bare forwarder on the proxy's engine (bench-servers.mjs); `upstream` (either path),
 *          the load generator straight at an upstream of its own, from which open loop reports
 *          every entry's added p99 (its p99 less the upstream's in the same round), and its
 *          difference from and ratio to the first entry's
 *   @NODE_OPTIONS  the proxy's Node flags for that entry (default: the container's, PROXY_NODE_OPTIONS)
 *
 * Environment: BENCH_ROUNDS (3), BENCH_SECONDS (4), BENCH_WARMUP_SECONDS (1), BENCH_PROCESS_WARMUP_SECONDS
 * (10: a closed loop that warms each fresh proxy before its run), BENCH_MODE (`closed`,
 * `open` or `both`; default both), BENCH_PATH (`enforce`, the default; `enforce-body`: an
 * enforced route whose facts come from a JSON body and its actor from the permit, as an MCP
 * call's; `pass`: the same GET on a path no route matches, no permit; `mcp-call`: the MCP route's
 * `tools/call`, a fresh permit in its `_meta` each; `mcp-list`: its `tools/list`, which passes),
 * BENCH_PROXY_CONNECTIONS (32), BENCH_PROXY_RATE (1000),
 * BENCH_CPU_PROFILE=DIR (a CPU profile of each build's proxy per mode, the last round's),
 * BENCH_TRACING=LABEL[,LABEL] (those entries' proxies run with OpenTelemetry tracing on, exporting
 * with the SDK's defaults, OTLP/HTTP protobuf, to an OTLP sink of bench-servers.mjs that accepts
 * and discards; the others with tracing off), and REDIS_URL (else a throwaway redis-server, as
 * `npm test` starts it).
 *
 * What tracing costs, and that off costs nothing measurable, in one run: the same build off and on,
 * and the build before tracing beside them:
 *
 *   BENCH_TRACING=on node test/bench/proxy-compare.mjs before=<commit before tracing> off=. on=.
 *
 * No authority runs: permits are signed here with a fresh Ed25519 key, whose JWKS a small loopback
 * server publishes at /v1/permit-keys. Each run is the enforced route of the proxy benchmark
 * (fresh permit per request), or its pass-through request, against bench-servers.mjs's upstream,
 * on an emptied Redis (emptyStore). Every other round runs the entries in reverse order. Per
 * build it prints every round, then the medians and the ratios to the first entry within each
 * round: of throughput in closed loop, of p99 in open loop (where every build runs at the same
 * rate), and of CPU per request in both. Beside the proxy's CPU per request it shows Redis's (when
 * the server runs on this machine: what the build's store commands cost it) and how many of the
 * machine's cores were busy in the window: a closed loop short of every core is held up by one
 * process's event loop, not by the machine. The enforce and pass-through targets of the proxy bench,
 * judged over alternating rounds instead of one window each:
 *
 *   BENCH_ROUNDS=6 node test/bench/proxy-compare.mjs naive=naive-gate enforce=.
 *   BENCH_ROUNDS=6 BENCH_PATH=pass BENCH_MODE=closed node test/bench/proxy-compare.mjs nginx=nginx bare=undici-dispatch pass=.
 *   BENCH_ROUNDS=6 BENCH_MODE=open node test/bench/proxy-compare.mjs naive=naive-gate enforce=. direct=upstream
 *   BENCH_ROUNDS=6 BENCH_PATH=pass BENCH_MODE=open node test/bench/proxy-compare.mjs nginx=nginx pass=. direct=upstream
 *
 * @example
 *   npm run build
 *   node test/bench/proxy-compare.mjs base=HEAD~1 new=.
 *   BENCH_MODE=closed node test/bench/proxy-compare.mjs semi4=.@'--max-semi-space-size=4 --max-old-space-size=96' semi8=.
 */
import { generateKeyPairSync } from 'node:crypto';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:http';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Redis } from 'ioredis';
import { startRedis, stopServers } from '../support/servers.mjs';
import { fmt, formatTable, serverUrl, setting } from './bench-common.mjs';
import { cpuBetween, cpuTimes, machineBusySeconds, rssSampler } from './proc-stats.mjs';
import { findNginx, runGenerator, sleep, startBenchServer, startCountersignProxy, startNginx, stopAll } from './proxy-processes.mjs';
import { answerOf, CALL, CALL_EVALUATION, callWithPermit, LIST } from './mcp-bench.mjs';
import { ACTOR, bodyRouteRequest, localStorePids, PASS_REQUEST, PERMIT_HEADER, proxyYaml } from './proxy-setup.mjs';
import {
  createBuilds, exportSummary, median, parseEntry, PROCESS_WARMUP, ROUNDS, roundOrder, SECONDS, sinkStats, tracedLabels, tracingEnv, WARMUP,
} from './compare-builds.mjs';

const root = resolve(dirname(fileURLToPath(import.meta.url)), '..', '..');
const { buildPermitClaims, signPermit } = await import(join(root, 'dist', 'authority', 'permits', 'sign.js'));
const { replayEpochKey } = await import(join(root, 'dist', 'shared', 'permits', 'store-keys.js'));
const { RedisStore } = await import(join(root, 'dist', 'shared', 'store', 'redis.js'));

const log = (line) => process.stdout.write(`${line}\n`);
const CONNECTIONS = setting('BENCH_PROXY_CONNECTIONS', 32, { min: 1, max: 512, integer: true });
const RATE = setting('BENCH_PROXY_RATE', 1_000, { min: 1, max: 5_000, integer: true });
const MODES = { closed: ['closed'], open: ['open'], both: ['closed', 'open'] }[process.env.BENCH_MODE ?? 'both'];
/**
 * Which of the proxy's paths is measured: the enforced route (without or with a body it is bound
 * to), pass-through (unmatched: pass), or the MCP route's `tools/call` with a fresh permit in
 * `_meta` and its `tools/list` (mcp-bench.mjs's requests, to the demo MCP server of the bench
 * upstream).
 */
const PATH = process.env.BENCH_PATH ?? 'enforce';
const PATHS = ['enforce', 'enforce-body', 'pass', 'mcp-call', 'mcp-list'];
/** The paths that send one request over and over; the others spend a fresh permit per request. */
const REUSED = PATH === 'pass' || PATH === 'mcp-list';
/**
 * Closed loop mints for this rate over warm-up and window (the composed floor reaches about 7,500/s
 * on the 2-core machine); a faster build ends its window early (reported).
 */
const CLOSED_MINT_RATE = 9000;
const UPSTREAM_BODY = '{"ok":true,"from":"bench-upstream"}';
const ORG = 'default';
const KID = 'compare-1';

/** The BUILDs that name a yardstick rather than a build of the proxy, and the paths each serves. */
const YARDSTICKS = {
  'naive-gate': ['enforce'], 'composed-floor': ['enforce'], nginx: ['pass'], 'undici-dispatch': ['pass'], upstream: PATHS,
};
const isYardstick = (entry) => Object.hasOwn(YARDSTICKS, entry.build);

const entries = process.argv.slice(2).map(parseEntry);
/** The entries whose proxy traces (BENCH_TRACING=LABEL,…). */
const TRACED = tracedLabels(entries);
const yardstickMisused = entries.some((entry) => isYardstick(entry) && (!YARDSTICKS[entry.build].includes(PATH) || entry.nodeOptions !== undefined || TRACED?.has(entry.label)));
const wantsNginx = entries.some((entry) => entry.build === 'nginx');
const nginxBinary = wantsNginx ? findNginx() : undefined;
if (entries.length < 2 || !MODES || !PATHS.includes(PATH) || TRACED === null || yardstickMisused || (wantsNginx && nginxBinary === undefined)) {
  log(`usage: node test/bench/proxy-compare.mjs LABEL=BUILD[@NODE_OPTIONS] LABEL=BUILD[@NODE_OPTIONS] ...  (BENCH_MODE closed|open|both, BENCH_PATH ${PATHS.join('|')}, BENCH_TRACING=LABEL,…;`);
  log('  BUILD naive-gate and composed-floor (BENCH_PATH enforce), nginx and undici-dispatch (BENCH_PATH pass), upstream (any path): yardsticks, without @NODE_OPTIONS or tracing;');
  log(`  nginx needs nginx on PATH or in /usr/sbin${wantsNginx && nginxBinary === undefined ? ', and none was found' : ''})`);
  process.exit(2);
}

const builds = createBuilds({ log });
/** BENCH_CPU_PROFILE=DIR: each run's proxy writes DIR/LABEL-MODE/proxy.cpuprofile (the last round's stays). */
const PROFILE_DIR = process.env.BENCH_CPU_PROFILE || undefined;

const { privateKey, publicKey } = generateKeyPairSync('ed25519');
const jwks = JSON.stringify({ keys: [{ ...publicKey.export({ format: 'jwk' }), kid: KID, use: 'sig', alg: 'EdDSA' }] });
let permitSequence = 0;

/** Requests for the measured path: the one request it repeats, or as many as asked, each with its own permit. */
async function mint(count) {
  if (PATH === 'pass') return [PASS_REQUEST];
  if (PATH === 'mcp-list') return [LIST];
  const requests = [];
  for (let i = 0; i < count; i += 1) {
    const id = `c${permitSequence++}`;
    const bodyRoute = PATH === 'enforce-body' ? bodyRouteRequest(id) : undefined;
    const facts = PATH === 'mcp-call'
      ? { action_type: CALL_EVALUATION.action_type, actor_id: ACTOR, ...CALL_EVALUATION.context }
      : (bodyRoute?.facts ?? { action_type: 'demo.echo', actor_id: ACTOR, environment: 'dev', target: { type: 'demo', id } });
    const claims = buildPermitClaims({
      issuer: 'countersign', audience: 'countersign:gate', org: ORG, requestId: `req_${id}`, facts,
      keys: Object.keys(facts), policyVersion: 1, nowMs: Date.now(), lifetimeSeconds: 300,
    });
    const token = await signPermit(claims, { kid: KID, privateKey });
    requests.push(PATH === 'mcp-call' ? callWithPermit(token) : bodyRoute?.request(token) ?? { method: 'POST', path: `/echo/${id}`, headers: { [PERMIT_HEADER]: token, 'x-actor-id': ACTOR } });
  }
  return requests;
}

/**
 * A closed loop of PROCESS_WARMUP seconds on the fresh proxy before its run. A fresh proxy spends
 * its first seconds compiling its hot code: its first second runs several times slower, its CPU
 * per request keeps falling for several more, and at a fixed rate the backlog of that start would
 * reach into the measured window, where it, not the build, would set the p99.
 */
async function warmUp(proxy, expect) {
  const requests = await mint(Math.ceil(PROCESS_WARMUP * CLOSED_MINT_RATE));
  const result = await runGenerator({
    origin: proxy.url, mode: 'closed', connections: CONNECTIONS, warmupMs: 0, windowMs: PROCESS_WARMUP * 1000,
    requests, reuse: REUSED, expect,
  });
  if (result.errors > 0) throw new Error(`the process warm-up failed: ${JSON.stringify(result.errorKinds)}`);
}

/** The entry's server, started afresh: a build of the proxy, or a yardstick. */
async function startGate(entry, mode, context) {
  const cpuProfileDir = PROFILE_DIR && join(PROFILE_DIR, `${entry.label}-${mode}`);
  if (entry.build === 'naive-gate') {
    return startBenchServer('naive', {
      upstream: context.upstream.url, authority: context.authorityUrl, apiKey: 'unused', redisUrl: context.redisUrl,
      issuer: 'countersign', audience: 'countersign:gate', permitHeader: PERMIT_HEADER,
    }, { cpuProfileDir });
  }
  if (entry.build === 'composed-floor') {
    return startBenchServer('composed-floor', {
      upstream: context.upstream.url, authority: context.authorityUrl, apiKey: 'unused', redisUrl: context.redisUrl, permitHeader: PERMIT_HEADER,
    }, { cpuProfileDir });
  }
  if (entry.build === 'undici-dispatch') return startBenchServer('undici-dispatch', { upstream: context.upstream.url }, { cpuProfileDir });
  // The load generator straight at an upstream of its own: what every other entry's p99 adds to.
  if (entry.build === 'upstream') return startBenchServer('upstream', { body: UPSTREAM_BODY }, { cpuProfileDir });
  if (entry.build === 'nginx') {
    const dir = mkdtempSync(join(context.dir, 'nginx-'));
    return startNginx({ binary: nginxBinary, dir, upstreamUrl: context.upstream.url });
  }
  return startCountersignProxy({
    dir: context.dir, redisUrl: context.redisUrl, yaml: context.yaml, cli: entry.cli, nodeOptions: entry.nodeOptions, cpuProfileDir,
    env: TRACED.has(entry.label) ? tracingEnv(context.sink, 'countersign-proxy-bench') : {},
  });
}

/**
 * Empties the throwaway Redis and its append-only file. Every enforced run leaves its consumed
 * permits (expiring 300 s later, in some later run) and its records (in a stream no authority
 * drains) behind, and the file grows with every write until Redis forks to rewrite it: without
 * this, each run would meet a larger store, and the expiries and rewrites of the runs before it.
 */
async function emptyStore(redisUrl) {
  const redis = new Redis(redisUrl, { lazyConnect: true, maxRetriesPerRequest: 1 });
  try {
    await redis.connect();
    await redis.flushall();
    for (;;) {
      try {
        await redis.bgrewriteaof();
        break;
      } catch (error) {
        // A rewrite Redis started on its own (the file grew) refuses a second one until it ends.
        if (!/already in progress/.test(String(error?.message))) throw error;
        await sleep(50);
      }
    }
    for (;;) {
      const persistence = await redis.info('persistence');
      if (/aof_rewrite_in_progress:0/.test(persistence) && /aof_rewrite_scheduled:0/.test(persistence)) break;
      await sleep(50);
    }
  } finally {
    redis.disconnect();
  }
}

/**
 * The organization's replay epoch, as the authority creates it before it signs the first permit:
 * permits issued before the epoch began are refused (REPLAY_STATE_RESET).
 */
async function openEpoch(redisUrl) {
  const store = new RedisStore({ url: redisUrl });
  await store.ensureEpoch(replayEpochKey(ORG));
  await store.close();
}

async function measure(entry, mode, context) {
  const traced = TRACED.has(entry.label);
  if (context.throwawayRedis) await emptyStore(context.redisUrl);
  await openEpoch(context.redisUrl);
  // Permits carry whole seconds: one minted in the epoch's own second would predate it for a build
  // that compares in milliseconds (builds from before whole-second permits), and be refused.
  await sleep(1_100);
  const proxy = await startGate(entry, mode, context);
  const exportsBefore = traced ? await sinkStats(context.sink) : null;
  let measured;
  try {
    if (PROCESS_WARMUP > 0) await warmUp(proxy, context.expect);
    const requests = await mint(Math.ceil((WARMUP + SECONDS) * (mode === 'open' ? RATE : CLOSED_MINT_RATE)) + 100);
    const spec = {
      origin: proxy.url, mode, connections: CONNECTIONS, rate: RATE, warmupMs: WARMUP * 1000, windowMs: SECONDS * 1000,
      requests, reuse: REUSED, expect: context.expect,
    };
    const before = {};
    const after = {};
    const sample = (into) => {
      into.proxy = cpuTimes([proxy.pid]);
      // Redis shares the machine with the proxy: what a build's store commands cost it bounds the
      // closed loop's throughput too (no figure when Redis runs elsewhere).
      into.redis = cpuTimes(context.redisPids);
      into.machine = machineBusySeconds();
      into.at = performance.now();
    };
    const rss = rssSampler(proxy.pid, 100);
    const result = await runGenerator(spec, { onWindowStart: () => sample(before), onWindowEnd: () => sample(after) });
    const memory = rss.stop();
    const perRequestUs = (of) => (1e6 * cpuBetween(before[of], after[of])) / result.requests;
    measured = {
      ...result,
      cpuPerRequestUs: perRequestUs('proxy'),
      redisCpuPerRequestUs: perRequestUs('redis'),
      machineCoresBusy: (after.machine - before.machine) / ((after.at - before.at) / 1000),
      rssMaxMb: memory.max / 2 ** 20,
    };
  } finally {
    await proxy.stop();
  }
  // After the stop, so the last export (at shutdown) is counted.
  if (traced) measured.exported = exportSummary(exportsBefore, await sinkStats(context.sink), proxy.output());
  return measured;
}


async function main() {
  const redis = await startRedis({ log });
  const redisUrl = serverUrl('redis', redis);
  // A Redis of the caller's is not emptied: its runs meet the store the runs before them left.
  const throwawayRedis = !redis.fromEnv;
  if (!throwawayRedis) log('REDIS_URL: the store is not emptied between runs (each run leaves its permits and records behind)');
  const authority = createServer((req, res) => {
    res.setHeader('content-type', 'application/json');
    res.end(req.url?.startsWith('/v1/permit-keys') ? jwks : '{}');
  });
  await new Promise((listening) => authority.listen(0, '127.0.0.1', listening));
  const dir = mkdtempSync(join(tmpdir(), 'countersign-compare-'));
  try {
    const keyFile = join(dir, 'proxy.key');
    writeFileSync(keyFile, 'cs_compare_unused', { mode: 0o600 });
    const upstream = await startBenchServer('upstream', { body: UPSTREAM_BODY });
    const sink = TRACED.size > 0 ? await startBenchServer('otlp-sink', {}) : undefined;
    for (const entry of entries) entry.cli = isYardstick(entry) ? null : builds.cliOf(entry.build);
    const authorityUrl = `http://127.0.0.1:${authority.address().port}`;
    // The MCP route only for the MCP paths, so that builds from before it take the configuration.
    const mcp = PATH.startsWith('mcp-');
    const yaml = proxyYaml({ upstream: upstream.url, authority: authorityUrl, keyFile, organization: ORG, mcpInlineKeyFile: mcp ? keyFile : undefined, bodyRoute: PATH === 'enforce-body' });
    const expect = { status: 200, body: mcp ? await answerOf(upstream, PATH === 'mcp-call' ? CALL : LIST) : UPSTREAM_BODY };
    const context = { dir, redisUrl, redisPids: await localStorePids(redisUrl), throwawayRedis, sink, upstream, authorityUrl, yaml, expect };
    if (sink) log(`tracing on for ${[...TRACED].join(', ')}: OTLP/HTTP (protobuf) to the sink at ${sink.url}, the SDK's default batching; off for the others`);

    for (const mode of MODES) {
      log(`\n== ${{ enforce: 'enforced route', 'enforce-body': 'enforced route bound to its JSON body', pass: 'pass-through', 'mcp-call': 'MCP tools/call with a permit', 'mcp-list': 'MCP tools/list' }[PATH]}, ${mode === 'closed' ? `closed loop, ${CONNECTIONS} connections` : `open loop, ${RATE}/s`}; ${ROUNDS} rounds of ${WARMUP} s + ${SECONDS} s, each on a fresh proxy after ${PROCESS_WARMUP} s of process warm-up ==`);
      const results = new Map(entries.map((entry) => [entry.label, []]));
      for (let round = 1; round <= ROUNDS; round += 1) {
        for (const entry of roundOrder(entries, round)) {
          const result = await measure(entry, mode, context);
          results.get(entry.label).push(result);
          const cut = result.exhausted ? ` (ran out of permits after ${fmt(result.windowSeconds)} s)` : '';
          const kinds = result.errorKinds.map(({ kind, count }) => `${count}× ${kind}`).join(', ');
          const exported = result.exported ? `; tracing on: ${result.exported}` : '';
          log(`round ${round} ${entry.label}: ${fmt(result.perSecond, 0)}/s, p99 ${fmt(result.p99, 2)} ms, ${fmt(result.cpuPerRequestUs, 0)} µs CPU/request (Redis ${fmt(result.redisCpuPerRequestUs, 0)}), machine ${fmt(result.machineCoresBusy, 2)} cores busy, RSS max ${fmt(result.rssMaxMb)} MB, ${result.errors} errors${kinds ? ` (${kinds})` : ''}${cut}${exported}`);
        }
      }
      // Closed loop compares throughput (higher is better); open loop, where every build runs at
      // the same rate, compares p99 (lower is better).
      const metric = mode === 'closed' ? { name: 'requests/s', of: (r) => r.perSecond, better: 1 } : { name: 'p99', of: (r) => r.p99, better: -1 };
      const first = results.get(entries[0].label);
      // Open loop with an `upstream` entry: each round's p99 less the direct upstream's in that
      // round (the added p99 of the proxy bench's targets), and its difference from and ratio to the
      // first entry's.
      const direct = mode === 'open' ? entries.find((entry) => entry.build === 'upstream') : undefined;
      const addedOf = (own) => own.map((result, i) => result.p99 - results.get(direct.label)[i].p99);
      const rows = entries.map(({ label }) => {
        const own = results.get(label);
        const ratiosOf = (of) => own.map((result, i) => of(result) / of(first[i]));
        const ratios = ratiosOf(metric.of);
        const ahead = ratios.filter((ratio) => Math.sign(ratio - 1) === metric.better).length;
        const row = [label, fmt(median(own.map((r) => r.perSecond)), 0), fmt(median(own.map((r) => r.p99)), 2), fmt(median(own.map((r) => r.cpuPerRequestUs)), 0),
          fmt(median(own.map((r) => r.redisCpuPerRequestUs)), 0), fmt(median(own.map((r) => r.machineCoresBusy)), 2), fmt(median(own.map((r) => r.rssMaxMb))), fmt(median(ratios), 2), fmt(median(ratiosOf((r) => r.cpuPerRequestUs)), 2),
          label === entries[0].label ? '-' : `${ahead} of ${ratios.length}`];
        if (!direct) return row;
        const added = addedOf(own);
        const firstAdded = addedOf(first);
        const isReference = label === direct.label || label === entries[0].label;
        const versusFirst = (combine) => (isReference ? '-' : fmt(median(added.map((value, i) => combine(value, firstAdded[i]))), 2));
        // A ratio only while the first entry adds something in every round (nginx's may not).
        const ratio = firstAdded.some((value) => value <= 0) ? '-' : versusFirst((own, theirs) => own / theirs);
        return [...row, fmt(median(added), 2), versusFirst((own, theirs) => own - theirs), ratio];
      });
      const versus = `÷ ${entries[0].label}'s (median of rounds)`;
      const header = ['build', 'median /s', 'p99 ms', 'µs CPU/req', 'Redis µs CPU/req', 'machine cores busy', 'RSS MB', `${metric.name} ${versus}`, `µs CPU/req ${versus}`, `rounds ahead (${metric.name})`];
      if (direct) header.push(`added p99 ms (over ${direct.label})`, `added p99 − ${entries[0].label}'s (median of rounds)`, `added p99 ${versus}`);
      log(`\n${formatTable(header, rows)}`);
    }
  } finally {
    authority.close();
    await stopAll();
    await stopServers();
    builds.cleanUp();
    rmSync(dir, { recursive: true, force: true });
  }
}

main().catch((error) => {
  log(`proxy-compare failed: ${error.stack ?? error}`);
  process.exitCode = 1;
});
