/**
 * How many replicas must acknowledge a write under `replica` durability: every replica that could
 * become the primary. `WAIT 1` is not enough once a primary has two replicas: in a switchover the
 * old primary keeps taking writes that the replica which is *not* promoted acknowledges, and that
 * replica then drops them when it follows the new primary. Waiting for every promotable replica
 * means that whichever one is promoted holds every acknowledged write, and that the old primary
 * cannot have a write acknowledged once the promoted replica has left it.
 *
 * Who could be promoted is read from whoever promotes:
 * - Sentinel: the replicas Sentinel lists for the primary, reporting the replica role and not
 *   marked down (Sentinel promotes none of those it marks down). The connection must be on the
 *   server Sentinel names as the primary (compared by run id), else the requirement is not met:
 *   the gate is on a demoted (or being demoted) primary and must move.
 * - Cluster: per primary, its replicas in `CLUSTER NODES` not marked `fail`.
 * - One server with replicas: the replicas connected to it (nothing promotes them by itself).
 *
 * @example
 *   const sentinels = new SentinelView(topology, 1000);
 *   const reading = await readReplicaRequirement(client, sentinels); // { ok: true, requirement: { byPrimary: {}, most: 2 }, detail: … }
 *   requiredReplicas(reading.requirement, undefined); // 2
 */
import { Redis } from 'ioredis';
import type { Cluster } from 'ioredis';

/** What the Sentinel connection needs of the store's Sentinel topology. */
export interface SentinelAddressing {
  sentinels: { host: string; port: number }[];
  name: string;
  sentinelPassword?: string;
  tls?: boolean;
}

export interface ReplicaRequirement {
  /** For a Cluster: replicas that must acknowledge, per primary `host:port`. */
  byPrimary: Record<string, number>;
  /** For one primary, and for a Cluster primary not listed (its slots just moved): the most any primary needs. */
  most: number;
}

export type ReplicaReading =
  | { ok: true; requirement: ReplicaRequirement; detail: string }
  /** `moved`: Sentinel names another server as the primary; the connection must follow it. */
  | { ok: false; detail: string; moved?: boolean };

/** The replicas that must acknowledge a write to the primary at `primary` (`host:port`; undefined: the one primary). */
export function requiredReplicas(requirement: ReplicaRequirement, primary: string | undefined): number {
  return (primary !== undefined ? requirement.byPrimary[primary] : undefined) ?? requirement.most;
}

/**
 * One connection to the Sentinels, kept open and moved to the next Sentinel when one fails, for
 * Sentinel commands; and, with `watchSwitches`, a subscription to every Sentinel's
 * `+switch-master` messages. The data connection is ioredis's own.
 */
export class SentinelView {
  readonly name: string;
  readonly #topology: SentinelAddressing;
  readonly #timeoutMs: number;
  #client: Redis | undefined;
  #next = 0;
  #closed = false;
  readonly #subscribers: Redis[] = [];

  constructor(topology: SentinelAddressing, timeoutMs: number) {
    this.#topology = topology;
    this.name = topology.name;
    this.#timeoutMs = timeoutMs;
  }

  /** One Sentinel command, from the first Sentinel that answers. */
  async call(...args: [string, ...string[]]): Promise<unknown> {
    let lastError: unknown;
    for (let tried = 0; tried < this.#topology.sentinels.length; tried++) {
      if (this.#closed) throw new Error('closed');
      const client = this.#connection();
      try {
        return await client.call(...args);
      } catch (error) {
        lastError = error;
        // This Sentinel failed: the next call starts with the next one.
        client.disconnect();
        this.#client = undefined;
        this.#next = (this.#next + 1) % this.#topology.sentinels.length;
      }
    }
    throw lastError instanceof Error ? lastError : new Error('no Sentinel answered');
  }

  /**
   * Calls `onSwitch` when any Sentinel announces a new primary for this name. Every Sentinel is
   * listened to, so one that is down does not hide the announcement; each reconnects by itself.
   */
  watchSwitches(onSwitch: () => void): void {
    // Every Sentinel announces the same switch: it is acted on once.
    let lastSwitch = '';
    for (const sentinel of this.#topology.sentinels) {
      const subscriber = this.#connect(sentinel, { retryStrategy: (attempt) => Math.min(100 * 2 ** Math.min(attempt, 5), 2000), enableOfflineQueue: true });
      subscriber.on('message', (_channel: string, message: string) => {
        // "<name> <old ip> <old port> <new ip> <new port>"
        if (message.split(' ')[0] !== this.name || message === lastSwitch) return;
        lastSwitch = message;
        onSwitch();
      });
      subscriber.subscribe('+switch-master').catch(() => undefined);
      this.#subscribers.push(subscriber);
    }
  }

  close(): void {
    this.#closed = true;
    this.#client?.disconnect();
    this.#client = undefined;
    for (const subscriber of this.#subscribers.splice(0)) subscriber.disconnect();
  }

  #connection(): Redis {
    if (this.#client) return this.#client;
    const sentinel = this.#topology.sentinels[this.#next];
    if (!sentinel) throw new Error('no Sentinel is configured');
    // Replaced on failure, never retried in the background.
    this.#client = this.#connect(sentinel, { retryStrategy: () => null, enableOfflineQueue: true, commandTimeout: this.#timeoutMs });
    return this.#client;
  }

  #connect(
    sentinel: { host: string; port: number },
    options: { retryStrategy: (attempt: number) => number | null; enableOfflineQueue: boolean; commandTimeout?: number },
  ): Redis {
    const client = new Redis({
      host: sentinel.host,
      port: sentinel.port,
      ...(this.#topology.sentinelPassword ? { password: this.#topology.sentinelPassword } : {}),
      ...(this.#topology.tls ? { tls: {} } : {}),
      connectTimeout: this.#timeoutMs,
      maxRetriesPerRequest: 0,
      ...options,
    });
    // A Sentinel that is down is expected; the other Sentinels answer meanwhile.
    client.on('error', () => undefined);
    return client;
  }
}

/** Reads who could be promoted, and so how many replicas must acknowledge each write. */
export async function readReplicaRequirement(client: Redis | Cluster, sentinels: SentinelView | undefined): Promise<ReplicaReading> {
  if (client.isCluster) return clusterRequirement(String(await client.call('CLUSTER', 'NODES')));
  const replication = parseInfo(await client.info('replication'));
  if (replication['role'] !== 'master') return { ok: false, detail: 'the server is not a primary', moved: sentinels !== undefined };
  if (sentinels) return sentinelRequirement(client, sentinels);
  const connected = Number(replication['connected_slaves'] ?? 0);
  if (!(connected >= 1)) return { ok: false, detail: 'the primary has no connected replica' };
  return { ok: true, requirement: { byPrimary: {}, most: connected }, detail: `WAIT ${connected}: every connected replica` };
}

async function sentinelRequirement(client: Redis | Cluster, sentinels: SentinelView): Promise<ReplicaReading> {
  const [master, replicas, server] = await Promise.all([
    sentinels.call('SENTINEL', 'MASTER', sentinels.name),
    sentinels.call('SENTINEL', 'REPLICAS', sentinels.name),
    client.info('server'),
  ]);
  const masterFields = fieldsOf(master);
  const runId = parseInfo(server)['run_id'];
  if (masterFields['runid'] && runId && masterFields['runid'] !== runId) {
    return { ok: false, detail: `Sentinel names ${masterFields['ip']}:${masterFields['port']} as the primary, not this server`, moved: true };
  }
  const promotable = (Array.isArray(replicas) ? replicas : []).map(fieldsOf).filter((replica) => {
    const flags = (replica['flags'] ?? '').split(',');
    return replica['role-reported'] === 'slave' && !flags.some((flag) => flag === 's_down' || flag === 'o_down' || flag === 'disconnected');
  });
  if (promotable.length === 0) return { ok: false, detail: 'Sentinel knows no replica it could promote' };
  const count = promotable.length;
  return { ok: true, requirement: { byPrimary: {}, most: count }, detail: `WAIT ${count}: every replica Sentinel could promote` };
}

/** `CLUSTER NODES`: per primary, its replicas not marked `fail`. */
export function clusterRequirement(nodes: string): ReplicaReading {
  const primaries = new Map<string, string>();
  const counts = new Map<string, number>();
  const lines = nodes.split('\n').map((line) => line.trim().split(' ')).filter((fields) => fields.length >= 8);
  for (const [id, address, flags] of lines) {
    const flagList = (flags ?? '').split(',');
    if (flagList.includes('master') && !flagList.includes('fail') && id && address) primaries.set(id, address.split('@')[0]!);
  }
  for (const [, , flags, masterId] of lines) {
    const flagList = (flags ?? '').split(',');
    if (flagList.includes('slave') && !flagList.includes('fail') && !flagList.includes('noaddr') && masterId) {
      counts.set(masterId, (counts.get(masterId) ?? 0) + 1);
    }
  }
  const byPrimary: Record<string, number> = {};
  for (const [id, address] of primaries) {
    const count = counts.get(id) ?? 0;
    if (count === 0) return { ok: false, detail: `the cluster primary ${address} has no replica` };
    byPrimary[address] = count;
  }
  const values = Object.values(byPrimary);
  if (values.length === 0) return { ok: false, detail: 'no cluster primary is known' };
  const most = Math.max(...values);
  return { ok: true, requirement: { byPrimary, most }, detail: `WAIT for every replica of the key's primary (${Math.min(...values)} to ${most})` };
}

/** A flat [field, value, …] reply as an object. */
function fieldsOf(reply: unknown): Record<string, string> {
  const fields: Record<string, string> = {};
  if (Array.isArray(reply)) for (let i = 0; i + 1 < reply.length; i += 2) fields[String(reply[i])] = String(reply[i + 1]);
  return fields;
}

export function parseInfo(text: string): Record<string, string> {
  const fields: Record<string, string> = {};
  for (const line of text.split(/\r?\n/)) {
    const colon = line.indexOf(':');
    if (colon > 0 && !line.startsWith('#')) fields[line.slice(0, colon)] = line.slice(colon + 1).trim();
  }
  return fields;
}
