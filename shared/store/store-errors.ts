/**
 * Failures and input checks common to both stores, so that both refuse the same inputs and
 * callers can fail closed on one error type.
 *
 * @example
 *   if (error instanceof StoreError && error.code === 'STORE_UNAVAILABLE') fail closed
 */
export type StoreErrorCode = 'STORE_CLOSED' | 'STORE_UNAVAILABLE' | 'STORE_FULL' | 'STORE_NOT_DURABLE' | 'STORE_ABANDONED';

/**
 * A store failure the caller should treat as "cannot establish": callers fail closed on it.
 * `STORE_CLOSED` after `close()`, `STORE_UNAVAILABLE` when Redis cannot be reached in time,
 * `STORE_FULL` when an in-process bound is reached, `STORE_NOT_DURABLE` when a write was not
 * acknowledged as durable (durability modes `aof` and `replica`) in time, `STORE_ABANDONED` when
 * the caller gave up (its signal aborted, its deadline passed) before the call could count.
 */
export class StoreError extends Error {
  readonly code: StoreErrorCode;

  constructor(code: StoreErrorCode, message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = 'StoreError';
    this.code = code;
  }
}

/**
 * How long a consume may take: `timeoutMs` (else `defaultMs`), cut to the caller's `deadlineMs`.
 * Throws `STORE_ABANDONED` when the caller has already given up, before anything is sent.
 */
export function consumeBudgetMs(options: { timeoutMs?: number; deadlineMs?: number; signal?: AbortSignal }, defaultMs: number, nowMs = Date.now()): number {
  if (options.signal?.aborted) throw abandonedError();
  const budget = Math.min(options.timeoutMs ?? defaultMs, options.deadlineMs === undefined ? Infinity : options.deadlineMs - nowMs);
  if (!(budget > 0)) throw new StoreError('STORE_ABANDONED', "the caller's deadline passed before the consume was sent; nothing was consumed");
  return budget;
}

export function abandonedError(): StoreError {
  return new StoreError('STORE_ABANDONED', 'the caller gave up before the consume was established; nothing was consumed');
}

/** Redis PX takes whole positive milliseconds; round up so a marker never lives shorter. */
export function checkTtl(ttlMs: number): number {
  if (!Number.isFinite(ttlMs) || ttlMs <= 0) {
    throw new RangeError(`ttlMs must be a finite number > 0, got ${ttlMs}`);
  }
  return Math.ceil(ttlMs);
}

/** Redis XADD refuses an entry without fields; refuse it here too so both stores agree. */
export function checkFields(fields: Record<string, string>): void {
  if (Object.keys(fields).length === 0) throw new RangeError('a record needs at least one field');
}

export function checkCount(count: number): void {
  if (!Number.isInteger(count) || count < 1) {
    throw new RangeError(`count must be an integer >= 1, got ${count}`);
  }
}
