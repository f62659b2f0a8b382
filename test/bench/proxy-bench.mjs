/**
 * The proxy benchmark, in one run on loopback: what the Countersign proxy costs in front of an
 * upstream, against the upstream alone, nginx, two bare forwarding engines and a naive gate. Every
 * server and the load generator run as separate processes (proxy-processes.mjs), so none shares an
 * event loop with another; the load generator (load-generator.mjs) sends pre-built requests.
 *
 * Rows, each closed loop (C connections, throughput) and open loop (R/s, latency from the
 * scheduled send time); each run is a warm-up (discarded) then a measured window, and each server
 * gets a process warm-up (discarded) before its first run:
 *   direct upstream        a tiny node:http server answering 200 with a small body
 *   nginx                  reverse proxy, one worker, keep-alive upstream (skipped when not installed)
 *   countersign pass       the Countersign proxy on an unmatched path (`unmatched: pass`)
 *   http-proxy-3, undici   bare pass-through forwarders, the engine comparison: http-proxy-3, and
 *                          undici with `request` + stream.pipeline and on its lowest level
 *                          (`dispatch`, what proxy/forward.ts does)
 *   countersign enforce    the proxy's enforced route, a fresh permit per request
 *   naive gate             jose jwtVerify + Redis SET NX + the classic http-proxy, fresh permits too
 *   the floor              an Ed25519 verify and a Redis round trip, each alone (floor-bench.mjs),
 *                          beside the undici dispatch row: what an enforced request cannot avoid
 *   mcp tools/call, tools/list
 *                          an MCP tools/call through the gate with the caller's permit, and tools/list
 *                          (which passes), each against the same request straight to the upstream's
 *                          MCP server (mcp-bench.mjs); run alone with BENCH_ONLY=mcp (`only: 'mcp'`)
 *   durability none, aof (disk), replica
 *                          the enforced route again, once per store durability mode, each with its
 *                          own proxy and redis-server process(es): none on a Redis without
 *                          persistence; aof with appendfsync always, its AOF on disk (os.tmpdir());
 *                          replica on a primary with one replica attached. Printed after the other
 *                          rows with each mode's cost against none (durability-bench.mjs); run
 *                          alone with BENCH_ONLY=durability (`only: 'durability'`)
 *
 * Permits are minted beforehand with POST /v1/evaluate, one per request, each batch just before
 * the runs that spend it (they live at most 300 s). A gated closed loop needs as many permits as
 * it will send, which is not known in advance: its warm-up (fed from a generous batch) is also the
 * probe of its rate, and the measured run then gets that rate's worth of permits, plus a margin.
 *
 * It measures; it is not a test: missed targets print MISS and still resolve `{ ok: true }`. `ok`
 * is false only when a request failed, or what reached the upstream does not match the answers.
 *
 * @example
 *   const { ok } = await runProxyBench({ databaseUrl, redisUrl, seconds: 5, warmupSeconds: 1, processWarmupSeconds: 10,
 *     connections: 32, rate: 1000, soakSeconds: 0, soakRate: 500, log: console.log, signal });
 *   await runProxyBench({ ...sameOptions, only: 'durability' }); // the durability rows alone
 *   await runProxyBench({ ...sameOptions, only: 'mcp' }); // the MCP rows alone
 */
import { randomBytes } from 'node:crypto';
import { existsSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { availableParallelism, tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { performance } from 'node:perf_hooks';
import { request } from 'undici';
import { cpuBetween, cpuSeconds, cpuTimes, rssBytes, rssSampler } from './proc-stats.mjs';
import {
  CLI, findNginx, nginxVersion, runGenerator, sleep, startAuthority, startBenchServer, startCountersignProxy, startNginx, stopAll,
} from './proxy-processes.mjs';
import { authorityYaml, createBenchDatabase, describeExit, machineTimes } from './bench-common.mjs';
import { report } from './proxy-report.mjs';
import { reportDurability, runDurabilityRows, startDurabilitySetups } from './durability-bench.mjs';
import { localStorePids, mintPermitRequests, PASS_REQUEST, PERMIT_HEADER, proxyYaml, setUpOrganization } from './proxy-setup.mjs';
import { runSoak } from './proxy-soak.mjs';
import { mcpEvaluateRequest, mintMcpCalls, reportMcp, runMcpRows } from './mcp-bench.mjs';
import { measureFloorParts } from './floor-bench.mjs';

const UPSTREAM_BODY = '{"ok":true,"service":"bench-upstream"}';
/** The most permits minted for one run (about 30 s of the authority's time on a 2-core machine). */
const MAX_BATCH = 40_000;
/**
 * Margin on the probed rate when sizing a window's batch: a warmer process runs faster than its
 * probe did, and running short ends the window early (it is then reported as that long).
 */
const BATCH_MARGIN = 1.6;
/** The measured run after a probe re-warms its fresh connections for this long first. */
const REWARM_MS = 250;
/**
 * Before a run, wait (up to maxMs) until the authority and the server about to be measured are
 * idle: after gated runs the authority drains the proxy's verification records into the audit log
 * for a few seconds. Only these processes are watched: the machine may have other work of its own.
 */
const SETTLE = { idleBelow: 0.1, sampleMs: 300, maxMs: 15_000 };

const busyBetween = (a, b) => (b.busy - a.busy) / Math.max(1, b.total - a.total);

async function settle(pids) {
  const deadline = Date.now() + SETTLE.maxMs;
  while (Date.now() < deadline) {
    const before = pids.map(cpuSeconds);
    await sleep(SETTLE.sampleMs);
    const busiest = Math.max(...pids.map((pid, i) => (cpuSeconds(pid) - before[i]) / (SETTLE.sampleMs / 1000)));
    if (!(busiest >= SETTLE.idleBelow)) return;
  }
}

/**
 * The measuring harness: runs the load generator against one server and adds the CPU each process
 * spent in the generator's measured window (server, upstream, authority: % of one core; machine:
 * % of all cores).
 */
function createMeasure({ upstream, authority, storePids, options }) {
  const snapshot = (server) => ({
    at: performance.now(),
    server: cpuTimes([server.pid]),
    upstream: cpuTimes([upstream.pid]),
    authority: cpuTimes([authority.pid]),
    stores: cpuTimes(storePids),
    machine: machineTimes(),
  });
  return async function measure({
    name, server, mode, requests, reuse, warmupMs, windowMs, connections = options.connections, rate = options.rate, settle: calm = true, pauseAuthority = false,
    expect = { status: 200, body: UPSTREAM_BODY },
  }) {
    if (options.signal.aborted) throw new Error('interrupted');
    // Postgres and Redis too: minting thousands of permits leaves Postgres checkpointing for a while.
    if (calm) await settle([authority.pid, server.pid, ...storePids]);
    let start;
    let end;
    // The authority is not contacted during a gated run (the gates hold its keys), but it drains
    // their verification records into the audit log as they come, and that work (the authority and
    // Postgres) would share these 2 cores with the gate being measured. In production it runs
    // elsewhere. So it is paused for the run and catches up afterwards (the next settle waits for it).
    if (pauseAuthority) process.kill(authority.pid, 'SIGSTOP');
    let result;
    try {
      result = await runGenerator(
        { origin: server.url, mode, connections, rate, warmupMs, windowMs, requests, reuse, expect },
        { onWindowStart: () => (start = snapshot(server)), onWindowEnd: () => (end = snapshot(server)) },
      );
    } finally {
      if (pauseAuthority) process.kill(authority.pid, 'SIGCONT');
    }
    if (options.signal.aborted) throw new Error(`interrupted during "${name}"`);
    for (const proc of [server, upstream, authority]) {
      if (proc.exit) throw new Error(`${proc.name} exited (${describeExit(proc.exit)}) during "${name}":\n${proc.output()}`);
    }
    const seconds = (end.at - start.at) / 1000;
    const core = (key) => (cpuBetween(start[key], end[key]) / seconds) * 100;
    const cpu = {
      server: core('server'), upstream: core('upstream'), authority: core('authority'), stores: core('stores'), generator: result.cpuPercent,
      machine: busyBetween(start.machine, end.machine) * 100,
    };
    // What the machine spent beyond the processes above, in % of one core: the kernel's share of
    // loopback traffic, and anything else running on the machine, which makes every figure lower.
    const known = (server === upstream ? 0 : cpu.server) + cpu.upstream + cpu.authority + (Number.isFinite(cpu.stores) ? cpu.stores : 0) + cpu.generator;
    cpu.other = Math.max(0, (cpu.machine / 100) * availableParallelism() * 100 - known);
    return { name, load: mode === 'open' ? `${rate}/s` : `${connections} conn`, ...result, cpu };
  };
}

/**
 * A gated closed loop. Its warm-up doubles as the probe of its rate: fed from a batch sized by an
 * upper bound, it runs cold for its first half and is timed over its second (a cold start would
 * understate the rate by half), and the measured run then gets that rate's worth of fresh permits.
 * Every gate runs it first, before anything else gated, so the probe is also the gate's process
 * warm-up and lasts as long (at least 1 s).
 */
async function gatedClosedLoop({ measure, mint, name, server, upperBound, options, log }) {
  const probeMs = Math.max(1000, options.warmupSeconds * 1000, options.processWarmupSeconds * 1000);
  // The upper bound is a pass-through rate, well above a gated one: no margin on top of it.
  const probeBatch = await mint(`${name}-probe`, Math.min(MAX_BATCH, Math.ceil(upperBound * (probeMs / 1000)) + options.connections));
  const probe = await measure({ name: `${name} (warm-up)`, server, mode: 'closed', requests: probeBatch, reuse: false, warmupMs: probeMs / 2, windowMs: probeMs / 2, pauseAuthority: true });
  const windowMs = options.seconds * 1000;
  // A probe that ran out before its timed half measured nothing: fall back on the upper bound.
  const rate = probe.perSecond > 0 ? probe.perSecond : upperBound;
  const wanted = Math.ceil(rate * ((windowMs + REWARM_MS) / 1000) * BATCH_MARGIN) + options.connections;
  const batch = await mint(name, Math.min(MAX_BATCH, wanted));
  const result = await measure({ name, server, mode: 'closed', requests: batch, reuse: false, warmupMs: REWARM_MS, windowMs, pauseAuthority: true });
  if (result.exhausted) log(`  note: "${name}" ran out of permits after ${result.windowSeconds.toFixed(1)} s of its window (the window is that long)`);
  return { result, probe };
}

async function runScenarios({ servers, measure, mint, options, log }) {
  const { proxy, naive } = servers;
  const warmupMs = options.warmupSeconds * 1000;
  const windowMs = options.seconds * 1000;
  const passThrough = [
    ['direct upstream', servers.upstream],
    ['nginx', servers.nginx],
    ['countersign pass-through', proxy],
    ['http-proxy-3 pass-through', servers.httpProxy3],
    ['undici request pass-through', servers.undici],
    ['undici dispatch pass-through', servers.undiciDispatch],
  ].filter(([, server]) => server);
  const rows = { closed: {}, open: {} };
  const extra = { gatedOk: 0, rss: null, probes: [] };
  if (options.processWarmupSeconds > 0) {
    for (const [name, server] of passThrough) {
      log(`running: ${name}, process warm-up (${options.processWarmupSeconds} s, closed loop)`);
      extra.probes.push(await measure({
        name: `${name} (process warm-up)`, server, mode: 'closed', requests: [PASS_REQUEST], reuse: true, warmupMs: options.processWarmupSeconds * 1000, windowMs: REWARM_MS,
      }));
    }
  }
  for (const mode of ['closed', 'open']) {
    for (const [name, server] of passThrough) {
      log(`running: ${name}, ${mode} loop`);
      rows[mode][name] = await measure({ name, server, mode, requests: [PASS_REQUEST], reuse: true, warmupMs, windowMs });
    }
  }

  // The proxy's memory from its first gated request to its last.
  const rss = rssSampler(proxy.pid);
  try {
    const gated = { measure, mint, options, log };
    log('running: countersign enforce, closed loop (process warm-up and probe, then fresh permits for the window)');
    const enforce = await gatedClosedLoop({ ...gated, name: 'countersign enforce', server: proxy, upperBound: rows.closed['countersign pass-through'].perSecond });
    rows.closed['countersign enforce'] = enforce.result;
    log('running: naive gate, closed loop (process warm-up and probe, then fresh permits for the window)');
    const naiveRun = await gatedClosedLoop({ ...gated, name: 'naive gate', server: naive, upperBound: rows.closed['http-proxy-3 pass-through'].perSecond });
    rows.closed['naive gate'] = naiveRun.result;
    log('running: the floor\'s parts composed, closed loop (process warm-up and probe, then fresh permits for the window)');
    const composedRun = await gatedClosedLoop({ ...gated, name: 'composed floor', server: servers.composedFloor, upperBound: rows.closed['undici dispatch pass-through'].perSecond });
    rows.closed['composed floor'] = composedRun.result;
    extra.gatedOk += enforce.probe.ok + naiveRun.probe.ok + composedRun.probe.ok + composedRun.result.ok;
    extra.probes.push(enforce.probe, naiveRun.probe, composedRun.probe);

    const openCount = Math.ceil(((warmupMs + windowMs) / 1000) * options.rate) + 10;
    const [enforceOpen, naiveOpen] = [await mint('countersign enforce-open', openCount), await mint('naive gate-open', openCount)];
    for (const [name, server, requests] of [['countersign enforce', proxy, enforceOpen], ['naive gate', naive, naiveOpen]]) {
      log(`running: ${name}, open loop`);
      rows.open[name] = await measure({ name, server, mode: 'open', requests, reuse: false, warmupMs, windowMs, pauseAuthority: true });
    }
  } finally {
    extra.rss = rss.stop();
  }
  for (const name of ['countersign enforce', 'naive gate']) extra.gatedOk += rows.closed[name].ok + rows.open[name].ok;
  return { rows, extra };
}

async function upstreamStats(upstream) {
  const response = await request(`${upstream.url}/__bench/stats`);
  return response.body.json();
}

/**
 * Runs the whole benchmark on `databaseUrl` (a server where a database may be created) and
 * `redisUrl`; resolves `{ ok }`. Throws when it could not run at all. `only: 'durability'` runs the
 * durability rows alone, with the authority and the upstream they need; `only: 'mcp'` the MCP rows
 * alone, with the authority, the upstream and the proxy.
 */
export async function runProxyBench(options) {
  const { log, signal, redisUrl } = options;
  const durabilityOnly = options.only === 'durability';
  const mcpOnly = options.only === 'mcp';
  if (!existsSync(CLI)) throw new Error('dist/ is missing: run `npm run build` (npm run bench does it first)');
  const database = await createBenchDatabase(options.databaseUrl, 'countersign_proxybench');
  const dir = await mkdtemp(join(tmpdir(), 'countersign-proxybench-'));
  let durabilitySetups;
  try {
    // Given rather than generated, so the first start writes no key file; never printed.
    const bootstrapKey = `ask_live_${randomBytes(24).toString('hex')}`;
    const authority = await startAuthority({
      databaseUrl: database.url, redisUrl, dir, bootstrapKey, secretKey: randomBytes(32).toString('base64'), configYaml: authorityYaml('test/bench/proxy-bench.mjs'),
    });
    const keyFile = join(dir, 'proxy.key');
    const mcpInlineKeyFile = join(dir, 'mcp-inline.key');
    const org = await setUpOrganization(authority.url, bootstrapKey, keyFile, mcpInlineKeyFile);
    const upstream = await startBenchServer('upstream', { body: UPSTREAM_BODY });
    const servers = durabilityOnly || mcpOnly ? null : await startServers({ options, dir, redisUrl, upstream, authority, keyFile, mcpInlineKeyFile, org, log });
    const proxy = servers?.proxy ?? (mcpOnly ? await startBenchProxy({ options, dir, redisUrl, upstream, authority, keyFile, mcpInlineKeyFile, org }) : null);
    // Every mode's Redis and proxy now, so a mode that cannot run fails before anything is measured.
    durabilitySetups = mcpOnly ? null : await startDurabilitySetups({ upstream, authority, keyFile, orgId: org.id, log });
    const idleRss = servers && rssBytes(servers.proxy.pid);
    log(`machine: ${availableParallelism()} cores, node ${process.version}; ` +
      `${servers ? `${servers.nginxNote}; ` : ''}every server, the authority and the load generator are separate processes; ` +
      `${options.connections} connections closed loop, ${options.rate}/s open loop; ${options.processWarmupSeconds} s process warm-up per server, ` +
      `then ${options.warmupSeconds} s warm-up + ${options.seconds} s per run`);

    const measureWith = (storePids) => createMeasure({ upstream, authority, storePids, options });
    const measure = measureWith(await localStorePids(redisUrl, options.databaseUrl));
    const mint = async (tag, count) => {
      const started = performance.now();
      const requests = await mintPermitRequests(authority.url, bootstrapKey, tag.replaceAll(' ', '-'), count, signal);
      log(`  minted ${count} permits for "${tag}" in ${((performance.now() - started) / 1000).toFixed(1)} s (POST /v1/evaluate)`);
      return requests;
    };
    const { rows, extra } = servers ? await runScenarios({ servers, measure, mint, options, log }) : { rows: { closed: {}, open: {} }, extra: { gatedOk: 0, probes: [] } };
    const mintCalls = async (tag, count) => {
      const started = performance.now();
      const requests = await mintMcpCalls(authority.url, bootstrapKey, count, signal);
      log(`  minted ${count} permits for "${tag}" in ${((performance.now() - started) / 1000).toFixed(1)} s (POST /v1/evaluate)`);
      return requests;
    };
    const evaluation = { server: authority, request: mcpEvaluateRequest(bootstrapKey) };
    const mcp = proxy ? await runMcpRows({ proxy, upstream, evaluation, measure, mint: mintCalls, gatedClosedLoop, options, log }) : null;
    const durability = durabilitySetups
      ? await runDurabilityRows({
          setups: durabilitySetups.setups, measureWith, gatedClosedLoop, mint, pgPids: await localStorePids(undefined, options.databaseUrl),
          passThroughRate: rows.closed['countersign pass-through']?.perSecond, options, log,
        })
      : { gatedOk: 0, errors: 0 };
    await durabilitySetups?.stop();
    extra.gatedOk += durability.gatedOk;
    const soak = servers && options.soakSeconds > 0 ? await runSoak({ proxy: servers.proxy, measure, mint, options, log }) : null;
    if (soak) extra.gatedOk += soak.ok;
    let floor = null;
    if (servers) {
      log('running: the floor\'s parts (Ed25519 verify, Redis round trip), each alone');
      await settle([authority.pid, ...(await localStorePids(redisUrl, options.databaseUrl))]);
      floor = await measureFloorParts({ redisUrl, seconds: options.seconds, connections: options.connections });
    }

    const stats = await upstreamStats(upstream);
    const problems = [];
    if (stats.echo !== extra.gatedOk) problems.push(`${stats.echo} gated requests reached the upstream, ${extra.gatedOk} were answered 200`);
    if (stats.echoDistinct !== stats.echo) problems.push(`${stats.echo - stats.echoDistinct} gated requests reached the upstream with a permit already used`);
    if (mcp && stats.mcpPermitted !== mcp.gatedOk) problems.push(`${stats.mcpPermitted} gated MCP tool calls reached the upstream, ${mcp.gatedOk} were answered with its result`);
    if (stats.mcpPermittedDistinct !== stats.mcpPermitted) problems.push(`${stats.mcpPermitted - stats.mcpPermittedDistinct} gated MCP tool calls reached the upstream with a permit already used`);
    const mcpRows = mcp ? [...Object.values(mcp.rows.closed), ...Object.values(mcp.rows.open), ...mcp.probes] : [];
    const errors = [...Object.values(rows.closed), ...Object.values(rows.open), ...extra.probes, ...mcpRows].reduce((sum, row) => sum + row.errors, 0) + (soak?.errors ?? 0) + durability.errors;

    const proxyExit = proxy ? await proxy.stop() : { code: 0 };
    if (servers) report(log, { rows, rss: { idle: idleRss, ...extra.rss }, soak, nginx: Boolean(servers.nginx), rate: options.rate, probes: extra.probes, floor });
    if (mcp) reportMcp(log, mcp, { http: servers ? rows : null, rate: options.rate });
    const enforce = { closed: rows.closed['countersign enforce'], open: rows.open['countersign enforce'] };
    if (!mcpOnly) reportDurability(log, durability, { rate: options.rate, enforce });
    log('');
    if (problems.length === 0) log(`upstream: ${stats.echo} gated requests${mcp ? ` and ${stats.mcpPermitted} gated MCP tool calls` : ''} arrived, each permit once, as many as were answered 200`);
    for (const problem of problems) log(`upstream check failed: ${problem}`);
    if (proxyExit.code !== 0) log(`the proxy did not exit cleanly on SIGTERM (${describeExit(proxyExit)}):\n${proxy.output()}`);
    if (options.cpuProfileDir && servers) log(`proxy CPU profile (proxy.cpuprofile, open in Chrome DevTools): ${resolve(options.cpuProfileDir)}`);
    return { ok: errors === 0 && problems.length === 0 };
  } finally {
    await durabilitySetups?.stop().catch((error) => log(`could not stop the durability rows' servers: ${error.message}`));
    await stopAll();
    await database.drop().catch((error) => log(`could not drop the bench database: ${error.message}`));
    await rm(dir, { recursive: true, force: true });
  }
}

/** The servers of the rows before the durability rows: nginx when it starts, the proxy, the engines, the naive gate. */
async function startServers({ options, dir, redisUrl, upstream, authority, keyFile, mcpInlineKeyFile, org, log }) {
  const nginxBinary = findNginx();
  // nginx is the yardstick, not the subject: one that will not start is reported and skipped.
  const nginx = nginxBinary
    ? await startNginx({ binary: nginxBinary, dir, upstreamUrl: upstream.url }).catch((error) => {
        log(`nginx: ${nginxBinary} did not start, skipped: ${error.message}`);
        return null;
      })
    : null;
  const proxy = await startBenchProxy({ options, dir, redisUrl, upstream, authority, keyFile, mcpInlineKeyFile, org });
  return {
    upstream, nginx, proxy, authority,
    nginxNote: nginx ? `nginx ${nginxVersion(nginxBinary)}` : nginxBinary ? 'nginx skipped' : 'nginx: not installed, skipped',
    httpProxy3: await startBenchServer('http-proxy-3', { upstream: upstream.url }),
    undici: await startBenchServer('undici', { upstream: upstream.url }),
    undiciDispatch: await startBenchServer('undici-dispatch', { upstream: upstream.url }),
    naive: await startBenchServer('naive', {
      upstream: upstream.url, authority: authority.url, apiKey: org.proxyKey, redisUrl, issuer: 'countersign', audience: 'countersign:gate', permitHeader: PERMIT_HEADER,
    }),
    composedFloor: await startBenchServer('composed-floor', {
      upstream: upstream.url, authority: authority.url, apiKey: org.proxyKey, redisUrl, permitHeader: PERMIT_HEADER,
    }),
  };
}

/** The proxy of the rows: the enforced route, pass-through, and the MCP route. */
function startBenchProxy({ options, dir, redisUrl, upstream, authority, keyFile, mcpInlineKeyFile, org }) {
  return startCountersignProxy({
    dir, redisUrl, cpuProfileDir: options.cpuProfileDir,
    yaml: proxyYaml({ upstream: upstream.url, authority: authority.url, keyFile, organization: org.id, mcpInlineKeyFile }),
  });
}
