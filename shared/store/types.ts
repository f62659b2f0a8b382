/**
 * The state that every authority replica and every proxy replica must share: consume-once
 * markers, revocations, rate-limit buckets and the verification-record stream. Redis in
 * production (`RedisStore`), an in-process implementation for the embedded single-process mode
 * (`MemoryStore`). Both pass one test suite (test/integration/shared-store.test.ts).
 *
 * Keys are logical names chosen by the caller; the store adds its own prefix. Keys that must be
 * touched together (a permit marker and its organization's stream) carry the same `{org}` hash
 * tag so they land in one Redis Cluster slot.
 */
export interface SharedStore {
  readonly kind: 'memory' | 'redis';

  /**
   * The gate's fence, revocation check and consume in one atomic step (one round trip to Redis).
   *
   * - With `options.fence`: when the store's epoch began after the permit was issued, the store may
   *   have lost the permit's consumption: `state_reset`, and nothing is marked or recorded.
   * - While a revocation of `key` lives: `revoked`, and the key is neither marked nor recorded.
   * - Otherwise it marks `key` as used for `ttlMs`: `consumed` for exactly one caller per key while
   *   the marker lives, `already_used` for every other. With `record`, the record is appended to
   *   its stream in the same atomic step, and only for the `consumed` caller.
   *
   * With `options.timeoutMs` (or `deadlineMs`) the call settles within about that long, and a
   * consume that reaches the store too late (a stalled Redis) changes nothing; once
   * `options.signal` aborts, the call rejects at once (`STORE_ABANDONED`) and a consume landing
   * afterwards is undone, marker and record. A caller that gave up never consumes.
   * A `consumed` result is as durable as the store's durability mode promises; when that cannot be
   * established the consume is undone where possible and the call rejects (`STORE_NOT_DURABLE`).
   */
  consumePermit(key: string, ttlMs: number, record?: RecordAppend, options?: ConsumeOptions): Promise<PermitConsumption>;

  /**
   * The epoch of `epochKey`'s state (ms since the epoch, on the store's clock), created now when
   * missing: the moment from which the store holds every consumption and revocation it was told
   * of. The authority calls it before it issues permits, so that their moment of issue (`iat_ms`)
   * follows the epoch.
   */
  ensureEpoch(epochKey: string): Promise<number>;

  /** Adds `id` to the revocation set for `ttlMs` (long enough to outlive what it revokes). */
  revoke(id: string, ttlMs: number): Promise<void>;
  isRevoked(id: string): Promise<boolean>;

  /**
   * Takes one token from the bucket `key`. `nowMs` is the caller's clock; a bucket never moves
   * backwards in time, so a replica with a slower clock cannot refill it twice.
   */
  takeToken(key: string, bucket: TokenBucketSpec, nowMs: number): Promise<TokenBucketResult>;

  /** Appends a record to a stream; resolves its id (ids increase within a stream). */
  appendRecord(stream: string, fields: Record<string, string>): Promise<string>;
  /**
   * Appends several records to one stream, in order, as one write with one durability
   * acknowledgement for all of them; resolves each record's outcome (its id, or why it is not
   * appended or not durable), in the order given. Rejects only on invalid fields.
   */
  appendRecords(stream: string, batch: ReadonlyArray<Record<string, string>>): Promise<PromiseSettledResult<string>[]>;
  /**
   * Up to `count` records with ids after `afterId` ('0' for the start), oldest first. With
   * durability `replica`, only from a primary that has every replica that could be promoted
   * (STORE_NOT_DURABLE otherwise): an old primary in a switchover may hold records that will not survive it.
   */
  readRecords(stream: string, afterId: string, count: number, options?: ReadRecordsOptions): Promise<StoredRecord[]>;
  /** How many records the stream holds: appended and not yet trimmed (the drain's backlog). */
  countRecords(stream: string): Promise<number>;
  /** Removes the records with ids up to and including `upToId` (they have been recorded elsewhere). */
  trimRecords(stream: string, upToId: string): Promise<void>;

  /**
   * Whether the store, as configured and as it is now, can keep its durability mode's promise
   * (persistence and replication settings read from the server). Rejects when unreachable.
   */
  checkDurability(): Promise<DurabilityCheck>;

  /** Rejects when the store cannot be reached. */
  ping(): Promise<void>;
  close(): Promise<void>;
}

/**
 * `consumed`: this caller is the one; `already_used`: another was; `revoked`: nobody may be;
 * `state_reset`: the permit predates the store's epoch, so its consumption may have been lost.
 */
export type PermitConsumption = 'consumed' | 'already_used' | 'revoked' | 'state_reset';

export interface ConsumeOptions {
  /** Refuse (`state_reset`) a permit issued before the epoch of `epochKey` began. */
  fence?: { epochKey: string; issuedAtMs: number };
  /** Settle within this long; a consume reaching the store later changes nothing. */
  timeoutMs?: number;
  /**
   * The caller's deadline (ms since the epoch, on this process's `Date.now` clock): the call
   * settles by then as well, whichever of the two ends first. Already passed: nothing is sent,
   * and the call rejects with `STORE_ABANDONED`.
   */
  deadlineMs?: number;
  /**
   * Aborted when the caller gives up (its client went away): the call rejects at once with
   * `STORE_ABANDONED`, and a consume that lands after that is undone, marker and record.
   */
  signal?: AbortSignal;
}

/**
 * What a `consumed` answer is worth when the store crashes right after it:
 * - `none`: nothing beyond Redis's own persistence settings (development);
 * - `aof`: the consume and its record are in the primary's fsynced append-only file
 *   (`WAITAOF 1 0` on Redis 7.2+, `appendfsync always` before);
 * - `replica`: at least one replica acknowledged them (`WAIT 1`).
 */
export type StoreDurability = 'none' | 'aof' | 'replica';
export const STORE_DURABILITIES: readonly StoreDurability[] = ['none', 'aof', 'replica'];

/** What `checkDurability` found: whether the store can keep the promise, and if not, why. */
export interface DurabilityCheck {
  durability: StoreDurability;
  ok: boolean;
  /** How the promise is kept (`WAITAOF`, `appendfsync always`, `WAIT`), or why it cannot be. */
  detail: string;
}

export interface RecordAppend {
  stream: string;
  fields: Record<string, string>;
}

export interface ReadRecordsOptions {
  /**
   * Only records appended at least this long ago (on the store's clock). A gate that appended a
   * `permit.verified` with its consume may still undo both when the consume does not count (not
   * durable in time, its caller gone, its answer lost); it decides within its consume timeout, so
   * a reader that waits longer than that never takes a record that is about to be withdrawn.
   * The in-process store ignores it: there, a consume and its undo are one step.
   */
  settledForMs?: number;
}

export interface StoredRecord {
  id: string;
  fields: Record<string, string>;
}

export interface TokenBucketSpec {
  /** Most tokens the bucket holds: the burst. */
  capacity: number;
  /** Tokens added per minute: the sustained rate. */
  refillPerMinute: number;
}

export interface TokenBucketResult {
  allowed: boolean;
  /** Whole tokens left after this call. */
  remaining: number;
  /** When the bucket will be full again (ms since the epoch). */
  resetAtMs: number;
  /** 0 when allowed; otherwise how long until one token is available. */
  retryAfterMs: number;
}
