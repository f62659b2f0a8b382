/**
 * The gate's view of the authority's permit keys: the JWKS from `GET /v1/permit-keys`, fetched
 * with the gate's own API key, imported once per refresh and kept in an LRU cache by kid.
 *
 * - An unknown kid refreshes the set at most once per cooldown window (forged kids must not be
 *   able to hammer the authority), and concurrent callers share one in-flight fetch.
 * - A failed refresh keeps the last good set: the authority being down must not stop the gate
 *   from verifying permits signed with keys it already has. A truly unknown kid then gets null
 *   (PERMIT_INVALID).
 * - If no key set was ever loaded, `resolve` REJECTS with `PermitKeysUnavailableError`; the
 *   verification core turns that into INTERNAL_ERROR and the gate answers 503 (fail closed)
 *   instead of refusing every permit as "unknown key".
 * - A successful refresh replaces the whole set: a key withdrawn from the JWKS stops verifying,
 *   a key added starts.
 * - No timers inside: the caller runs `refreshIfStale()` on its own interval, so tests drive the
 *   clock by hand.
 *
 * @example
 *   const client = new CountersignClient({ baseUrl, apiKey });
 *   const keys = new RemoteKeyResolver({
 *     fetchKeys: () => client.permitKeys(),
 *     onRefresh: (result) => metrics.keyRefreshes.inc({ result }),
 *   });
 *   await keys.start(); // rejects if the authority cannot be reached; retry or refuse to start
 *   setInterval(() => void keys.refreshIfStale(), 30_000).unref();
 *   // /readyz: keys.ready(); verifyPermit({ keys, ... })
 */
import { LRUCache } from 'lru-cache';
import type { JWK } from 'jose';
import { staticKeyResolver } from './static-keys.js';
import type { PermitKeyResolver, PermitVerificationKey } from './verify.js';

export type KeyRefreshResult = 'ok' | 'failed' | 'skipped_cooldown';

export interface RemoteKeyResolverOptions {
  /**
   * Fetches the JWKS, typically `() => client.permitKeys()`. The answer is checked at run time
   * (it comes over the network), so the entries are typed loosely.
   */
  fetchKeys: () => Promise<{ keys: readonly unknown[] }>;
  /** Milliseconds since the epoch; default `Date.now`. */
  now?: () => number;
  /** Minimum time between two refreshes caused by unknown kids; default 10 s. */
  refreshCooldownMs?: number;
  /** `refreshIfStale` refetches a set older than this; default 5 min. */
  maxAgeMs?: number;
  /** For metrics ("key refreshes") and logs; must not throw (errors from it are ignored). */
  onRefresh?: (result: KeyRefreshResult, error?: unknown) => void;
}

export interface RemoteKeyStatus {
  /** A key set was fetched successfully at least once. */
  loaded: boolean;
  /** Usable (Ed25519, with a kid) keys in the current set. */
  keyCount: number;
  /** When the current set was fetched (ms since the epoch), null before the first success. */
  lastRefreshAt: number | null;
  /** Why the latest refresh failed; cleared by the next success. */
  lastError: string | null;
}

/** No key set has ever been loaded, so no permit can be verified: fail closed. */
export class PermitKeysUnavailableError extends Error {
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = 'PermitKeysUnavailableError';
  }
}

export const DEFAULT_REFRESH_COOLDOWN_MS = 10_000;
export const DEFAULT_KEYS_MAX_AGE_MS = 300_000;
/**
 * A real authority publishes a handful of keys (current, next, recently retired). The caps keep
 * a broken or hostile answer from costing unbounded memory or import work; the cache is sized
 * above the import cap so a key of the current set is never evicted.
 */
const MAX_JWKS_ENTRIES = 1_000;
const MAX_KEYS = MAX_JWKS_ENTRIES;

export class RemoteKeyResolver implements PermitKeyResolver {
  readonly #fetchKeys: RemoteKeyResolverOptions['fetchKeys'];
  readonly #now: () => number;
  readonly #cooldownMs: number;
  readonly #maxAgeMs: number;
  readonly #onRefresh: RemoteKeyResolverOptions['onRefresh'];
  readonly #keys = new LRUCache<string, PermitVerificationKey>({ max: MAX_KEYS });

  #loaded = false;
  #lastRefreshAt: number | null = null;
  #lastAttemptAt: number | null = null;
  #lastError: unknown = null;
  #inFlight: Promise<boolean> | null = null;

  constructor(options: RemoteKeyResolverOptions) {
    this.#fetchKeys = options.fetchKeys;
    this.#now = options.now ?? Date.now;
    this.#cooldownMs = nonNegative(options.refreshCooldownMs ?? DEFAULT_REFRESH_COOLDOWN_MS, 'refreshCooldownMs');
    this.#maxAgeMs = nonNegative(options.maxAgeMs ?? DEFAULT_KEYS_MAX_AGE_MS, 'maxAgeMs');
    this.#onRefresh = options.onRefresh;
  }

  /**
   * The key for `kid`, or null when the authority does not publish it (even after a refresh).
   * Rejects with `PermitKeysUnavailableError` only while no key set was ever loaded.
   */
  async resolve(kid: string): Promise<PermitVerificationKey | null> {
    const cached = this.#keys.get(kid);
    if (cached !== undefined) return cached;

    if (this.#inFlight) {
      // Someone is already fetching: its answer is the freshest one to be had.
      await this.#inFlight;
    } else if (this.#inCooldown()) {
      this.#report('skipped_cooldown');
    } else {
      await this.#refresh();
    }

    if (!this.#loaded) {
      throw new PermitKeysUnavailableError(
        `the permit keys have never been loaded from the authority: ${this.#errorMessage() ?? 'no fetch attempted yet'}`,
        { cause: this.#lastError },
      );
    }
    return this.#keys.get(kid) ?? null;
  }

  /**
   * The first load, regardless of the cooldown. Rejects when it fails, so the caller decides
   * whether to retry or refuse to start; the resolver stays usable either way (`resolve` and
   * `refreshIfStale` try again).
   */
  async start(): Promise<void> {
    const ok = await (this.#inFlight ?? this.#refresh());
    if (!ok && !this.#loaded) {
      throw new PermitKeysUnavailableError(`the permit keys could not be loaded: ${this.#errorMessage()}`, {
        cause: this.#lastError,
      });
    }
  }

  /**
   * For the caller's timer: refetches when never loaded or when the set is older than
   * `maxAgeMs`. Never rejects (the outcome goes to `onRefresh` and `status()`), so it can be
   * fired and forgotten. Returns whether a fetch ran or was joined.
   */
  async refreshIfStale(): Promise<boolean> {
    if (this.#inFlight) {
      await this.#inFlight;
      return true;
    }
    const fresh = this.#lastRefreshAt !== null && this.#now() - this.#lastRefreshAt < this.#maxAgeMs;
    if (fresh) return false;
    // While the authority is down, retry no more often than the cooldown allows.
    if (this.#inCooldown()) return false;
    await this.#refresh();
    return true;
  }

  /**
   * For /readyz: a key set was loaded and holds at least one usable key (a gate that can verify
   * nothing is not ready to serve).
   */
  ready(): boolean {
    return this.#loaded && this.#keys.size > 0;
  }

  status(): RemoteKeyStatus {
    return {
      loaded: this.#loaded,
      keyCount: this.#keys.size,
      lastRefreshAt: this.#lastRefreshAt,
      lastError: this.#errorMessage(),
    };
  }

  #inCooldown(): boolean {
    return this.#lastAttemptAt !== null && this.#now() - this.#lastAttemptAt < this.#cooldownMs;
  }

  /** Single flight: every caller during a fetch awaits this one promise. Never rejects. */
  #refresh(): Promise<boolean> {
    this.#lastAttemptAt = this.#now();
    const run = this.#load().finally(() => {
      this.#inFlight = null;
    });
    this.#inFlight = run;
    return run;
  }

  async #load(): Promise<boolean> {
    let imported: Map<string, PermitVerificationKey>;
    try {
      imported = await importKeys(await this.#fetchKeys());
    } catch (error) {
      this.#lastError = error ?? new Error('unknown error');
      this.#report('failed', error);
      return false;
    }
    // Replace the whole set in one synchronous step: withdrawn keys go, and no caller sees a
    // half-filled cache.
    this.#keys.clear();
    for (const [kid, key] of imported) this.#keys.set(kid, key);
    this.#loaded = true;
    this.#lastRefreshAt = this.#now();
    this.#lastError = null;
    this.#report('ok');
    return true;
  }

  #report(result: KeyRefreshResult, error?: unknown): void {
    try {
      if (result === 'failed') this.#onRefresh?.(result, error);
      else this.#onRefresh?.(result);
    } catch {
      // A metrics hook must not change what the resolver answers.
    }
  }

  #errorMessage(): string | null {
    if (this.#lastError === null) return null;
    return this.#lastError instanceof Error ? this.#lastError.message : String(this.#lastError);
  }
}

/**
 * Imports through `staticKeyResolver` so the rules on which keys count (Ed25519 OKP, public
 * part only, `use`/`alg`, first kid wins) live in one place. Throws when the answer is not a
 * JWKS at all, which counts as a failed refresh rather than "the authority withdrew every key".
 */
async function importKeys(jwks: unknown): Promise<Map<string, PermitVerificationKey>> {
  const entries = (jwks as { keys?: unknown } | null)?.keys;
  if (typeof jwks !== 'object' || jwks === null || !Array.isArray(entries)) {
    throw new Error('the authority answered a key set without a keys array');
  }
  // staticKeyResolver reads properties of every entry, so anything but a plain object goes.
  const candidates = (entries as unknown[])
    .slice(0, MAX_JWKS_ENTRIES)
    .filter((entry): entry is JWK => typeof entry === 'object' && entry !== null && !Array.isArray(entry));
  const resolver = staticKeyResolver({ keys: candidates });
  const keys = new Map<string, PermitVerificationKey>();
  for (const { kid } of candidates) {
    if (typeof kid !== 'string' || keys.has(kid)) continue;
    const key = await resolver.resolve(kid);
    if (key !== null) keys.set(kid, key);
  }
  return keys;
}

function nonNegative(value: number, name: string): number {
  if (!Number.isFinite(value) || value < 0) throw new RangeError(`${name} must be a finite number >= 0`);
  return value;
}
