/**
 * Who a credential is, kept in memory so that authenticating a request needs no query: API keys
 * (by the SHA-256 of their secret, with their organization and its current policy version) and
 * organizations (for user tokens).
 *
 * A cached answer must never outlive a change. Any change to `api_keys` or `organizations` sends
 * a notice on the channel `countersign_credentials` at commit (a trigger, migration 0005), from
 * whatever made it: this process, another replica, the CLI, an operator's SQL. Every notice empties
 * the cache. Two gaps remain, and both are closed here:
 *
 * - A notice arrives on its own connection some time after the commit. The routes of this process
 *   that change credentials call `invalidate()` themselves before they answer, so the caller's
 *   next request (to the same process) already sees the change.
 * - A lookup that started before a change may finish after the notice. Each lookup notes the
 *   generation (bumped by every invalidation) it started in, and its answer is cached only if the
 *   generation is still the same.
 *
 * While the listening connection is down, notices may be lost: nothing is served from the cache
 * until listening resumes (then it starts empty), so every request queries the database as it
 * would without a cache. Entries also expire after `ttlMs`, a bound on any gap not foreseen here.
 *
 * @example
 *   const credentials = new CredentialCache({ metrics, logger });
 *   credentials.start(db);
 *   const found = await credentials.lookup(`key:${hash}`, () => findApiKeyBySecret(db, secret));
 *   credentials.invalidate(); // after this process changed a key or an organization
 *   await credentials.close();
 */
import { LRUCache } from 'lru-cache';
import type { Logger } from 'pino';
import type { AuthorityMetrics } from '../metrics.js';
import type { ChangeListener, Db, StopListening } from '../store/db.js';

/** The channel of the triggers in migration 0005. */
export const CREDENTIALS_CHANNEL = 'countersign_credentials';

/** Every lookup asks the database: for tools and tests that build an authenticator alone. */
export const UNCACHED: Pick<CredentialCache, 'lookup'> = { lookup: (_key, load) => load() };

export interface CredentialCacheOptions {
  /** Most entries kept; the least recently used go first. Default 10,000. */
  max?: number;
  /** How long an entry may be served at most. Default 5 minutes. */
  ttlMs?: number;
  metrics: Pick<AuthorityMetrics, 'credentialCache'>;
  logger: Pick<Logger, 'warn' | 'info'>;
}

export class CredentialCache implements ChangeListener {
  readonly #entries: LRUCache<string, object>;
  readonly #metrics: CredentialCacheOptions['metrics'];
  readonly #logger: CredentialCacheOptions['logger'];
  #generation = 0;
  #state: 'starting' | 'listening' | 'interrupted' = 'starting';
  #stop: StopListening | undefined;
  readonly #invalidated = new Set<() => void>();

  constructor(options: CredentialCacheOptions) {
    this.#entries = new LRUCache({ max: options.max ?? 10_000, ttl: options.ttlMs ?? 300_000 });
    this.#metrics = options.metrics;
    this.#logger = options.logger;
  }

  /** Follows the change notices of `db`; entries are served once listening has begun. */
  start(db: Db): void {
    this.#stop ??= db.listen(CREDENTIALS_CHANNEL, this);
  }

  /**
   * The cached answer for `key`, or `load()`'s (then cached, unless it is null or a change came in
   * while it ran). Keys name their kind: `key:<sha256>`, `org:<id>`.
   */
  async lookup<T extends object>(key: string, load: () => Promise<T | null>): Promise<T | null> {
    if (this.#state === 'listening') {
      const hit = this.#entries.get(key);
      if (hit !== undefined) {
        this.#metrics.credentialCache.inc({ result: 'hit' });
        return hit as T;
      }
    }
    this.#metrics.credentialCache.inc({ result: this.#state === 'listening' ? 'miss' : 'bypass' });
    const generation = this.#generation;
    const value = await load();
    if (value !== null && this.#state === 'listening' && generation === this.#generation) this.#entries.set(key, value);
    return value;
  }

  /** Forgets everything, including the answers of lookups still running. */
  invalidate(): void {
    this.#generation++;
    this.#entries.clear();
    for (const notify of this.#invalidated) notify();
  }

  /** Resolves at the next invalidation (for tests that wait for a notice from elsewhere). */
  nextInvalidation(): Promise<void> {
    return new Promise((resolve) => {
      const once = (): void => {
        this.#invalidated.delete(once);
        resolve();
      };
      this.#invalidated.add(once);
    });
  }

  /** Whether answers are served from memory (false while the change notices are interrupted). */
  get serving(): boolean {
    return this.#state === 'listening';
  }

  notice(): void {
    this.invalidate();
  }

  interrupted(error: Error): void {
    if (this.#state !== 'interrupted') {
      this.#logger.warn({ err: error.message }, 'credential change notices interrupted: authenticating from the database until they resume');
    }
    this.#state = 'interrupted';
    this.invalidate();
  }

  resumed(): void {
    if (this.#state === 'interrupted') this.#logger.info('credential change notices resumed');
    // Whatever changed while nobody listened is unknown: start empty.
    this.invalidate();
    this.#state = 'listening';
  }

  async close(): Promise<void> {
    this.#state = 'starting';
    this.invalidate();
    await this.#stop?.();
  }
}
