/**
 * Throwaway Redis Cluster and Redis Sentinel topologies for `npm test` (test/run.mjs) and for
 * tests that fail over a group of their own (test/helpers/redis.ts), started the way servers.mjs
 * starts Postgres and Redis, and stopped by its stopServers().
 *
 * @example
 *   const cluster = await startRedisCluster({ log: console.log });
 *   if (cluster.ok) process.env.REDIS_CLUSTER_NODES = cluster.nodes.join(',');
 */
import { spawn } from 'node:child_process';
import { createWriteStream, existsSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { READY_TIMEOUT_MS, findOnPath, redisPing, removeAtStop, startServer, stopServer, tail } from './servers.mjs';

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
  removeAtStop(baseDir);
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
 * Cluster on loopback with `replicasPerPrimary` replicas each (default none), created with
 * `redis-cli --cluster create` and ready when every node says `cluster_state:ok` (and every
 * primary has its replicas online). Resolves `{ ok: true, nodes: ['127.0.0.1:p', …], fromEnv,
 * stop, processes }` or a not-ok outcome as startRedis does. `useEnv: false` ignores
 * REDIS_CLUSTER_NODES; `nodeTimeoutMs` is the cluster-node-timeout (how soon a dead primary is
 * failed over).
 */
export async function startRedisCluster({ log, useEnv = true, replicasPerPrimary = 0, nodeTimeoutMs = 5000 }) {
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
    const count = 3 * (1 + replicasPerPrimary);
    const ports = await freePorts(2 * count);
    const nodePorts = ports.slice(0, count);
    const launch = new Map();
    const processes = nodePorts.map((port, i) => {
      const dir = subDir(base, `node-${port}`);
      const args = [
        ...dataNodeArgs(port, dir),
        '--cluster-enabled', 'yes',
        '--cluster-config-file', join(dir, 'nodes.conf'),
        '--cluster-port', String(ports[count + i]),
        '--cluster-node-timeout', String(nodeTimeoutMs),
      ];
      launch.set(port, { args, dir });
      const server = group.start(`redis-cluster-${port}`, bin, args, dir);
      return { host: '127.0.0.1', port, pid: server.child.pid };
    });
    // A node started again with its nodes.conf rejoins the cluster, as its supervisor would restart it.
    let restarts = 0;
    const restartNode = (port) => {
      const { args, dir } = launch.get(port);
      const server = group.start(`redis-cluster-${port}-restart-${++restarts}`, bin, args, dir);
      return { host: '127.0.0.1', port, pid: server.child.pid };
    };
    await waitUntilAll('every cluster node answering PING', group.servers, async () => {
      const pongs = await Promise.all(nodePorts.map((p) => redisPing(p)));
      return pongs.every(Boolean) || `${pongs.filter(Boolean).length}/${count} nodes answer PING`;
    });
    const nodes = nodePorts.map((p) => `127.0.0.1:${p}`);
    const createLog = join(base, 'cluster-create.log');
    group.logs.push({ name: 'redis-cli --cluster create', logFile: createLog });
    const created = await runToLog(cli, ['--cluster', 'create', ...nodes, '--cluster-replicas', String(replicasPerPrimary), '--cluster-yes'], createLog);
    if (created.code !== 0) {
      throw new Error(`redis-cli --cluster create failed (${created.error ?? `exit ${created.code}`})`);
    }
    await waitUntilAll('cluster_state:ok on every node, every replica online', group.servers, async () => {
      const infos = await Promise.all(nodePorts.map((p) => redisCall(p, 'CLUSTER', 'INFO')));
      const ok = infos.filter((info) => /^cluster_state:ok\r?$/m.test(String(info))).length;
      if (ok !== count) return `${ok}/${count} nodes report cluster_state:ok`;
      if (replicasPerPrimary === 0) return true;
      const replications = await Promise.all(nodePorts.map((p) => redisCall(p, 'INFO', 'replication')));
      const primaries = replications.filter((info) => /^role:master\r?$/m.test(String(info)));
      const full = primaries.filter((info) => (String(info).match(/^slave\d+:.*state=online/gm) ?? []).length === replicasPerPrimary);
      return (primaries.length === 3 && full.length === 3) || `${full.length}/3 primaries have ${replicasPerPrimary} replica(s) online`;
    });
    log(`redis-cluster: started a throwaway 3-primary cluster (${bin}, ${replicasPerPrimary} replica(s) each) at ${nodes.join(', ')}`);
    return { ok: true, nodes, fromEnv: false, stop: group.stop, processes, restartNode };
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
 * when set, else a throwaway Sentinel group on loopback: a primary, `replicas` replicas (default
 * one) and three sentinels monitoring the primary as `masterName` with quorum 2, down-after 1 s
 * and failover timeout 5 s. Ready when the replicas are in sync and every sentinel knows the
 * master, its replicas and the two other sentinels (so a failover can be authorised right away).
 * Resolves `{ ok: true, sentinels: ['127.0.0.1:s', …], masterName, fromEnv, primary: {host, port,
 * pid}, replica: {host, port, pid}, replicas: [...], stop }` (the processes only when started
 * here), or a not-ok outcome as startRedis does. `useEnv: false` ignores REDIS_SENTINELS, for a
 * group of one's own.
 */
export async function startRedisSentinel({ log, useEnv = true, masterName = 'countersign', replicas: replicaCount = 1 }) {
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
    const [primaryPort, ...otherPorts] = await freePorts(1 + replicaCount + 3);
    const replicaPorts = otherPorts.slice(0, replicaCount);
    const sentinelPorts = otherPorts.slice(replicaCount);
    const primaryDir = subDir(base, 'primary');
    const primary = group.start('redis-sentinel-primary', bin, dataNodeArgs(primaryPort, primaryDir), primaryDir);
    const replicas = replicaPorts.map((port, i) => {
      const dir = subDir(base, `replica-${i}`);
      const server = group.start(`redis-sentinel-replica-${i}`, bin, [...dataNodeArgs(port, dir), '--replicaof', '127.0.0.1', String(primaryPort)], dir);
      return { host: '127.0.0.1', port, pid: server.child.pid };
    });
    // Sentinels start after the replicas are in sync: a sentinel reads the master's replicas from
    // INFO when it connects and then only every 10 s, which would slow the start down.
    await waitUntilAll('the replicas in sync with the primary', group.servers, async () => {
      const info = String(await redisCall(primaryPort, 'INFO', 'replication'));
      const online = (info.match(/^slave\d+:.*state=online/gm) ?? []).length;
      const links = await Promise.all(replicaPorts.map(async (port) => /^master_link_status:up\r?$/m.test(String(await redisCall(port, 'INFO', 'replication')))));
      return (online === replicaCount && links.every(Boolean)) || `${online}/${replicaCount} replicas online`;
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
        return master.port === String(primaryPort) && master['num-slaves'] === String(replicaCount) && master['num-other-sentinels'] === '2';
      }));
      return states.every(Boolean) || `${states.filter(Boolean).length}/3 sentinels ready`;
    });
    log(`redis-sentinel: started a throwaway group (${sentinelBin ?? `${bin} --sentinel`}): primary 127.0.0.1:${primaryPort}, ` +
      `replicas ${replicaPorts.map((port) => `127.0.0.1:${port}`).join(', ')}, sentinels ${sentinels.join(', ')}, master name ${masterName}`);
    return {
      ok: true,
      sentinels,
      masterName,
      fromEnv: false,
      primary: { host: '127.0.0.1', port: primaryPort, pid: primary.child.pid },
      replica: replicas[0],
      replicas,
      stop: group.stop,
    };
  } catch (err) {
    const logTail = group.logTail();
    await group.stop();
    return { ok: false, failed: true, reason: err.message, logTail };
  }
}

