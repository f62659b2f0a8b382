/**
 * Throwaway Postgres and Redis servers for `npm test` (test/run.mjs) and `npm run bench`
 * (test/bench/run.mjs): found on PATH (or under /usr/lib/postgresql/<version>/bin), started on a
 * free loopback port in a temp folder, and removed by `stopServers()`. Besides a single Redis
 * (startRedis), a 3-primary Redis Cluster (startRedisCluster) and a Sentinel group
 * (startRedisSentinel); test processes import those through test/helpers/redis.ts.
 *
 * Each start function logs what it used ("postgres: started …", "redis: using REDIS_URL …") and
 * resolves an outcome; the caller words the "could not run" messages, because what is skipped
 * (a test suite, a benchmark) is the caller's business:
 *   { ok: true, url, fromEnv }                   a server to use (fromEnv: DATABASE_URL/REDIS_URL was set;
 *                                                the Cluster/Sentinel outcomes carry addresses, not a url)
 *   { ok: false, failed: false, reason }         nothing to start (no binaries, no user to run as)
 *   { ok: false, failed: true, reason, logTail } a server was found but did not start
 *
 * @example
 *   const pg = await startPostgres({ log: console.log });
 *   if (pg.ok) process.env.DATABASE_URL = pg.url;
 *   …
 *   await stopServers();
 */
import { spawn, spawnSync } from 'node:child_process';
import { accessSync, chownSync, constants, createWriteStream, existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, realpathSync, rmSync, writeFileSync } from 'node:fs';
import { createConnection, createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { delimiter, dirname, join } from 'node:path';

const READY_TIMEOUT_MS = 60_000;
const STOP_TIMEOUT_MS = 15_000;

/** Servers and folders to remove whatever happens. */
const started = [];
const tempDirs = [];

function findOnPath(name) {
  for (const dir of (process.env.PATH ?? '').split(delimiter)) {
    if (!dir) continue;
    const candidate = join(dir, name);
    try {
      accessSync(candidate, constants.X_OK);
      return candidate;
    } catch {
      // not here
    }
  }
  return undefined;
}

/** The bin folder holding both initdb and postgres, so their versions match. */
function findPostgresBin() {
  const onPath = findOnPath('initdb');
  if (onPath) {
    const dir = dirname(realpathSync(onPath));
    if (existsSync(join(dir, 'postgres'))) return dir;
  }
  const base = '/usr/lib/postgresql';
  if (!existsSync(base)) return undefined;
  const versions = readdirSync(base)
    .filter((v) => existsSync(join(base, v, 'bin', 'initdb')) && existsSync(join(base, v, 'bin', 'postgres')))
    .sort((a, b) => Number.parseFloat(b) - Number.parseFloat(a));
  return versions[0] === undefined ? undefined : join(base, versions[0], 'bin');
}

/** A loopback port nobody listens on right now. */
export function freePort() {
  return new Promise((resolvePort, reject) => {
    const server = createServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address();
      server.close(() => resolvePort(port));
    });
  });
}

/** uid/gid of a system user, from /etc/passwd (no getent needed). */
function systemUser(name) {
  try {
    for (const line of readFileSync('/etc/passwd', 'utf8').split('\n')) {
      const [user, , uid, gid, , home] = line.split(':');
      if (user === name) return { uid: Number(uid), gid: Number(gid), home };
    }
  } catch {
    // no /etc/passwd
  }
  return undefined;
}

function tail(file, lines = 30) {
  try {
    return readFileSync(file, 'utf8').trimEnd().split('\n').slice(-lines).join('\n');
  } catch {
    return '(no log)';
  }
}

/** The URL with its password masked, for log lines. */
export function redact(url) {
  try {
    const u = new URL(url);
    if (u.password) u.password = '***';
    return u.toString();
  } catch {
    return '(unparsable URL)';
  }
}

/** Polls `probe` until it resolves true; fails early when the server process has exited. */
async function waitUntil(what, server, probe) {
  const deadline = Date.now() + READY_TIMEOUT_MS;
  while (Date.now() < deadline) {
    if (server.exited) throw new Error(`${what} exited during start-up (code ${server.child.exitCode})`);
    if (await probe().catch(() => false)) return;
    await new Promise((r) => setTimeout(r, 200));
  }
  throw new Error(`${what} did not accept connections within ${READY_TIMEOUT_MS / 1000} s`);
}

function startServer(name, command, args, { stopSignal = 'SIGTERM', ...options }, logFile) {
  const out = createWriteStream(logFile);
  const child = spawn(command, args, { ...options, stdio: ['ignore', 'pipe', 'pipe'] });
  child.stdout.pipe(out);
  child.stderr.pipe(out);
  const server = { name, child, exited: false, stopSignal };
  // 'error' without 'exit' when the binary cannot be spawned at all.
  server.done = new Promise((r) => {
    child.once('exit', r);
    child.once('error', r);
  }).then(() => {
    server.exited = true;
  });
  started.push(server);
  return server;
}

async function stopServer(server) {
  if (server.exited) return;
  server.child.kill(server.stopSignal);
  const timer = setTimeout(() => server.child.kill('SIGKILL'), STOP_TIMEOUT_MS);
  await server.done;
  clearTimeout(timer);
}

/**
 * DATABASE_URL when set, else a throwaway Postgres (run as the `postgres` system user when this
 * runs as root, which Postgres refuses). `settings` are extra `-c name=value` server settings;
 * they come last, so they override the defaults here.
 */
export async function startPostgres({ log, settings = [] }) {
  if (process.env.DATABASE_URL) {
    log(`postgres: using DATABASE_URL from the environment (${redact(process.env.DATABASE_URL)})`);
    return { ok: true, url: process.env.DATABASE_URL, fromEnv: true };
  }
  const bin = findPostgresBin();
  if (!bin) {
    return {
      ok: false,
      failed: false,
      reason: 'DATABASE_URL is not set and no Postgres server binaries (initdb, postgres) were found on PATH or under /usr/lib/postgresql/*/bin',
    };
  }
  let user;
  if (process.getuid?.() === 0) {
    user = systemUser('postgres');
    if (!user) {
      return {
        ok: false,
        failed: false,
        reason: `binaries found in ${bin}, but this runs as root, ` +
          'Postgres refuses to run as root, and there is no `postgres` system user to run it as ' +
          '(install the postgresql package, or set DATABASE_URL)',
      };
    }
  }
  const dir = mkdtempSync(join(tmpdir(), 'countersign-pg-'));
  tempDirs.push(dir);
  const dataDir = join(dir, 'data');
  const logFile = join(dir, 'postgres.log');
  const asUser = user ? { uid: user.uid, gid: user.gid } : {};
  if (user) chownSync(dir, user.uid, user.gid);
  // HOME/PWD of root would be unreadable for the postgres user; cwd is the temp dir.
  const env = { ...process.env, ...(user ? { HOME: dir } : {}), LC_ALL: 'C' };
  try {
    const init = spawnSync(
      join(bin, 'initdb'),
      ['-D', dataDir, '-U', 'postgres', '--auth=trust', '--encoding=UTF8', '--no-sync'],
      { ...asUser, cwd: dir, env, encoding: 'utf8' },
    );
    if (init.status !== 0) {
      throw new Error(`initdb failed (${init.error?.message ?? `exit ${init.status}`}):\n${`${init.stdout}${init.stderr}`.trim()}`);
    }
    const port = await freePort();
    const server = startServer('postgres', join(bin, 'postgres'), [
      '-D', dataDir,
      '-p', String(port),
      '-k', dir,
      '-c', 'listen_addresses=127.0.0.1',
      '-c', 'fsync=off',
      '-c', 'synchronous_commit=off',
      '-c', 'full_page_writes=off',
      // Test files run in parallel, each with its own databases and pools.
      '-c', 'max_connections=300',
      ...settings.flatMap((setting) => ['-c', setting]),
    ], { ...asUser, cwd: dir, env, stopSignal: 'SIGINT' /* fast shutdown */ }, logFile);
    const url = `postgres://postgres@127.0.0.1:${port}/postgres`;
    const { default: pg } = await import('pg');
    await waitUntil('postgres', server, async () => {
      const client = new pg.Client({ connectionString: url, connectionTimeoutMillis: 2_000 });
      client.on('error', () => undefined);
      try {
        await client.connect();
        await client.query('SELECT 1');
        return true;
      } finally {
        await client.end().catch(() => undefined);
      }
    });
    log(`postgres: started a throwaway server from ${bin} at ${url}${user ? ' (as user postgres)' : ''}`);
    return { ok: true, url, fromEnv: false };
  } catch (err) {
    return { ok: false, failed: true, reason: err.message, logTail: tail(logFile) };
  }
}

function redisPing(port) {
  return new Promise((resolvePing) => {
    const socket = createConnection({ host: '127.0.0.1', port });
    let reply = '';
    socket.setTimeout(2_000, () => socket.destroy());
    socket.on('connect', () => socket.write('PING\r\n'));
    socket.on('data', (d) => {
      reply += d.toString();
      if (reply.includes('\r\n')) socket.end();
    });
    socket.on('error', () => undefined);
    socket.on('close', () => resolvePing(reply.startsWith('+PONG')));
  });
}

/**
 * Where a throwaway Redis keeps its append-only file: memory (/dev/shm) when the machine has it,
 * so that `appendfsync always` costs next to nothing, else the temp folder.
 */
function redisDataRoot() {
  return existsSync('/dev/shm') ? '/dev/shm' : tmpdir();
}

/**
 * REDIS_URL when set, else a throwaway redis-server configured as production needs it for the
 * default durability `aof` (appendonly yes, appendfsync always; docs/replay-store.md), its file in
 * memory: the processes under test check that at start and refuse a Redis without it.
 */
export async function startRedis({ log }) {
  if (process.env.REDIS_URL) {
    log(`redis: using REDIS_URL from the environment (${redact(process.env.REDIS_URL)})`);
    return { ok: true, url: process.env.REDIS_URL, fromEnv: true };
  }
  const bin = findOnPath('redis-server') ?? ['/usr/bin/redis-server', '/usr/sbin/redis-server'].find((p) => existsSync(p));
  if (!bin) {
    return { ok: false, failed: false, reason: 'REDIS_URL is not set and no redis-server binary was found on PATH' };
  }
  const dir = mkdtempSync(join(redisDataRoot(), 'countersign-redis-'));
  tempDirs.push(dir);
  const logFile = join(dir, 'redis.log');
  try {
    const port = await freePort();
    const server = startServer('redis', bin, [
      '--port', String(port),
      '--bind', '127.0.0.1',
      '--save', '',
      '--appendonly', 'yes',
      '--appendfsync', 'always',
      '--dir', dir,
      '--daemonize', 'no',
    ], { cwd: dir }, logFile);
    await waitUntil('redis-server', server, () => redisPing(port));
    const url = `redis://127.0.0.1:${port}`;
    log(`redis: started a throwaway server (${bin}) at ${url}`);
    return { ok: true, url, fromEnv: false };
  } catch (err) {
    return { ok: false, failed: true, reason: err.message, logTail: tail(logFile) };
  }
}

/* ---------------------------------------------------------------------------------------------
 * Redis Cluster and Redis Sentinel. Both resolve the same outcome shapes as startRedis, with the
 * topology's addresses instead of a URL, plus `stop()` to stop just that topology: a test process
 * that starts its own Sentinel group (to fail it over without disturbing other test files) stops
 * it in its teardown, and the servers are SIGKILLed if that process exits without doing so.
 * ------------------------------------------------------------------------------------------- */

/**
 * Servers and folders of the topologies below, killed and removed at process exit, so a test
 * process that ends without stopping its group (a thrown error, process.exit) leaks nothing. A
 * process killed by a signal runs no 'exit' handler; run.mjs stops its own servers on SIGINT/SIGTERM.
 */
const topologyServers = [];
const topologyDirs = [];
let exitHookInstalled = false;

function cleanUpTopologiesAtExit() {
  if (exitHookInstalled) return;
  exitHookInstalled = true;
  // 'exit' handlers must be synchronous: kill() and rmSync are, and SIGKILL cannot be ignored.
  process.once('exit', () => {
    for (const s of topologyServers) if (!s.exited) s.child.kill('SIGKILL');
    for (const dir of topologyDirs) rmSync(dir, { recursive: true, force: true });
  });
}

function findRedisBinary(name) {
  return findOnPath(name) ?? [`/usr/bin/${name}`, `/usr/sbin/${name}`, `/usr/local/bin/${name}`].find((p) => existsSync(p));
}

/** `count` distinct free loopback ports (all held open at once, so none is handed out twice). */
async function freePorts(count) {
  const servers = [];
  try {
    for (let i = 0; i < count; i++) {
      const server = createServer();
      servers.push(server);
      await new Promise((resolveListen, reject) => {
        server.once('error', reject);
        server.listen(0, '127.0.0.1', resolveListen);
      });
    }
    return servers.map((s) => s.address().port);
  } finally {
    await Promise.all(servers.map((s) => new Promise((r) => (s.listening ? s.close(r) : r()))));
  }
}

/** Parses `host:port,host:port` ([v6]:port allowed); throws naming the variable on a bad entry. */
function parseAddressList(variable, value) {
  const entries = value.split(',').map((s) => s.trim()).filter(Boolean);
  if (entries.length === 0) throw new Error(`${variable} is set but lists no host:port`);
  return entries.map((entry) => {
    const colon = entry.lastIndexOf(':');
    const port = Number(entry.slice(colon + 1));
    if (colon <= 0 || !Number.isInteger(port) || port < 1 || port > 65535) {
      throw new Error(`${variable}: "${entry}" is not host:port`);
    }
    return entry;
  });
}

/** One command to a Redis or Sentinel on loopback; the reply as ioredis gives it. */
async function redisCall(port, ...args) {
  const { Redis } = await import('ioredis');
  const client = new Redis({
    host: '127.0.0.1',
    port,
    lazyConnect: true,
    connectTimeout: 2_000,
    commandTimeout: 2_000,
    maxRetriesPerRequest: 0,
    retryStrategy: () => null,
    enableReadyCheck: false,
  });
  client.on('error', () => undefined);
  try {
    await client.connect();
    return await client.call(...args);
  } finally {
    client.disconnect();
  }
}

/** Like waitUntil, for several servers: fails early when any of them has exited. */
async function waitUntilAll(what, servers, probe) {
  const deadline = Date.now() + READY_TIMEOUT_MS;
  let lastState = 'no answer yet';
  while (Date.now() < deadline) {
    const dead = servers.find((s) => s.exited);
    if (dead) {
      throw new Error(dead.spawnError
        ? `${dead.name} could not be run: ${dead.spawnError}`
        : `${dead.name} exited while waiting for ${what} (code ${dead.child.exitCode ?? dead.child.signalCode})`);
    }
    const result = await probe().catch((err) => err.message);
    if (result === true) return;
    if (typeof result === 'string') lastState = result;
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error(`${what} not reached within ${READY_TIMEOUT_MS / 1000} s (last state: ${lastState})`);
}

/** Runs a command to completion, its output appended to `logFile`; resolves the exit code. */
function runToLog(command, args, logFile) {
  return new Promise((resolveRun) => {
    const out = createWriteStream(logFile, { flags: 'a' });
    const child = spawn(command, args, { stdio: ['ignore', 'pipe', 'pipe'] });
    child.stdout.pipe(out);
    child.stderr.pipe(out);
    const timer = setTimeout(() => child.kill('SIGKILL'), READY_TIMEOUT_MS);
    child.once('error', (err) => {
      clearTimeout(timer);
      resolveRun({ code: null, error: err.message });
    });
    child.once('close', (code, signal) => {
      clearTimeout(timer);
      resolveRun({ code, error: signal ? `killed by ${signal}` : undefined });
    });
  });
}

/** A set of servers and folders that starts and stops together. */
function createGroup(baseDir) {
  const group = { servers: [], dirs: [baseDir], logs: [] };
  tempDirs.push(baseDir);
  topologyDirs.push(baseDir);
  cleanUpTopologiesAtExit();
  group.start = (name, command, args, dir) => {
    const logFile = join(dir, `${name}.log`);
    group.logs.push({ name, logFile });
    const server = startServer(name, command, args, { cwd: dir }, logFile);
    server.child.once('error', (err) => {
      server.spawnError = err.message;
    });
    group.servers.push(server);
    topologyServers.push(server);
    return server;
  };
  group.stop = async () => {
    await Promise.all(group.servers.map((s) => stopServer(s).catch(() => undefined)));
    for (const dir of group.dirs) rmSync(dir, { recursive: true, force: true });
  };
  // Every server's last lines: which one misbehaved is not known in advance.
  group.logTail = () => group.logs.map(({ name, logFile }) => `--- ${name}\n${tail(logFile, 12)}`).join('\n');
  return group;
}

/** Arguments every data node shares: loopback only, no persistence, DEBUG allowed from loopback. */
function dataNodeArgs(port, dir) {
  return [
    '--port', String(port),
    '--bind', '127.0.0.1',
    '--save', '',
    '--appendonly', 'no',
    '--dir', dir,
    '--daemonize', 'no',
    // Lets fault tests stall a node with DEBUG SLEEP (Redis 7 refuses DEBUG by default).
    '--enable-debug-command', 'local',
    // A primary otherwise waits 5 s for more replicas before a full sync (diskless sync delay):
    // most of the Sentinel group's start-up time.
    '--repl-diskless-sync-delay', '0',
  ];
}

function subDir(base, name) {
  const dir = join(base, name);
  mkdirSync(dir);
  return dir;
}

/**
 * REDIS_CLUSTER_NODES (comma-separated host:port) when set, else a throwaway 3-primary Redis
 * Cluster without replicas on loopback, created with `redis-cli --cluster create` and ready when
 * every node says `cluster_state:ok`. Resolves `{ ok: true, nodes: ['127.0.0.1:p', …], fromEnv,
 * stop }` or a not-ok outcome as startRedis does. `useEnv: false` ignores REDIS_CLUSTER_NODES.
 */
export async function startRedisCluster({ log, useEnv = true }) {
  const fromEnv = useEnv ? process.env.REDIS_CLUSTER_NODES?.trim() : undefined;
  if (fromEnv) {
    let nodes;
    try {
      nodes = parseAddressList('REDIS_CLUSTER_NODES', fromEnv);
    } catch (err) {
      return { ok: false, failed: true, reason: err.message, logTail: '(no server was started)' };
    }
    log(`redis-cluster: using REDIS_CLUSTER_NODES from the environment (${nodes.join(', ')})`);
    return { ok: true, nodes, fromEnv: true, stop: async () => undefined };
  }
  const bin = findRedisBinary('redis-server');
  const cli = findRedisBinary('redis-cli');
  if (!bin || !cli) {
    return {
      ok: false,
      failed: false,
      reason: `REDIS_CLUSTER_NODES is not set and no ${bin ? 'redis-cli' : 'redis-server'} binary was found on PATH`,
    };
  }
  const group = createGroup(mkdtempSync(join(tmpdir(), 'countersign-redis-cluster-')));
  const base = group.dirs[0];
  try {
    // A port and a bus port per node: the default bus port (port + 10000) can exceed 65535 for
    // the ephemeral ports freePorts hands out, so --cluster-port sets it explicitly.
    const ports = await freePorts(6);
    const nodePorts = ports.slice(0, 3);
    nodePorts.forEach((port, i) => {
      const dir = subDir(base, `node-${port}`);
      group.start(`redis-cluster-${port}`, bin, [
        ...dataNodeArgs(port, dir),
        '--cluster-enabled', 'yes',
        '--cluster-config-file', join(dir, 'nodes.conf'),
        '--cluster-port', String(ports[3 + i]),
        '--cluster-node-timeout', '5000',
      ], dir);
    });
    await waitUntilAll('every cluster node answering PING', group.servers, async () => {
      const pongs = await Promise.all(nodePorts.map((p) => redisPing(p)));
      return pongs.every(Boolean) || `${pongs.filter(Boolean).length}/3 nodes answer PING`;
    });
    const nodes = nodePorts.map((p) => `127.0.0.1:${p}`);
    const createLog = join(base, 'cluster-create.log');
    group.logs.push({ name: 'redis-cli --cluster create', logFile: createLog });
    const created = await runToLog(cli, ['--cluster', 'create', ...nodes, '--cluster-replicas', '0', '--cluster-yes'], createLog);
    if (created.code !== 0) {
      throw new Error(`redis-cli --cluster create failed (${created.error ?? `exit ${created.code}`})`);
    }
    await waitUntilAll('cluster_state:ok on every node', group.servers, async () => {
      const infos = await Promise.all(nodePorts.map((p) => redisCall(p, 'CLUSTER', 'INFO')));
      const ok = infos.filter((info) => /^cluster_state:ok\r?$/m.test(String(info))).length;
      return ok === nodePorts.length || `${ok}/3 nodes report cluster_state:ok`;
    });
    log(`redis-cluster: started a throwaway 3-primary cluster (${bin}) at ${nodes.join(', ')}`);
    return { ok: true, nodes, fromEnv: false, stop: group.stop };
  } catch (err) {
    const logTail = group.logTail();
    await group.stop();
    return { ok: false, failed: true, reason: err.message, logTail };
  }
}

/** `SENTINEL MASTER <name>`'s flat [field, value, …] reply as an object. */
function fieldsOf(reply) {
  const fields = {};
  if (Array.isArray(reply)) for (let i = 0; i + 1 < reply.length; i += 2) fields[String(reply[i])] = String(reply[i + 1]);
  return fields;
}

/**
 * REDIS_SENTINELS (comma-separated host:port) and REDIS_SENTINEL_MASTER (default `countersign`)
 * when set, else a throwaway Sentinel group on loopback: a primary, one replica and three
 * sentinels monitoring the primary as `masterName` with quorum 2, down-after 1 s and failover
 * timeout 5 s. Ready when the replica is in sync and every sentinel knows the master, the replica
 * and the two other sentinels (so a failover can be authorised right away). Resolves
 * `{ ok: true, sentinels: ['127.0.0.1:s', …], masterName, fromEnv, primary: {host, port, pid},
 * replica: {host, port, pid}, stop }` (primary/replica only when started here), or a not-ok
 * outcome as startRedis does. `useEnv: false` ignores REDIS_SENTINELS, for a group of one's own.
 */
export async function startRedisSentinel({ log, useEnv = true, masterName = 'countersign' }) {
  const fromEnv = useEnv ? process.env.REDIS_SENTINELS?.trim() : undefined;
  if (fromEnv) {
    let sentinels;
    try {
      sentinels = parseAddressList('REDIS_SENTINELS', fromEnv);
    } catch (err) {
      return { ok: false, failed: true, reason: err.message, logTail: '(no server was started)' };
    }
    const name = process.env.REDIS_SENTINEL_MASTER?.trim() || masterName;
    log(`redis-sentinel: using REDIS_SENTINELS from the environment (${sentinels.join(', ')}, master ${name})`);
    return { ok: true, sentinels, masterName: name, fromEnv: true, stop: async () => undefined };
  }
  const bin = findRedisBinary('redis-server');
  if (!bin) {
    return { ok: false, failed: false, reason: 'REDIS_SENTINELS is not set and no redis-server binary was found on PATH' };
  }
  // Debian's redis-sentinel package provides the binary; redis-server <conf> --sentinel is the
  // same program in sentinel mode, for installs without it.
  const sentinelBin = findRedisBinary('redis-sentinel');
  const group = createGroup(mkdtempSync(join(tmpdir(), 'countersign-redis-sentinel-')));
  const base = group.dirs[0];
  try {
    const [primaryPort, replicaPort, ...sentinelPorts] = await freePorts(5);
    const primaryDir = subDir(base, 'primary');
    const replicaDir = subDir(base, 'replica');
    const primary = group.start('redis-sentinel-primary', bin, dataNodeArgs(primaryPort, primaryDir), primaryDir);
    const replica = group.start('redis-sentinel-replica', bin, [
      ...dataNodeArgs(replicaPort, replicaDir),
      '--replicaof', '127.0.0.1', String(primaryPort),
    ], replicaDir);
    // Sentinels start after the replica is in sync: a sentinel reads the master's replicas from
    // INFO when it connects and then only every 10 s, which would slow the start down.
    await waitUntilAll('the replica in sync with the primary', group.servers, async () => {
      const info = String(await redisCall(primaryPort, 'INFO', 'replication'));
      const link = String(await redisCall(replicaPort, 'INFO', 'replication'));
      return (/^connected_slaves:1\r?$/m.test(info) && /^slave0:.*state=online/m.test(info) && /^master_link_status:up\r?$/m.test(link)) ||
        'replica not connected and online yet';
    });
    const sentinels = sentinelPorts.map((port) => {
      const dir = subDir(base, `sentinel-${port}`);
      const conf = join(dir, 'sentinel.conf');
      // Sentinel rewrites this file with what it learns (replicas, peers, epochs): it must be
      // writable and its own.
      writeFileSync(conf, [
        `port ${port}`,
        'bind 127.0.0.1',
        'daemonize no',
        `dir ${dir}`,
        `sentinel monitor ${masterName} 127.0.0.1 ${primaryPort} 2`,
        `sentinel down-after-milliseconds ${masterName} 1000`,
        `sentinel failover-timeout ${masterName} 5000`,
        `sentinel parallel-syncs ${masterName} 1`,
        '',
      ].join('\n'));
      const [command, args] = sentinelBin ? [sentinelBin, [conf]] : [bin, [conf, '--sentinel']];
      group.start(`redis-sentinel-${port}`, command, args, dir);
      return `127.0.0.1:${port}`;
    });
    await waitUntilAll('every sentinel knowing the master, its replica and the other sentinels', group.servers, async () => {
      const states = await Promise.all(sentinelPorts.map(async (port) => {
        const master = fieldsOf(await redisCall(port, 'SENTINEL', 'MASTER', masterName));
        return master.port === String(primaryPort) && master['num-slaves'] === '1' && master['num-other-sentinels'] === '2';
      }));
      return states.every(Boolean) || `${states.filter(Boolean).length}/3 sentinels ready`;
    });
    log(`redis-sentinel: started a throwaway group (${sentinelBin ?? `${bin} --sentinel`}): primary 127.0.0.1:${primaryPort}, ` +
      `replica 127.0.0.1:${replicaPort}, sentinels ${sentinels.join(', ')}, master name ${masterName}`);
    return {
      ok: true,
      sentinels,
      masterName,
      fromEnv: false,
      primary: { host: '127.0.0.1', port: primaryPort, pid: primary.child.pid },
      replica: { host: '127.0.0.1', port: replicaPort, pid: replica.child.pid },
      stop: group.stop,
    };
  } catch (err) {
    const logTail = group.logTail();
    await group.stop();
    return { ok: false, failed: true, reason: err.message, logTail };
  }
}

let stopping;
/** Stops every server started here and removes their folders; safe to call more than once. */
export function stopServers() {
  stopping ??= (async () => {
    await Promise.all(started.map((s) => stopServer(s).catch(() => undefined)));
    for (const dir of tempDirs) rmSync(dir, { recursive: true, force: true });
  })();
  return stopping;
}
