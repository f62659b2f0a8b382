/**
 * Entry point of the shared store: Redis when a URL is configured, the in-process store
 * otherwise (embedded single-process mode; refusing it for multi-replica deployments is the
 * caller's decision, since only the caller knows how it is deployed).
 *
 * @example
 *   const store = createSharedStore({ redisUrl: process.env.REDIS_URL });
 *   if ((await store.consumePermit(`permit:{${org}}:${jti}`, ttlMs)) !== 'consumed') refuse('PERMIT_ALREADY_USED');
 */
import { MemoryStore } from './memory.js';
import { RedisStore } from './redis.js';
import type { SharedStore } from './types.js';

export interface CreateSharedStoreOptions {
  /** Use Redis at this URL; without it (or when empty) the store is in-process. */
  redisUrl?: string;
  /** Redis key prefix (default `countersign:`); ignored by the in-process store. */
  keyPrefix?: string;
  /** Clock for the in-process store's TTLs and record ids (tests); Redis uses its own. */
  now?: () => number;
}

export function createSharedStore(options: CreateSharedStoreOptions = {}): SharedStore {
  if (options.redisUrl) {
    return new RedisStore({ url: options.redisUrl, keyPrefix: options.keyPrefix });
  }
  return new MemoryStore({ now: options.now });
}

export { MemoryStore } from './memory.js';
export type { MemoryStoreOptions } from './memory.js';
export { StoreError } from './store-errors.js';
export type { StoreErrorCode } from './store-errors.js';
export { RedisStore } from './redis.js';
export type { RedisStoreOptions } from './redis.js';
export { bucketResult, takeFromBucket } from './token-bucket.js';
export type { TokenBucketState, TokenBucketStep } from './token-bucket.js';
export type {
  RecordAppend,
  SharedStore,
  StoredRecord,
  TokenBucketResult,
  TokenBucketSpec,
} from './types.js';
