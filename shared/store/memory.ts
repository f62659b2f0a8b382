/**
 * The in-process `SharedStore` for the embedded single-process mode and for tests. Everything
 * lives in this process, so it is only correct when exactly one process enforces consume-once and
 * rate limits; a deployment with replicas needs `RedisStore`.
 *
 * Its epoch is the moment it was created: a restart loses every marker and revocation, so permits
 * issued before it are fenced (`state_reset`), exactly as after a Redis restart without persistence.
 *
 * Bounded: consume-once markers and revocations are capped. When a cap is reached and nothing has
 * expired, writes reject with code `STORE_FULL` instead of evicting, because evicting a live
 * marker would let a permit be replayed and evicting a revocation would un-revoke it.
 *
 * @example
 *   const store = new MemoryStore();
 *   await store.consumePermit('permit:{org_1}:abc', 65_000); // 'consumed'
 *   await store.consumePermit('permit:{org_1}:abc', 65_000); // 'already_used'
 *
 *   // In tests, a hand-driven clock makes TTLs deterministic:
 *   let now = 1_700_000_000_000;
 *   const testStore = new MemoryStore({ now: () => now });
 *   now += 70_000; // every marker with a shorter TTL has expired
 */
import { LRUCache } from 'lru-cache';
import { takeFromBucket, assertBucketSpec, bucketResult, msUntilFull } from './token-bucket.js';
import type { TokenBucketState } from './token-bucket.js';
import { checkCount, checkFields, checkTtl, consumeBudgetMs, StoreError } from './store-errors.js';
import type {
  ConsumeOptions,
  DurabilityCheck,
  PermitConsumption,
  RecordAppend,
  SharedStore,
  ReadRecordsOptions,
  StoredRecord,
  TokenBucketResult,
  TokenBucketSpec,
} from './types.js';

export interface MemoryStoreOptions {
  /** Clock in ms since the epoch; TTLs and record ids follow it. Default `Date.now`. */
  now?: () => number;
  /** Most live consume-once markers. Default 1,000,000 (about 50 MB, allocated up front). */
  maxMarkers?: number;
  /** Most live revocations. Default 100,000. */
  maxRevocations?: number;
  /** Rate-limit buckets kept before full ones are swept and the oldest evicted. Default 100,000. */
  maxBuckets?: number;
}

interface BucketEntry {
  state: TokenBucketState;
  /** On the bucket's (the callers') clock: from then on the entry equals a fresh bucket. */
  fullAtMs: number;
}

interface StreamEntry {
  ms: number;
  seq: number;
  id: string;
  fields: Record<string, string>;
}

export class MemoryStore implements SharedStore {
  readonly kind = 'memory' as const;

  readonly #now: () => number;
  /** When this store's state began (its creation); every epoch key shares it. */
  readonly #epochMs: number;
  readonly #markers: LRUCache<string, true>;
  readonly #revocations: LRUCache<string, true>;
  readonly #buckets = new Map<string, BucketEntry>();
  readonly #maxBuckets: number;
  readonly #streams = new Map<string, StreamEntry[]>();
  readonly #lastIds = new Map<string, { ms: number; seq: number }>();
  #closed = false;

  constructor(options: MemoryStoreOptions = {}) {
    const now = options.now ?? Date.now;
    this.#now = now;
    this.#epochMs = now();
    // lru-cache treats an item whose start time is 0 as immortal; a test clock may well start at
    // 0, so such a reading is nudged to the smallest positive number (differences are unchanged).
    const perf = { now: () => now() || Number.MIN_VALUE };
    const cacheOptions = {
      perf,
      // 0: read the clock on every check. The default (1) caches the reading until a 1 ms timer
      // fires, so a test clock advanced synchronously would be ignored.
      ttlResolution: 0,
      // No autopurge timers (one per item); expired items are skipped on read and purged when
      // a cache is full.
      ttlAutopurge: false,
      // Bounded by maxSize (each item counts 1) rather than max: with max, lru-cache allocates its
      // arrays for every slot up front (tens of MB for a million markers) in each store created.
      sizeCalculation: () => 1,
    };
    this.#markers = new LRUCache<string, true>({ ...cacheOptions, maxSize: options.maxMarkers ?? 1_000_000 });
    this.#revocations = new LRUCache<string, true>({ ...cacheOptions, maxSize: options.maxRevocations ?? 100_000 });
    this.#maxBuckets = options.maxBuckets ?? 100_000;
  }

  async consumePermit(key: string, ttlMs: number, record?: RecordAppend, options: ConsumeOptions = {}): Promise<PermitConsumption> {
    // Single-threaded: from here to the return there is no await, so the fence, the revocation
    // check and the check-and-set are one atomic step (and nothing can arrive late). Only a
    // caller that had given up before the call is refused.
    this.#assertOpen();
    consumeBudgetMs(options, Infinity);
    const ttl = checkTtl(ttlMs);
    if (record) checkFields(record.fields);
    if (options.fence && options.fence.issuedAtMs < this.#epochMs) return 'state_reset';
    if (this.#revocations.has(key)) return 'revoked';
    if (this.#markers.has(key)) return 'already_used';
    reserve(this.#markers, 'consume-once markers');
    this.#markers.set(key, true, { ttl });
    if (record) this.#append(record.stream, record.fields);
    return 'consumed';
  }

  async ensureEpoch(_epochKey: string): Promise<number> {
    this.#assertOpen();
    return this.#epochMs;
  }

  /** Nothing outlives the process: the in-process store promises `none`, and keeps it. */
  async checkDurability(): Promise<DurabilityCheck> {
    this.#assertOpen();
    return { durability: 'none', ok: true, detail: 'the in-process store keeps its state in memory only' };
  }

  async revoke(id: string, ttlMs: number): Promise<void> {
    this.#assertOpen();
    const ttl = checkTtl(ttlMs);
    if (!this.#revocations.has(id)) reserve(this.#revocations, 'revocations');
    this.#revocations.set(id, true, { ttl });
  }

  async isRevoked(id: string): Promise<boolean> {
    this.#assertOpen();
    return this.#revocations.has(id);
  }

  async takeToken(key: string, bucket: TokenBucketSpec, nowMs: number): Promise<TokenBucketResult> {
    this.#assertOpen();
    assertBucketSpec(bucket, nowMs);
    const entry = this.#buckets.get(key);
    const step = takeFromBucket(entry?.state, bucket, nowMs);
    // Delete before set so Map order is least recently used first, for eviction.
    this.#buckets.delete(key);
    this.#buckets.set(key, {
      state: step.state,
      fullAtMs: step.state.updatedAtMs + msUntilFull(step.state, bucket),
    });
    if (this.#buckets.size > this.#maxBuckets) this.#shrinkBuckets(nowMs);
    return bucketResult(step, bucket);
  }

  async appendRecord(stream: string, fields: Record<string, string>): Promise<string> {
    this.#assertOpen();
    checkFields(fields);
    return this.#append(stream, fields);
  }

  async appendRecords(stream: string, batch: ReadonlyArray<Record<string, string>>): Promise<PromiseSettledResult<string>[]> {
    for (const fields of batch) checkFields(fields);
    try {
      this.#assertOpen();
    } catch (error) {
      return batch.map(() => ({ status: 'rejected', reason: error }));
    }
    return batch.map((fields) => ({ status: 'fulfilled', value: this.#append(stream, fields) }));
  }

  async readRecords(stream: string, afterId: string, count: number, _options?: ReadRecordsOptions): Promise<StoredRecord[]> {
    this.#assertOpen();
    checkCount(count);
    const entries = this.#streams.get(stream) ?? [];
    const after = afterId === '0' ? { ms: 0, seq: -1 } : parseStreamId(afterId);
    // Ids are strictly increasing, so binary-search the first entry after `after`.
    let lo = 0;
    let hi = entries.length;
    while (lo < hi) {
      const mid = (lo + hi) >>> 1;
      const entry = entries[mid]!;
      if (compareIds(entry, after) > 0) hi = mid;
      else lo = mid + 1;
    }
    return entries.slice(lo, lo + count).map((e) => ({ id: e.id, fields: { ...e.fields } }));
  }

  async countRecords(stream: string): Promise<number> {
    this.#assertOpen();
    return this.#streams.get(stream)?.length ?? 0;
  }

  async trimRecords(stream: string, upToId: string): Promise<void> {
    this.#assertOpen();
    const entries = this.#streams.get(stream);
    if (!entries) return;
    const upTo = parseStreamId(upToId);
    const keep = entries.filter((entry) => compareIds(entry, upTo) > 0);
    if (keep.length === 0) this.#streams.delete(stream);
    else this.#streams.set(stream, keep);
  }

  async ping(): Promise<void> {
    this.#assertOpen();
  }

  /** Drops all state. Idempotent: a second call resolves, every other method rejects. */
  async close(): Promise<void> {
    this.#closed = true;
    this.#markers.clear();
    this.#revocations.clear();
    this.#buckets.clear();
    this.#streams.clear();
    this.#lastIds.clear();
  }

  #assertOpen(): void {
    if (this.#closed) throw new StoreError('STORE_CLOSED', 'the shared store is closed');
  }

  /** Redis XADD semantics: `<ms>-<seq>`, ms from the clock but never below the last id's. */
  #append(stream: string, fields: Record<string, string>): string {
    let entries = this.#streams.get(stream);
    if (!entries) {
      entries = [];
      this.#streams.set(stream, entries);
    }
    // The last id is kept apart from the entries: a trimmed (even emptied) stream must never hand
    // out an id it already gave, or a reader past that id would skip the new record.
    const last = this.#lastIds.get(stream);
    const clockMs = Math.max(0, Math.floor(this.#now()));
    let ms = clockMs;
    let seq = 0;
    if (last && last.ms >= clockMs) {
      ms = last.ms;
      seq = last.seq + 1;
    }
    const id = `${ms}-${seq}`;
    entries.push({ ms, seq, id, fields: { ...fields } });
    this.#lastIds.set(stream, { ms, seq });
    return id;
  }

  /**
   * A full bucket equals a missing one, so sweeping full buckets changes nothing observable.
   * Only if that is not enough are the least recently used evicted (each then starts full again:
   * a bounded over-allowance, preferred to refusing every new organization). Shrinks to 90% so
   * the O(n) sweep is not repeated on every new key.
   */
  #shrinkBuckets(nowMs: number): void {
    for (const [key, entry] of this.#buckets) {
      if (entry.fullAtMs <= nowMs) this.#buckets.delete(key);
    }
    const target = Math.floor(this.#maxBuckets * 0.9);
    for (const key of this.#buckets.keys()) {
      if (this.#buckets.size <= target) break;
      this.#buckets.delete(key);
    }
  }
}

/** Makes room for one more item in `cache` without evicting a live one, or rejects. */
function reserve(cache: LRUCache<string, true>, what: string): void {
  if (cache.size < cache.maxSize) return;
  cache.purgeStale();
  if (cache.size >= cache.maxSize) {
    throw new StoreError('STORE_FULL', `the in-process store holds its maximum of ${cache.maxSize} ${what}`);
  }
}

/** Accepts what XRANGE accepts as a start: `<ms>-<seq>` or `<ms>` (meaning `<ms>-0`). */
function parseStreamId(id: string): { ms: number; seq: number } {
  const match = /^(\d+)(?:-(\d+))?$/.exec(id);
  if (!match) throw new RangeError(`invalid stream id: ${JSON.stringify(id)}`);
  return { ms: Number(match[1]), seq: Number(match[2] ?? 0) };
}

function compareIds(a: { ms: number; seq: number }, b: { ms: number; seq: number }): number {
  return a.ms - b.ms || a.seq - b.seq;
}
