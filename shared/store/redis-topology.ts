/**
 * How the Redis store reaches Redis: one server, a Sentinel-managed primary (failover), or a
 * Redis Cluster, through ioredis. Every topology gets the same fail-fast client settings (no
 * offline queue, no resending of commands in flight), because a command replayed after a
 * reconnect could consume a permit whose request was already refused.
 *
 * Also here: what the store needs to read off the servers themselves, namely their clock (the
 * consume deadline is checked against Redis's `TIME`) and their persistence and replication
 * settings (whether a durability mode can be kept, see checkDurabilityOf).
 *
 * @example
 *   const client = createRedisClient({ kind: 'sentinel', sentinels: [{ host: 's1', port: 26379 }], name: 'countersign' }, timeouts);
 *   const check = await checkDurabilityOf(client, 'replica'); // { ok: true, detail: 'WAIT 1: 1 replica connected' }
 */
import { Cluster, Redis } from 'ioredis';
import type { RedisOptions } from 'ioredis';
import type { DurabilityCheck, StoreDurability } from './types.js';

export interface RedisHost {
  host: string;
  port: number;
}

export type RedisTopology =
  /** One server (or a managed endpoint): `redis://` or `rediss://`, credentials and database included. */
  | { kind: 'single'; url: string }
  /** A primary watched by Sentinels; ioredis asks them for the current primary and follows failovers. */
  | { kind: 'sentinel'; sentinels: RedisHost[]; name: string; username?: string; password?: string; sentinelPassword?: string; tls?: boolean }
  /** A Redis Cluster, from any of its nodes. */
  | { kind: 'cluster'; nodes: RedisHost[]; username?: string; password?: string; tls?: boolean };

export interface RedisTimeouts {
  connectTimeoutMs: number;
  commandTimeoutMs: number;
}

/** Either client: both run scripts, pipelines and the commands the store uses. */
export type RedisClient = Redis | Cluster;

/** Upper bound of the reconnect backoff. */
const MAX_RECONNECT_DELAY_MS = 2000;

const reconnectDelay = (attempt: number): number => Math.min(50 * 2 ** Math.min(attempt, 10), MAX_RECONNECT_DELAY_MS);

/**
 * No auto-pipelining for one server or a Sentinel-managed primary: ioredis builds a Pipeline object
 * per batch, which copies the client's script commands onto itself and defines an accessor of its
 * own, and at moderate rates every consume is a batch of one. At 1,000 enforced requests/s the
 * proxy promoted about 2.2 times as much to the old generation per young-generation collection
 * with it, and so ran more full collections, which show in its tail latency (docs/architecture.md,
 * "Redis writes of one turn leave together").
 * The store coalesces the writes of one turn of the event loop itself (redis-connection.ts).
 */
export function createRedisClient(topology: RedisTopology, timeouts: RedisTimeouts): RedisClient {
  const failFast = {
    connectTimeout: timeouts.connectTimeoutMs,
    commandTimeout: timeouts.commandTimeoutMs,
    // Reject (not resend) commands in flight when a connection drops: a late consume would burn
    // a permit already refused.
    maxRetriesPerRequest: 0,
    autoResendUnfulfilledCommands: false,
    // After a failover the old primary answers READONLY; reconnecting finds the new one.
    reconnectOnError: (error: Error) => error.message.startsWith('READONLY'),
  } satisfies RedisOptions;
  switch (topology.kind) {
    case 'single':
      return new Redis(topology.url, {
        ...failFast,
        enableOfflineQueue: false,
        retryStrategy: reconnectDelay,
        enableAutoPipelining: false,
      });
    case 'sentinel':
      return new Redis({
        ...failFast,
        sentinels: topology.sentinels,
        name: topology.name,
        ...(topology.username ? { username: topology.username } : {}),
        ...(topology.password ? { password: topology.password } : {}),
        ...(topology.sentinelPassword ? { sentinelPassword: topology.sentinelPassword } : {}),
        ...(topology.tls ? { tls: {}, sentinelTLS: {}, enableTLSForSentinelMode: true } : {}),
        enableOfflineQueue: false,
        retryStrategy: reconnectDelay,
        sentinelRetryStrategy: reconnectDelay,
        enableAutoPipelining: false,
      });
    case 'cluster':
      return new Cluster(topology.nodes, {
        enableOfflineQueue: false,
        clusterRetryStrategy: reconnectDelay,
        // Reads and writes go to primaries: a replica may not have a marker yet.
        scaleReads: 'master',
        // One socket per node: the store cannot cork them as it does one server's (redis.ts).
        enableAutoPipelining: true,
        redisOptions: {
          ...failFast,
          ...(topology.username ? { username: topology.username } : {}),
          ...(topology.password ? { password: topology.password } : {}),
          ...(topology.tls ? { tls: {} } : {}),
        },
      });
  }
}

/** The servers that take writes: the cluster's primaries, or the one server. */
export function primariesOf(client: RedisClient): Redis[] {
  return client instanceof Cluster ? client.nodes('master') : [client];
}

/**
 * The Redis clock relative to ours: `redisNowMs ≈ Date.now() + offsetMs`, within `uncertaintyMs`
 * (half the round trip). The consume deadline is written in Redis's time, so a gate whose clock is
 * off from Redis's still never consumes after it gave up.
 */
export async function measureClockOffset(client: RedisClient): Promise<{ offsetMs: number; uncertaintyMs: number }> {
  const server = primariesOf(client)[0] ?? client;
  const before = Date.now();
  const [seconds, micros] = await (server as Redis).time();
  const after = Date.now();
  const redisMs = Number(seconds) * 1000 + Math.floor(Number(micros) / 1000);
  return { offsetMs: redisMs - (before + after) / 2, uncertaintyMs: Math.ceil((after - before) / 2) };
}

/** How each durability mode is kept after a write, once the servers were checked. */
export type DurabilityWait = 'none' | 'waitaof' | 'wait';

export interface DurabilityPlan extends DurabilityCheck {
  wait: DurabilityWait;
}

/**
 * Reads every primary's persistence and replication settings and says whether `durability` can
 * be kept, and how:
 * - `aof`: `appendonly yes` on every primary, and either `WAITAOF 1 0` after each write (Redis
 *   7.2+) or `appendfsync always` (older Redis fsyncs before it answers);
 * - `replica`: at least one connected replica per primary, and `WAIT 1` after each write.
 */
export async function checkDurabilityOf(client: RedisClient, durability: StoreDurability): Promise<DurabilityPlan> {
  if (durability === 'none') return { durability, ok: true, wait: 'none', detail: 'no durability promised (development)' };
  const primaries = primariesOf(client);
  if (primaries.length === 0) return { durability, ok: false, wait: 'none', detail: 'no primary is known' };
  const findings: DurabilityPlan[] = [];
  for (const server of primaries) findings.push(await checkServer(server, durability));
  const failed = findings.find((finding) => !finding.ok);
  if (failed) return failed;
  // Every primary runs the same version in practice; if one lacks WAITAOF, none is used.
  const wait = findings.every((finding) => finding.wait === findings[0]!.wait) ? findings[0]!.wait : 'none';
  if (wait === 'none' && durability === 'aof' && findings.some((f) => f.wait === 'waitaof')) {
    return { durability, ok: false, wait: 'none', detail: 'the primaries differ in WAITAOF support: run one Redis version' };
  }
  return { durability, ok: true, wait, detail: findings[0]!.detail };
}

async function checkServer(server: Redis, durability: 'aof' | 'replica'): Promise<DurabilityPlan> {
  const where = `${server.options.host ?? '?'}:${server.options.port ?? '?'}`;
  if (durability === 'replica') {
    const replication = parseInfo(await server.info('replication'));
    const replicas = Number(replication['connected_slaves'] ?? 0);
    if (replication['role'] !== 'master') return { durability, ok: false, wait: 'wait', detail: `${where} is not a primary` };
    if (!(replicas >= 1)) return { durability, ok: false, wait: 'wait', detail: `${where} has no connected replica, so WAIT 1 cannot be acknowledged` };
    return { durability, ok: true, wait: 'wait', detail: `WAIT 1 after each write (${replicas} replica(s) connected to ${where})` };
  }
  const persistence = parseInfo(await server.info('persistence'));
  if (persistence['aof_enabled'] !== '1') {
    return { durability, ok: false, wait: 'none', detail: `${where} runs without an append-only file (set appendonly yes)` };
  }
  const version = parseInfo(await server.info('server'))['redis_version'] ?? '0';
  if (versionAtLeast(version, [7, 2])) return { durability, ok: true, wait: 'waitaof', detail: `WAITAOF 1 0 after each write (Redis ${version} at ${where})` };
  let fsync: string | undefined;
  try {
    const reply = (await server.config('GET', 'appendfsync')) as string[];
    fsync = reply[1];
  } catch {
    // CONFIG is often disabled on managed Redis: the setting cannot be read, so it cannot be relied on.
  }
  if (fsync === 'always') return { durability, ok: true, wait: 'none', detail: `appendfsync always (Redis ${version} at ${where} has no WAITAOF)` };
  return {
    durability,
    ok: false,
    wait: 'none',
    detail: `Redis ${version} at ${where} has no WAITAOF, and appendfsync is ${fsync ?? 'unreadable (CONFIG GET refused)'}: set appendfsync always, or run Redis 7.2 or later`,
  };
}

function parseInfo(text: string): Record<string, string> {
  const fields: Record<string, string> = {};
  for (const line of text.split(/\r?\n/)) {
    const colon = line.indexOf(':');
    if (colon > 0 && !line.startsWith('#')) fields[line.slice(0, colon)] = line.slice(colon + 1).trim();
  }
  return fields;
}

function versionAtLeast(version: string, [major, minor]: [number, number]): boolean {
  const [a = 0, b = 0] = version.split('.').map(Number);
  return a > major || (a === major && b >= minor);
}
