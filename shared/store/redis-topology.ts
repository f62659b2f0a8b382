/**
 * How the Redis store reaches Redis: one server, a Sentinel-managed primary (failover), or a
 * Redis Cluster, through ioredis. Every topology gets the same fail-fast client settings (no
 * offline queue, no resending of commands in flight), because a command replayed after a
 * reconnect could consume a permit whose request was already refused.
 *
 * Also here: the servers' clock (the consume deadline is checked against Redis's `TIME`).
 *
 * @example
 *   const client = createRedisClient({ kind: 'sentinel', sentinels: [{ host: 's1', port: 26379 }], name: 'countersign' }, timeouts);
 *   const { offsetMs } = await measureClockOffset(client);
 */
import { Cluster, Redis } from 'ioredis';
import type { RedisOptions } from 'ioredis';

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
    // After a failover the old primary answers a write READONLY; reconnecting finds the new one.
    reconnectOnError: (error: Error) => error.message.startsWith('READONLY'),
  } satisfies RedisOptions;
  // One server or a Sentinel-managed primary: a demoted primary also answers a WAIT (after a read)
  // with this error. A Cluster finds its slots' new primaries itself, by refreshing its slot map.
  const followsDemotion = {
    reconnectOnError: (error: Error) => /^(READONLY|ERR WAIT cannot be used with replica)/.test(error.message),
  } satisfies RedisOptions;
  switch (topology.kind) {
    case 'single':
      return new Redis(topology.url, {
        ...failFast,
        ...followsDemotion,
        enableOfflineQueue: false,
        retryStrategy: reconnectDelay,
        enableAutoPipelining: false,
      });
    case 'sentinel':
      return new Redis({
        ...failFast,
        ...followsDemotion,
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
