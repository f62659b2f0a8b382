/**
 * Whether the Redis servers can keep a durability mode, and how each write is acknowledged
 * (`checkDurabilityOf`), kept current while the store runs (`DurabilityKeeper`): replicas come
 * and go and primaries change, so the answer read at start does not last.
 *
 * - `aof`: `appendonly yes` on every primary, and either `WAITAOF 1 0` after each write (Redis
 *   7.2+) or `appendfsync always` (older Redis fsyncs before it answers);
 * - `replica`: `WAIT n` after each write, n being every replica that could be promoted
 *   (redis-replicas.ts says who that is and why one is not enough).
 *
 * @example
 *   const keeper = new DurabilityKeeper(() => checkDurabilityOf(client, 'replica', sentinels), () => client.disconnect(true));
 *   const plan = await keeper.current(); // { ok: true, wait: 'wait', replicas: { most: 2, … }, … }
 */
import type { Redis } from 'ioredis';
import { parseInfo, readReplicaRequirement, type ReplicaRequirement, type SentinelView } from './redis-replicas.js';
import { primariesOf, type RedisClient } from './redis-topology.js';
import type { DurabilityCheck, StoreDurability } from './types.js';

/** How each durability mode is kept after a write, once the servers were checked. */
export type DurabilityWait = 'none' | 'waitaof' | 'wait';

export interface DurabilityPlan extends DurabilityCheck {
  wait: DurabilityWait;
  /** With `wait: 'wait'`: how many replicas must acknowledge a write. */
  replicas?: ReplicaRequirement;
  /** The connection is on a server that is no longer the primary: it must reconnect. */
  moved?: boolean;
}

/**
 * Reads the servers' persistence and replication settings and says whether `durability` can be
 * kept, and how. `sentinels`: for a Sentinel topology, who decides which replica is promoted.
 */
export async function checkDurabilityOf(client: RedisClient, durability: StoreDurability, sentinels?: SentinelView): Promise<DurabilityPlan> {
  if (durability === 'none') return { durability, ok: true, wait: 'none', detail: 'no durability promised (development)' };
  if (durability === 'replica') {
    const reading = await readReplicaRequirement(client, sentinels);
    if (!reading.ok) return { durability, ok: false, wait: 'wait', detail: reading.detail, ...(reading.moved ? { moved: true } : {}) };
    return { durability, ok: true, wait: 'wait', detail: reading.detail, replicas: reading.requirement };
  }
  const primaries = primariesOf(client);
  if (primaries.length === 0) return { durability, ok: false, wait: 'none', detail: 'no primary is known' };
  const findings: DurabilityPlan[] = [];
  for (const server of primaries) findings.push(await checkAof(server));
  const failed = findings.find((finding) => !finding.ok);
  if (failed) return failed;
  // Every primary runs the same version in practice; if one lacks WAITAOF, none is used.
  const wait = findings.every((finding) => finding.wait === findings[0]!.wait) ? findings[0]!.wait : 'none';
  if (wait === 'none' && findings.some((f) => f.wait === 'waitaof')) {
    return { durability, ok: false, wait: 'none', detail: 'the primaries differ in WAITAOF support: run one Redis version' };
  }
  return { durability, ok: true, wait, detail: findings[0]!.detail };
}

async function checkAof(server: Redis): Promise<DurabilityPlan> {
  const durability = 'aof';
  const where = `${server.options.host ?? '?'}:${server.options.port ?? '?'}`;
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

function versionAtLeast(version: string, [major, minor]: [number, number]): boolean {
  const [a = 0, b = 0] = version.split('.').map(Number);
  return a > major || (a === major && b >= minor);
}

/** A plan that held is read again in the background after this long (replicas added or lost). */
const PLAN_MAX_AGE_MS = 1000;
/** A plan that failed is read again, awaited, after this long. */
const FAILED_PLAN_MAX_AGE_MS = 250;
/** A connection found on a demoted primary is moved at most this often. */
const MOVE_INTERVAL_MS = 1000;

/**
 * The durability plan the next write follows: read on first use and after `forget()` (a new
 * connection, perhaps to another server); a plan that held is refreshed in the background every
 * second, so a write never waits for the read; a plan that failed is read again before the next
 * write once it is 250 ms old. A background read that fails keeps the plan it had: the
 * acknowledgement of each write is what establishes durability, the plan only says what to ask.
 */
export class DurabilityKeeper {
  readonly #read: () => Promise<DurabilityPlan>;
  readonly #onMoved: () => void;
  #plan: { value: Promise<DurabilityPlan>; readAtMs: number } | undefined;
  #refreshing = false;
  #movedAtMs = 0;
  /** Counts forget() calls, so a read begun before one is not kept after it. */
  #generation = 0;

  constructor(read: () => Promise<DurabilityPlan>, onMoved: () => void) {
    this.#read = read;
    this.#onMoved = onMoved;
  }

  /** Reads the plan now (the start-up check), and keeps it. */
  async check(): Promise<DurabilityPlan> {
    return this.#start().value;
  }

  async current(): Promise<DurabilityPlan> {
    const known = this.#plan;
    if (!known) return this.#start().value;
    const plan = await known.value;
    const age = Date.now() - known.readAtMs;
    if (!plan.ok && age >= FAILED_PLAN_MAX_AGE_MS) return this.#start().value;
    if (plan.ok && age >= PLAN_MAX_AGE_MS) this.#refreshInBackground();
    return plan;
  }

  forget(): void {
    this.#plan = undefined;
    this.#generation++;
  }

  #start(): { value: Promise<DurabilityPlan>; readAtMs: number } {
    const entry = { value: this.#read(), readAtMs: Date.now() };
    this.#plan = entry;
    // A read that failed (Redis unreachable) is not remembered: the next write asks again.
    entry.value.then((plan) => this.#moveIfNeeded(plan), () => {
      if (this.#plan === entry) this.#plan = undefined;
    });
    return entry;
  }

  #refreshInBackground(): void {
    if (this.#refreshing) return;
    this.#refreshing = true;
    const generation = this.#generation;
    this.#read().then(
      (plan) => {
        if (generation !== this.#generation) return;
        this.#plan = { value: Promise.resolve(plan), readAtMs: Date.now() };
        this.#moveIfNeeded(plan);
      },
      () => undefined,
    ).finally(() => (this.#refreshing = false));
  }

  #moveIfNeeded(plan: DurabilityPlan): void {
    if (!plan.moved || Date.now() - this.#movedAtMs < MOVE_INTERVAL_MS) return;
    this.#movedAtMs = Date.now();
    this.#onMoved();
  }
}
