/** Types for redis-topologies.mjs, for TypeScript test helpers (test/helpers/redis.ts). */
import type { Log, NotStarted } from './servers.mjs';

export interface RedisNodeProcess {
  host: string;
  port: number;
  pid: number | undefined;
}

export type RedisClusterOutcome =
  | {
    ok: true;
    /** `host:port` of every node (3 primaries when started here). */
    nodes: string[];
    fromEnv: boolean;
    /** Stops this cluster's servers and removes their folders (a no-op for REDIS_CLUSTER_NODES). */
    stop(): Promise<void>;
    /** Every node's process at start; only when started here. */
    processes?: RedisNodeProcess[];
    /** Starts the node on `port` again (same folder and nodes.conf); only when started here. */
    restartNode?(port: number): RedisNodeProcess;
  }
  | NotStarted;

export type RedisSentinelOutcome =
  | {
    ok: true;
    /** `host:port` of every sentinel. */
    sentinels: string[];
    masterName: string;
    fromEnv: boolean;
    /** The primary and replica at start; only when started here (not for REDIS_SENTINELS). */
    primary?: RedisNodeProcess;
    replica?: RedisNodeProcess;
    /** Every replica at start (`replica` is the first). */
    replicas?: RedisNodeProcess[];
    /** Stops this group's servers and removes their folders (a no-op for REDIS_SENTINELS). */
    stop(): Promise<void>;
  }
  | NotStarted;

export function startRedisCluster(options: { log: Log; useEnv?: boolean; replicasPerPrimary?: number; nodeTimeoutMs?: number }): Promise<RedisClusterOutcome>;

export function startRedisSentinel(options: { log: Log; useEnv?: boolean; masterName?: string; replicas?: number }): Promise<RedisSentinelOutcome>;
