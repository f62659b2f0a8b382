/**
 * Redis for tests: the URL of the test Redis (from REDIS_URL) and a random key prefix per use,
 * so test files running in parallel against one Redis never see each other's keys. Also the test
 * Redis Cluster and Sentinel group, and Sentinel failover (see the second half of this file).
 *
 * @example
 *   const url = redisUrl();
 *   if (!url) t.comment(`Redis variant not run: ${REDIS_NOT_RUN_REASON}`);
 *   else {
 *     const prefix = uniquePrefix();
 *     const store = new RedisStore({ url, keyPrefix: prefix });
 *     t.teardown(() => deleteKeys(url, prefix));
 *   }
 */
import { randomUUID } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import { Cluster, Redis } from 'ioredis';
import { startRedisSentinel } from '../support/redis-topologies.mjs';
import type { RedisNodeProcess } from '../support/redis-topologies.mjs';

/**
 * The command timeout for RedisStores on the shared test Redis. A consume that reaches Redis after
 * its deadline (a share of this timeout) is refused as unavailable, which is right, but the suites
 * that use the shared Redis count replays and records, not deadlines (those have their own tests
 * with their own timeouts): hundreds of verifications at once on a busy 2-core machine can take
 * longer than the product's default second.
 */
export const TEST_COMMAND_TIMEOUT_MS = 10_000;

/** Why Redis-backed tests did not run; printed with a comment instead of a silent skip. */
export const REDIS_NOT_RUN_REASON =
  'REDIS_URL is not set: start redis-server or run `npm test`, which starts one';

/** The test Redis, or undefined when REDIS_URL is unset or empty. */
export function redisUrl(): string | undefined {
  const url = process.env['REDIS_URL']?.trim();
  return url ? url : undefined;
}

/** A key prefix no other test uses: `test:<uuid>:`. */
export function uniquePrefix(): string {
  return `test:${randomUUID()}:`;
}

/** Removes every key under `prefix`, so a developer's Redis does not fill up with test streams. */
export async function deleteKeys(url: string, prefix: string): Promise<void> {
  const client = new Redis(url, { lazyConnect: true, maxRetriesPerRequest: 1 });
  client.on('error', () => {});
  try {
    await client.connect();
    let cursor = '0';
    do {
      const [next, keys] = await client.scan(cursor, 'MATCH', `${prefix}*`, 'COUNT', 500);
      cursor = next;
      if (keys.length > 0) await client.unlink(...keys);
    } while (cursor !== '0');
  } finally {
    client.disconnect();
  }
}

/* ---------------------------------------------------------------------------------------------
 * Redis Cluster and Redis Sentinel. `npm test` (test/run.mjs) starts a shared 3-primary cluster
 * and a shared Sentinel group and passes them to every test process as REDIS_CLUSTER_NODES and
 * REDIS_SENTINELS / REDIS_SENTINEL_MASTER. Test files run in parallel against the shared ones, so
 * they use unique key prefixes like above, and they never fail the shared group over: a failover
 * test starts a group of its own with startSentinelGroup() (about 2 s) and fails that one over.
 * ------------------------------------------------------------------------------------------- */

/** Why cluster-backed tests did not run. */
export const REDIS_CLUSTER_NOT_RUN_REASON =
  'REDIS_CLUSTER_NODES is not set: install redis-server and redis-cli and run `npm test`, which ' +
  'starts a 3-primary Redis Cluster, or set it to the cluster nodes (host:port,host:port,…)';

/** Why Sentinel-backed tests did not run. */
export const REDIS_SENTINEL_NOT_RUN_REASON =
  'REDIS_SENTINELS is not set: install redis-server and redis-sentinel and run `npm test`, which ' +
  'starts a Sentinel group, or set it (host:port,…) and REDIS_SENTINEL_MASTER';

/** Why a test's own Sentinel group (startSentinelGroup) could not be started. */
export const SENTINEL_GROUP_NOT_RUN_REASON =
  'no redis-server binary on PATH: install redis-server and redis-sentinel to run Sentinel failover tests';

export interface HostPort {
  host: string;
  port: number;
}

/** What an ioredis Sentinel client needs: `new Redis({ sentinels, name })`. */
export interface SentinelAddress {
  sentinels: HostPort[];
  name: string;
}

/** `host:port` or `[v6]:port` as ioredis wants it. */
export function parseHostPort(entry: string): HostPort {
  const colon = entry.lastIndexOf(':');
  const port = Number(entry.slice(colon + 1));
  if (colon <= 0 || !Number.isInteger(port)) throw new Error(`"${entry}" is not host:port`);
  return { host: entry.slice(0, colon).replace(/^\[(.*)\]$/, '$1'), port };
}

function addressList(variable: string): string[] | undefined {
  const list = (process.env[variable] ?? '').split(',').map((s) => s.trim()).filter(Boolean);
  return list.length > 0 ? list : undefined;
}

/** The test cluster's nodes (`host:port`), or undefined when REDIS_CLUSTER_NODES is unset or empty. */
export function redisClusterNodes(): string[] | undefined {
  return addressList('REDIS_CLUSTER_NODES');
}

/**
 * The shared test Sentinel group, or undefined when REDIS_SENTINELS is unset or empty. Shared by
 * every test file: never fail it over (see startSentinelGroup).
 */
export function redisSentinels(): SentinelAddress | undefined {
  const list = addressList('REDIS_SENTINELS');
  if (!list) return undefined;
  return { sentinels: list.map(parseHostPort), name: process.env['REDIS_SENTINEL_MASTER']?.trim() || 'countersign' };
}

/** Removes every key under `prefix` on every primary of the cluster (SCAN is per node). */
export async function deleteClusterKeys(nodes: string[], prefix: string): Promise<void> {
  const cluster = new Cluster(nodes.map(parseHostPort), { lazyConnect: true, redisOptions: { maxRetriesPerRequest: 1 } });
  cluster.on('error', () => {});
  try {
    await cluster.connect();
    await Promise.all(cluster.nodes('master').map(async (node) => {
      let cursor = '0';
      do {
        const [next, keys] = await node.scan(cursor, 'MATCH', `${prefix}*`, 'COUNT', 500);
        cursor = next;
        // One UNLINK per key: keys of different slots in one command are refused (CROSSSLOT),
        // even on the node that holds them all.
        if (keys.length > 0) {
          const pipeline = node.pipeline();
          for (const key of keys) pipeline.unlink(key);
          await pipeline.exec();
        }
      } while (cursor !== '0');
    }));
  } finally {
    cluster.disconnect();
  }
}

/** A Sentinel group of one's own, started in this test process. */
export interface SentinelGroup extends SentinelAddress {
  /** The primary and replicas at start (after a failover one of the replicas is the primary). */
  primary: RedisNodeProcess;
  replica: RedisNodeProcess;
  replicas: RedisNodeProcess[];
  /** Stops the group and removes its folders; put it in t.teardown. */
  stop(): Promise<void>;
}

/**
 * Starts a Sentinel group (primary, replica, three sentinels; master name `countersign`) for this
 * test alone, so it can be failed over without disturbing test files that use the shared group.
 * Resolves `{ ok: false, reason }` when redis-server is not installed (comment and return); throws
 * when it is installed but the group does not start.
 *
 * @example
 *   const started = await startSentinelGroup();
 *   if (!started.ok) { t.comment(`not run: ${started.reason}`); return; }
 *   const group = started.group;
 *   t.teardown(() => group.stop());
 *   const client = new Redis({ sentinels: group.sentinels, name: group.name });
 *   const { newPrimary } = await failoverSentinelPrimary(group);
 */
export async function startSentinelGroup(
  log: (line: string) => void = () => {},
  { replicas = 1 }: { replicas?: number } = {},
): Promise<{ ok: true; group: SentinelGroup } | { ok: false; reason: string }> {
  const outcome = await startRedisSentinel({ log, useEnv: false, replicas });
  if (!outcome.ok) {
    if (!outcome.failed) return { ok: false, reason: SENTINEL_GROUP_NOT_RUN_REASON };
    throw new Error(`could not start a Redis Sentinel group: ${outcome.reason}\n${outcome.logTail}`);
  }
  if (!outcome.primary || !outcome.replica) throw new Error('startRedisSentinel started a group without reporting its processes');
  return {
    ok: true,
    group: {
      sentinels: outcome.sentinels.map(parseHostPort),
      name: outcome.masterName,
      primary: outcome.primary,
      replica: outcome.replica,
      replicas: outcome.replicas ?? [outcome.replica],
      stop: outcome.stop,
    },
  };
}

/** A short-lived client for one command to a sentinel or a data node; never retries. */
async function callOnce(address: HostPort, ...args: [string, ...(string | number)[]]): Promise<unknown> {
  const client = new Redis({
    ...address,
    lazyConnect: true,
    connectTimeout: 2_000,
    commandTimeout: 2_000,
    maxRetriesPerRequest: 0,
    retryStrategy: () => null,
    enableReadyCheck: false,
  });
  client.on('error', () => {});
  try {
    await client.connect();
    return await client.call(...args);
  } finally {
    client.disconnect();
  }
}

/** What each sentinel reports as the master's address (`unreachable` for one that did not answer). */
async function sentinelAnswers(group: SentinelAddress): Promise<string[]> {
  return Promise.all(group.sentinels.map(async (sentinel) => {
    try {
      const reply = await callOnce(sentinel, 'SENTINEL', 'GET-MASTER-ADDR-BY-NAME', group.name);
      return Array.isArray(reply) && reply.length === 2 ? `${reply[0]}:${reply[1]}` : 'no master';
    } catch {
      return 'unreachable';
    }
  }));
}

/** The master's address as the sentinels report it; throws when none answers. */
export async function sentinelPrimary(group: SentinelAddress): Promise<HostPort> {
  const answer = (await sentinelAnswers(group)).find((a) => a !== 'unreachable' && a !== 'no master');
  if (!answer) throw new Error(`no sentinel of ${group.sentinels.map((s) => `${s.host}:${s.port}`).join(', ')} knows master ${group.name}`);
  return parseHostPort(answer);
}

const FAILOVER_TIMEOUT_MS = 60_000;

/**
 * Takes the group's current primary away and waits (bounded) until every sentinel reports a new
 * master address and that node says it is a master. `how`:
 *   'shutdown' (default) SHUTDOWN NOSAVE NOW FORCE: the primary is gone, as after a crash;
 *   'switchover'         SENTINEL FAILOVER: a planned switchover, as operators run for
 *                        maintenance; the old primary keeps running and is made a replica;
 *   'stall'              DEBUG SLEEP `stallSeconds` (default 15): a hung primary, which comes back
 *                        afterwards and is turned into a replica by the sentinels.
 * Only for a group of one's own (startSentinelGroup), never the shared REDIS_SENTINELS group:
 * test files run in parallel and others would see the failover.
 */
export async function failoverSentinelPrimary(
  group: SentinelAddress,
  { how = 'shutdown', stallSeconds = 15 }: { how?: 'shutdown' | 'stall' | 'switchover'; stallSeconds?: number } = {},
): Promise<{ oldPrimary: HostPort; newPrimary: HostPort }> {
  const oldPrimary = await sentinelPrimary(group);
  const old = `${oldPrimary.host}:${oldPrimary.port}`;
  let refused: string | undefined;
  const client = new Redis({ ...oldPrimary, maxRetriesPerRequest: 0, retryStrategy: () => null, enableOfflineQueue: false, lazyConnect: true });
  client.on('error', () => {});
  try {
    await client.connect();
    if (how === 'switchover') {
      const sentinel = group.sentinels[0];
      if (!sentinel) throw new Error('the group has no sentinel');
      await callOnce(sentinel, 'SENTINEL', 'FAILOVER', group.name);
    } else if (how === 'shutdown') {
      // No reply comes: the server closes the connection. A reply error means it refused.
      await client.call('SHUTDOWN', 'NOSAVE', 'NOW', 'FORCE').catch((err: unknown) => {
        // ioredis types ReplyError as any, so the name tells it from "Connection is closed".
        if (err instanceof Error && err.name === 'ReplyError') throw new Error(`${old} refused SHUTDOWN: ${err.message}`);
      });
    } else {
      // Not awaited: the reply only comes when the sleep ends. A refusal (enable-debug-command
      // off) comes at once and ends the wait below.
      client.call('DEBUG', 'SLEEP', String(stallSeconds)).catch((err: unknown) => {
        if (err instanceof Error && err.name === 'ReplyError') refused = `${old} refused DEBUG SLEEP: ${err.message}`;
      });
    }
    const deadline = Date.now() + FAILOVER_TIMEOUT_MS;
    let answers: string[] = [];
    while (Date.now() < deadline) {
      if (refused) throw new Error(refused);
      answers = await sentinelAnswers(group);
      const first = answers[0];
      if (first && first !== old && !['unreachable', 'no master'].includes(first) && answers.every((a) => a === first)) {
        const newPrimary = parseHostPort(first);
        const role = await callOnce(newPrimary, 'ROLE').catch(() => undefined);
        if (Array.isArray(role) && role[0] === 'master') return { oldPrimary, newPrimary };
      }
      await sleep(100);
    }
    throw new Error(
      `no failover of ${group.name} away from ${old} within ${FAILOVER_TIMEOUT_MS / 1000} s; sentinels report: ${answers.join(', ')}`,
    );
  } finally {
    client.disconnect();
  }
}
