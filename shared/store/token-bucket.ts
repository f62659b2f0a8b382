/**
 * Token-bucket arithmetic shared by both stores. `MemoryStore` runs `takeFromBucket` itself; the
 * Lua script in `RedisStore` mirrors it operation for operation (same formulas, same order of
 * floating-point operations), and both build their answer with `bucketResult`, so a bucket behaves
 * identically whichever store holds it.
 *
 * Time is the caller's clock (`nowMs`), never the store's, but a bucket never moves backwards: the
 * effective "now" is `max(nowMs, updatedAtMs)`, so a replica whose clock lags cannot refill the
 * bucket a second time for the same interval.
 *
 * @example
 *   const spec = { capacity: 150, refillPerMinute: 100 };
 *   const step = takeFromBucket(undefined, spec, Date.now()); // a fresh bucket starts full
 *   const result = bucketResult(step, spec); // { allowed: true, remaining: 149, ... }
 */
import type { TokenBucketResult, TokenBucketSpec } from './types.js';

export interface TokenBucketState {
  /** Tokens in the bucket; fractional, because refill is continuous. */
  tokens: number;
  /** The bucket's own time: the latest effective "now" it has seen. */
  updatedAtMs: number;
}

/** The outcome of one take: the new state and whether a token was taken. */
export interface TokenBucketStep {
  allowed: boolean;
  state: TokenBucketState;
}

const MS_PER_MINUTE = 60000;

/**
 * Rejects specs that would make the arithmetic meaningless: a bucket that can never hold a whole
 * token refuses forever, and one that never refills has no finite reset time to report.
 */
export function assertBucketSpec(spec: TokenBucketSpec, nowMs: number): void {
  if (!Number.isFinite(spec.capacity) || spec.capacity < 1) {
    throw new RangeError(`token bucket capacity must be a finite number >= 1, got ${spec.capacity}`);
  }
  if (!Number.isFinite(spec.refillPerMinute) || spec.refillPerMinute <= 0) {
    throw new RangeError(
      `token bucket refillPerMinute must be a finite number > 0, got ${spec.refillPerMinute}`,
    );
  }
  if (!Number.isFinite(nowMs)) {
    throw new RangeError(`token bucket nowMs must be finite, got ${nowMs}`);
  }
}

/**
 * Refills `state` up to `nowMs` and takes one token if a whole one is there. `undefined` is a
 * bucket never seen (or expired, which only happens once it is full again): it starts full.
 *
 * Keep in step with TAKE_TOKEN_SCRIPT in redis.ts.
 */
export function takeFromBucket(
  state: TokenBucketState | undefined,
  spec: TokenBucketSpec,
  nowMs: number,
): TokenBucketStep {
  let tokens = spec.capacity;
  let now = nowMs;
  if (state !== undefined) {
    now = Math.max(nowMs, state.updatedAtMs);
    tokens = Math.min(
      spec.capacity,
      state.tokens + ((now - state.updatedAtMs) * spec.refillPerMinute) / MS_PER_MINUTE,
    );
  }
  let allowed = false;
  if (tokens >= 1) {
    tokens = tokens - 1;
    allowed = true;
  }
  return { allowed, state: { tokens, updatedAtMs: now } };
}

/** Milliseconds until the bucket in `state` holds `capacity` tokens again (0 when it is full). */
export function msUntilFull(state: TokenBucketState, spec: TokenBucketSpec): number {
  return Math.max(0, Math.ceil(((spec.capacity - state.tokens) * MS_PER_MINUTE) / spec.refillPerMinute));
}

/** The caller-facing result of a take; both stores build it here so they round identically. */
export function bucketResult(step: TokenBucketStep, spec: TokenBucketSpec): TokenBucketResult {
  const { tokens, updatedAtMs } = step.state;
  const retryAfterMs = step.allowed
    ? 0
    : // A refusal must never say "retry now": that would invite a tight retry loop.
      Math.max(1, Math.ceil(((1 - tokens) * MS_PER_MINUTE) / spec.refillPerMinute));
  return {
    allowed: step.allowed,
    remaining: Math.max(0, Math.floor(tokens)),
    resetAtMs: updatedAtMs + msUntilFull(step.state, spec),
    retryAfterMs,
  };
}
