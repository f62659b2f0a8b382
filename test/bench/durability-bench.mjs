/**
 * The durability modes' cost (docs/replay-store.md), measured in the proxy benchmark's run after
 * its enforce rows: the Countersign proxy's enforced route (`POST /echo/:id`, a fresh permit per
 * request) once per `store.durability`, each mode on Redis servers of its own, set up as it needs:
 *   none      a Redis without persistence; the proxy with COUNTERSIGN_STORE_DURABILITY=none and
 *             COUNTERSIGN_ACCEPT_WEAKER_DURABILITY=1
 *   aof       a Redis with appendonly yes + appendfsync always, its file on disk (os.tmpdir(), not
 *             /dev/shm like npm test's): the realistic cost of an fsync per write batch (the proxy
 *             sends WAITAOF on Redis 7.2+, else relies on appendfsync always)
 *   replica   a primary without persistence and one replica (--replicaof); WAIT 1 after each write;
 *             then again with two replicas (WAIT 2: the proxy waits for every replica that could be
 *             promoted)
 * Each mode has its own proxy process (the enforce row's configuration, the mode from the
 * environment). aof and replica proxies refuse to start when their Redis cannot keep the mode, so
 * the replica is connected and in sync first. Every server runs on a free loopback port, in a temp
 * folder, and is stopped at the end.
 *
 * The authority creates an organization's replay epoch only in its own Redis, and a proxy refuses
 * (REPLAY_STATE_RESET) a permit issued before the epoch of the Redis it consumes in; so each mode's
 * Redis gets its epoch (RedisStore.ensureEpoch from dist/) before any permit for it is minted.
 *
 * Each mode runs closed loop (throughput, the proxy's CPU per request) and open loop at the bench's
 * rate (p99); the table compares each with `none` of the same run.
 *
 * @example
 *   const { setups, stop } = await startDurabilitySetups({ upstream, authority, keyFile, orgId, log });
 *   const durability = await runDurabilityRows({ setups, measureWith, gatedClosedLoop, mint, pgPids, passThroughRate, options, log });
 *   await stop();
 *   reportDurability(log, durability, { rate: 1000, enforce });
 */
import { spawn } from 'node:child_process';
import { accessSync, constants } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { delimiter, dirname, join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { Redis } from 'ioredis';
import { freePort } from '../support/servers.mjs';
import { describeExit, fmt, formatTable, percent, READY_TIMEOUT_MS } from './bench-common.mjs';
import { CLI, sleep, startCountersignProxy, track } from './proxy-processes.mjs';
import { perRequest, table } from './proxy-report.mjs';
import { PASS_REQUEST, proxyYaml } from './proxy-setup.mjs';

/** The modes in the order they run; `none` first: it is what the others are compared with. */
const MODES = [
  { mode: 'none', label: 'none', env: { COUNTERSIGN_STORE_DURABILITY: 'none', COUNTERSIGN_ACCEPT_WEAKER_DURABILITY: '1' } },
  { mode: 'aof', label: 'aof (disk)', env: { COUNTERSIGN_STORE_DURABILITY: 'aof' } },
  { mode: 'replica', label: 'replica', replicas: 1, env: { COUNTERSIGN_STORE_DURABILITY: 'replica' } },
  // WAIT waits for every replica that could be promoted: the cost with a second one. (Labels name
  // permits' target ids and paths: ASCII only.)
  { mode: 'replica', label: 'replica 2', replicas: 2, env: { COUNTERSIGN_STORE_DURABILITY: 'replica' } },
];

/** Settings every Redis here shares: loopback, no RDB snapshots, no delay before a replica's sync. */
const BASE_ARGS = ['--bind', '127.0.0.1', '--save', '', '--daemonize', 'no', '--repl-diskless-sync-delay', '0'];

const distModule = (path) => import(pathToFileURL(join(dirname(CLI), '..', path)).href);

function findRedisServer() {
  const dirs = [...(process.env.PATH ?? '').split(delimiter).filter(Boolean), '/usr/bin', '/usr/sbin', '/usr/local/bin'];
  for (const dir of dirs) {
    const candidate = join(dir, 'redis-server');
    try {
      accessSync(candidate, constants.X_OK);
      return candidate;
    } catch {
      // not here
    }
  }
  throw new Error('the durability rows need redis-server (on PATH or in /usr/bin)');
}

/** One INFO section as key → value. */
async function info(url, section) {
  const client = new Redis(url, { lazyConnect: true, maxRetriesPerRequest: 0, connectTimeout: 2_000, commandTimeout: 2_000, retryStrategy: () => null });
  client.on('error', () => undefined);
  try {
    await client.connect();
    const text = await client.info(section);
    return Object.fromEntries(text.split('\r\n').filter((line) => line.includes(':')).map((line) => [line.slice(0, line.indexOf(':')), line.slice(line.indexOf(':') + 1)]));
  } finally {
    client.disconnect();
  }
}

/** Polls `probe` until it resolves true; fails early, with the servers' output, when one exits. */
async function waitFor(what, procs, probe) {
  const deadline = Date.now() + READY_TIMEOUT_MS;
  while (Date.now() < deadline) {
    const dead = procs.find((proc) => proc.exit);
    if (dead) throw new Error(`${dead.name} exited while waiting for ${what} (${describeExit(dead.exit)}):\n${dead.output()}`);
    if (await probe().catch(() => false)) return;
    await sleep(100);
  }
  throw new Error(`${what}: not reached within ${READY_TIMEOUT_MS / 1000} s:\n${procs.map((proc) => proc.output()).join('\n')}`);
}

/** A redis-server child in a temp folder of its own (under os.tmpdir(), a disk), on a free port. */
async function startRedisServer(binary, name, args, dirs) {
  const dir = await mkdtemp(join(tmpdir(), 'countersign-durability-redis-'));
  dirs.push(dir);
  const port = await freePort();
  const child = spawn(binary, ['--port', String(port), '--dir', dir, ...BASE_ARGS, ...args], { cwd: dir, stdio: ['ignore', 'pipe', 'pipe'] });
  const proc = track(name, child);
  child.stdout.on('data', proc.keep);
  proc.url = `redis://127.0.0.1:${port}`;
  proc.port = port;
  proc.dir = dir;
  await waitFor(`${name} to answer`, [proc], async () => (await info(proc.url, 'server')).redis_version !== undefined);
  return proc;
}

/** The Redis servers of one mode (`replicas`: how many for replica); resolves { url, procs, detail }. */
async function startStore(binary, { mode, replicas }, dirs) {
  if (mode === 'none') {
    const redis = await startRedisServer(binary, 'the Redis of durability none', ['--appendonly', 'no'], dirs);
    return { url: redis.url, procs: [redis], detail: 'no persistence' };
  }
  if (mode === 'aof') {
    const redis = await startRedisServer(binary, 'the Redis of durability aof', ['--appendonly', 'yes', '--appendfsync', 'always'], dirs);
    return { url: redis.url, procs: [redis], detail: `appendfsync always, AOF on disk (${tmpdir()})` };
  }
  const primary = await startRedisServer(binary, `the primary of durability replica ×${replicas}`, ['--appendonly', 'no'], dirs);
  const followers = [];
  for (let n = 1; n <= replicas; n++) {
    followers.push(await startRedisServer(binary, `replica ${n} of durability replica ×${replicas}`, ['--appendonly', 'no', '--replicaof', '127.0.0.1', String(primary.port)], dirs));
  }
  // In sync: every replica's link is up and the primary counts each online (what WAIT n needs).
  await waitFor('the replicas to be in sync', [primary, ...followers], async () => {
    const ofPrimary = await info(primary.url, 'replication');
    const online = followers.map((_, n) => /state=online/.test(ofPrimary[`slave${n}`] ?? ''));
    const links = await Promise.all(followers.map(async (follower) => (await info(follower.url, 'replication')).master_link_status === 'up'));
    return Number(ofPrimary.connected_slaves) >= replicas && online.every(Boolean) && links.every(Boolean);
  });
  return { url: primary.url, procs: [primary, ...followers], detail: `primary without persistence, ${replicas} replica${replicas === 1 ? '' : 's'} in sync` };
}

/**
 * Starts every mode's Redis and proxy (so a mode that cannot run fails before anything is
 * measured), the proxies in front of `upstream` with the authority's keys. Resolves the setups and
 * `stop()`, which stops them all and removes their folders.
 */
export async function startDurabilitySetups({ upstream, authority, keyFile, orgId, log }) {
  const binary = findRedisServer();
  const { RedisStore } = await distModule('shared/store/redis.js');
  const { replayEpochKey } = await distModule('shared/permits/store-keys.js');
  const dirs = [];
  const setups = [];
  let stopped;
  // Once, however often it is called (after the rows, and again by the bench's cleanup).
  const stop = () => (stopped ??= stopEverything());
  const stopEverything = async () => {
    // Proxies first: a proxy whose Redis went away first would log errors while it drains.
    const exits = await Promise.all(setups.map(async (setup) => ({ setup, exit: setup.proxy ? await setup.proxy.stop() : null })));
    for (const { setup, exit } of exits) {
      if (exit && exit.code !== 0) log(`the ${setup.label} proxy did not exit cleanly on SIGTERM (${describeExit(exit)}):\n${setup.proxy.output()}`);
    }
    await Promise.all(setups.flatMap((setup) => setup.store?.procs ?? []).map((proc) => proc.stop()));
    await Promise.all(dirs.map((dir) => rm(dir, { recursive: true, force: true })));
  };
  try {
    for (const { mode, label, replicas, env } of MODES) {
      const setup = { mode, label };
      setups.push(setup);
      setup.store = await startStore(binary, { mode, replicas }, dirs);
      setup.version = (await info(setup.store.url, 'server')).redis_version;
      // The organization's epoch in this Redis, before any permit for it is minted.
      const store = new RedisStore({ url: setup.store.url });
      try {
        await store.ensureEpoch(replayEpochKey(orgId));
      } finally {
        await store.close();
      }
      const proxyDir = await mkdtemp(join(tmpdir(), `countersign-durability-${mode}-${replicas ?? 0}-`));
      dirs.push(proxyDir);
      setup.proxy = await startCountersignProxy({
        dir: proxyDir, redisUrl: setup.store.url, env, name: `the ${label} proxy`,
        yaml: proxyYaml({ upstream: upstream.url, authority: authority.url, keyFile, organization: orgId }),
      });
      log(`durability ${label}: redis ${setup.version} (${setup.store.detail}), its proxy started with COUNTERSIGN_STORE_DURABILITY=${mode}`);
    }
  } catch (error) {
    await stop();
    throw error;
  }
  return { setups, stop };
}

/**
 * Each mode's closed loop (a probe, then fresh permits for the window) and open loop at
 * options.rate, with the authority paused as in the enforce rows. `measureWith(storePids)` is the
 * bench's measure with those servers in its redis+pg column; `passThroughRate` bounds the probe.
 * Resolves { rows: [{ label, closed, open, probe }], gatedOk, errors }.
 */
export async function runDurabilityRows({ setups, measureWith, gatedClosedLoop, mint, pgPids, passThroughRate, options, log }) {
  const warmupMs = options.warmupSeconds * 1000;
  const windowMs = options.seconds * 1000;
  const rows = [];
  if (!(passThroughRate > 0)) {
    // Run alone (BENCH_ONLY=durability), the bench has no pass-through row to size the probes from.
    log('running: durability none, pass-through, closed loop (the bound of the probes below)');
    const measure = measureWith([...setups[0].store.procs.map((proc) => proc.pid), ...pgPids]);
    passThroughRate = (await measure({ name: 'durability none pass-through', server: setups[0].proxy, mode: 'closed', requests: [PASS_REQUEST], reuse: true, warmupMs: 250, windowMs: 1000 })).perSecond;
  }
  for (const setup of setups) {
    const measure = measureWith([...setup.store.procs.map((proc) => proc.pid), ...pgPids]);
    const name = `durability ${setup.label}`;
    // aof and replica cannot outrun none by much: their probe batch is sized from it.
    const none = rows[0]?.closed.perSecond;
    const upperBound = none > 0 ? Math.min(passThroughRate, none * 1.5) : passThroughRate;
    log(`running: ${name}, closed loop (warm-up and probe, then fresh permits for the window)`);
    const { result: closed, probe } = await gatedClosedLoop({ measure, mint, name, server: setup.proxy, upperBound, options, log });
    const requests = await mint(`${name}-open`, Math.ceil(((warmupMs + windowMs) / 1000) * options.rate) + 10);
    log(`running: ${name}, open loop`);
    const open = await measure({ name, server: setup.proxy, mode: 'open', requests, reuse: false, warmupMs, windowMs, pauseAuthority: true });
    rows.push({ label: setup.label, mode: setup.mode, detail: setup.store.detail, version: setup.version, closed, open, probe });
  }
  const all = rows.flatMap((row) => [row.closed, row.open, row.probe]);
  return { rows, gatedOk: all.reduce((sum, row) => sum + row.ok, 0), errors: all.reduce((sum, row) => sum + row.errors, 0) };
}

/** As proxy-report.mjs: CPU (% of one core) outside every process the bench knows of means another workload. */
const OTHER_LOAD_WARNING = 25;
/** An open loop whose rate is this close to the mode's closed-loop capacity queues: its p99 says "saturated". */
const SATURATED_SHARE = 0.9;

const signed = (value, digits, unit) => (Number.isFinite(value) ? `${value >= 0 ? '+' : '−'}${fmt(Math.abs(value), digits)}${unit}` : '-');

/**
 * The modes' rows in full, then one table against `none`; `enforce` (the proxy bench's enforce
 * rows, on the bench's own Redis: aof with its file in /dev/shm) is shown beside them when measured.
 */
export function reportDurability(log, { rows }, { rate, enforce }) {
  const none = rows.find((row) => row.mode === 'none');
  log('');
  log(`durability modes: the enforced route, each mode with its own proxy and Redis (redis ${rows[0]?.version ?? '?'}); closed loop, then open loop at ${rate}/s:`);
  log(table(rows.flatMap((row) => [row.closed, row.open])));
  const saturated = (closed) => closed && rate >= closed.perSecond * SATURATED_SHARE;
  const line = (label, redis, closed, open, compare) => [
    label, redis, fmt(closed?.perSecond, 0), compare ? `${fmt(closed.perSecond / none.closed.perSecond, 2)}×` : '',
    fmt(closed ? perRequest(closed) : Number.NaN, 0), compare ? signed(perRequest(closed) - perRequest(none.closed), 0, '') : '',
    percent(closed?.cpu.stores), `${fmt(open?.p99, 2)}${saturated(closed) ? ' *' : ''}`, compare ? signed(open.p99 - none.open.p99, 2, '') : '', String((closed?.errors ?? 0) + (open?.errors ?? 0)),
  ];
  const cells = rows.map((row) => line(row.label, row.detail, row.closed, row.open, row !== none));
  if (enforce?.closed) cells.push(line('enforce row above', 'the bench Redis: aof, appendfsync always, AOF in /dev/shm', enforce.closed, enforce.open, true));
  log('');
  log(`durability cost against none (same run; closed loop ${rows[0]?.closed.load ?? ''}, p99 at ${rate}/s):`);
  log(formatTable(['mode', 'redis', 'per s', 'vs none', 'proxy µs/req', 'vs none', 'redis+pg cpu', 'p99 ms', 'vs none', 'errors'], cells, 2));
  for (const row of rows.filter((r) => r !== none)) {
    log(`  ${row.label}: ${fmt(row.closed.perSecond / none.closed.perSecond, 2)}× throughput, ${signed(perRequest(row.closed) - perRequest(none.closed), 0, ' µs')} CPU/req, ` +
      `p99 ${fmt(row.open.p99, 1)} ms (none: ${fmt(none.open.p99, 1)} ms)`);
  }
  log('  (per s and proxy µs/req: closed loop; redis+pg cpu: the mode\'s Redis servers (the primary and its replicas) and Postgres, % of one core, closed loop; p99: open loop)');
  if (cells.some((cell) => cell[7].endsWith('*'))) log(`  * ${rate}/s is at or above ${SATURATED_SHARE * 100} % of that mode's closed-loop throughput: the open loop queues, and its p99 says "saturated", not the mode's cost`);
  const disturbed = rows.flatMap((row) => [row.closed, row.open]).filter((row) => row.cpu.other > OTHER_LOAD_WARNING);
  if (disturbed.length > 0) {
    log(`warning: something else used the machine during ${disturbed.map((row) => `"${row.name}, ${row.load}" (${fmt(row.cpu.other, 0)} %)`).join(', ')}: these figures are low and the modes are not comparable; run again on a quiet machine`);
  }
  for (const row of rows.flatMap((r) => [r.probe, r.closed, r.open])) {
    for (const { kind, count, example } of row.errorKinds) log(`errors in "${row.name}" (${row.load}): ${count} × ${kind}, e.g. ${example}`);
  }
}
