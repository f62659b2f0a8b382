/**
 * The `store:` section of authority.yaml and proxy.yaml: how to reach Redis (one server from
 * `redis_url`, Sentinel or Cluster) and what a consume must be worth when Redis crashes. One
 * schema for both processes, since they share the store and must keep the same promise.
 *
 * @example
 *   store:
 *     topology: sentinel
 *     sentinels: [redis-sentinel-0:26379, redis-sentinel-1:26379, redis-sentinel-2:26379]
 *     sentinel_name: countersign
 *     durability: replica
 */
import { z } from 'zod';
import type { RedisHost, RedisTopology } from './redis-topology.js';
import { STORE_DURABILITIES } from './types.js';

const HostAndPort = z
  .string()
  .regex(/^[^\s:]+:\d{1,5}$/, { message: 'host:port' })
  .transform((value): RedisHost => {
    const colon = value.lastIndexOf(':');
    return { host: value.slice(0, colon), port: Number(value.slice(colon + 1)) };
  });

export const StoreSettings = z
  .object({
    /** `single`: the server at redis_url; `sentinel` and `cluster` use the lists below. */
    topology: z.enum(['single', 'sentinel', 'cluster']).default('single'),
    sentinels: z.array(HostAndPort).min(1).optional(),
    /** The primary's name in the Sentinels' configuration. */
    sentinel_name: z.string().min(1).default('countersign'),
    /** Any of the cluster's nodes; the rest are discovered. */
    nodes: z.array(HostAndPort).min(1).optional(),
    tls: z.boolean().default(false),
    /**
     * `aof`: a consume counts once it is in the primary's fsynced append-only file; `replica`: once a
     * replica has it; `none`: nothing beyond Redis's own settings (development).
     */
    durability: z.enum(STORE_DURABILITIES as ['none', 'aof', 'replica']).default('aof'),
    /**
     * Start even when the store cannot keep `durability` (or it is `none`): the gap is logged at
     * every start and shown by countersign_store_durability_established 0.
     */
    accept_weaker_durability: z.boolean().default(false),
    /** The longest a consume, or any other store call, may take. */
    command_timeout_ms: z.number().int().min(50).max(30_000).default(1000),
  })
  .strict()
  .superRefine((store, ctx) => {
    if (store.topology === 'sentinel' && !store.sentinels) {
      ctx.addIssue({ code: 'custom', path: ['sentinels'], message: 'required with topology sentinel: the Sentinels as host:port' });
    }
    if (store.topology === 'cluster' && !store.nodes) {
      ctx.addIssue({ code: 'custom', path: ['nodes'], message: 'required with topology cluster: one or more nodes as host:port' });
    }
  });
export type StoreSettings = z.output<typeof StoreSettings>;
export type StoreSettingsInput = z.input<typeof StoreSettings>;

export const DEFAULT_STORE_SETTINGS: StoreSettings = StoreSettings.parse({});

/**
 * Environment variables that set fields of `store:` (they win over the file): the topology from
 * `REDIS_SENTINELS` (+ `REDIS_SENTINEL_NAME`) or `REDIS_CLUSTER_NODES` (comma-separated host:port),
 * `COUNTERSIGN_STORE_DURABILITY`, and `COUNTERSIGN_ACCEPT_WEAKER_DURABILITY=1`.
 */
export function storeSettingsWithEnv(fromFile: unknown, env: NodeJS.ProcessEnv): unknown {
  const store: Record<string, unknown> = typeof fromFile === 'object' && fromFile !== null ? { ...(fromFile as Record<string, unknown>) } : {};
  const list = (value: string) => value.split(',').map((item) => item.trim()).filter(Boolean);
  if (env.REDIS_SENTINELS) {
    store.topology = 'sentinel';
    store.sentinels = list(env.REDIS_SENTINELS);
    if (env.REDIS_SENTINEL_NAME) store.sentinel_name = env.REDIS_SENTINEL_NAME;
  } else if (env.REDIS_CLUSTER_NODES) {
    store.topology = 'cluster';
    store.nodes = list(env.REDIS_CLUSTER_NODES);
  }
  if (env.COUNTERSIGN_STORE_DURABILITY) store.durability = env.COUNTERSIGN_STORE_DURABILITY;
  if (env.COUNTERSIGN_ACCEPT_WEAKER_DURABILITY === '1' || env.COUNTERSIGN_ACCEPT_WEAKER_DURABILITY === 'true') {
    store.accept_weaker_durability = true;
  }
  return store;
}

/**
 * The Redis topology these settings describe, or undefined for the in-process store (topology
 * `single` without a URL). Passwords come from the environment (`REDIS_PASSWORD`, and
 * `REDIS_SENTINEL_PASSWORD` for the Sentinels), never from the file; a single server's are in its URL.
 */
export function redisTopologyOf(settings: StoreSettings, redisUrl: string | undefined, env: NodeJS.ProcessEnv = process.env): RedisTopology | undefined {
  const credentials = {
    ...(env.REDIS_USERNAME ? { username: env.REDIS_USERNAME } : {}),
    ...(env.REDIS_PASSWORD ? { password: env.REDIS_PASSWORD } : {}),
    ...(settings.tls ? { tls: true } : {}),
  };
  switch (settings.topology) {
    case 'single':
      return redisUrl ? { kind: 'single', url: redisUrl } : undefined;
    case 'sentinel':
      return {
        kind: 'sentinel',
        sentinels: settings.sentinels ?? [],
        name: settings.sentinel_name,
        ...credentials,
        ...(env.REDIS_SENTINEL_PASSWORD ? { sentinelPassword: env.REDIS_SENTINEL_PASSWORD } : {}),
      };
    case 'cluster':
      return { kind: 'cluster', nodes: settings.nodes ?? [], ...credentials };
  }
}
