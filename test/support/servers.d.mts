/**
 * Types for servers.mjs, so TypeScript test helpers (test/helpers/redis.ts) can start a Redis
 * topology of their own. Only what TypeScript callers use is declared.
 */
export type Log = (line: string) => void;

export type NotStarted =
  /** Nothing to start: no binaries. */
  | { ok: false; failed: false; reason: string }
  /** Binaries found, but the servers did not start; logTail holds each server's last log lines. */
  | { ok: false; failed: true; reason: string; logTail: string };

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
    /** Stops this group's servers and removes their folders (a no-op for REDIS_SENTINELS). */
    stop(): Promise<void>;
  }
  | NotStarted;

export function freePort(): Promise<number>;
export function startRedisCluster(options: { log: Log; useEnv?: boolean }): Promise<RedisClusterOutcome>;
export function startRedisSentinel(options: { log: Log; useEnv?: boolean; masterName?: string }): Promise<RedisSentinelOutcome>;
export function stopServers(): Promise<void>;
