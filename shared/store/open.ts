/**
 * Opens the shared store for a process that enforces with it (a proxy in enforce mode, the
 * authority's verify-permit) and checks at start that it can keep its durability promise:
 * refuses to start when it cannot, unless the operator accepted a weaker store, in which case the
 * gap is logged at every start and shown by `countersign_store_durability_established 0`.
 *
 * @example
 *   const store = await openCheckedStore({ settings: config.store, redisUrl: config.redis_url, enforcing: true, logger, metrics: storeMetrics });
 */
import type { Logger } from 'pino';
import type { StoreMetrics } from '../metrics.js';
import { redisTopologyOf } from './config.js';
import type { StoreSettings } from './config.js';
import { MemoryStore } from './memory.js';
import { RedisStore } from './redis.js';
import type { SharedStore } from './types.js';

export interface OpenCheckedStoreOptions {
  settings: StoreSettings;
  redisUrl: string | undefined;
  /** Whether a gate relies on this store to keep permits single use (refuse a weaker store). */
  enforcing: boolean;
  logger: Pick<Logger, 'warn' | 'info'>;
  metrics: StoreMetrics;
  env?: NodeJS.ProcessEnv;
}

/** The store cannot keep the configured durability and nobody accepted that: do not start. */
export class StoreDurabilityError extends Error {
  readonly code = 'STORE_DURABILITY_UNAVAILABLE' as const;

  constructor(message: string) {
    super(message);
    this.name = 'StoreDurabilityError';
  }
}

export async function openCheckedStore(options: OpenCheckedStoreOptions): Promise<SharedStore> {
  const { settings, logger, metrics } = options;
  const topology = redisTopologyOf(settings, options.redisUrl, options.env);
  if (!topology) return new MemoryStore();
  const open = (durability: StoreSettings['durability']) =>
    new RedisStore({ topology, durability, commandTimeoutMs: settings.command_timeout_ms });
  const store = open(settings.durability);
  metrics.durability.set({ mode: settings.durability }, 1);
  metrics.durabilityEstablished.set({ mode: settings.durability }, 0);
  try {
    let check;
    try {
      check = await store.checkDurability();
    } catch (error) {
      // Unreachable now: start anyway, as with any store outage. Every write asks again and fails
      // closed (STORE_NOT_DURABLE) until the promise can be established.
      logger.warn({ err: error, durability: settings.durability }, 'the shared store is not reachable, so its durability could not be checked; consumes fail closed until it is');
      return store;
    }
    const established = check.ok && settings.durability !== 'none';
    metrics.durabilityEstablished.set({ mode: settings.durability }, established ? 1 : 0);
    if (established) {
      logger.info({ durability: settings.durability, how: check.detail, topology: topology.kind }, 'shared store durability established');
      if (topology.kind !== 'single' && settings.durability === 'aof') {
        // Replication is asynchronous: a promoted replica can lack the last consumes, epoch intact.
        logger.warn({ topology: topology.kind }, 'store.durability aof does not survive a failover to a replica that missed the last writes; use replica with Sentinel or Cluster');
      }
      return store;
    }
    const gap =
      settings.durability === 'none'
        ? 'store.durability is none: a Redis crash can lose consumed permits and the records of requests that ran'
        : `store.durability ${settings.durability} cannot be kept: ${check.detail}`;
    if (settings.accept_weaker_durability) {
      logger.warn({ durability: settings.durability, topology: topology.kind }, `${gap}; running anyway (accepted by configuration)`);
      // What cannot be kept is not waited for: writes would otherwise fail as not durable.
      await store.close();
      return open('none');
    }
    if (options.enforcing) {
      throw new StoreDurabilityError(
        `${gap}. Configure Redis for it (docs/replay-store.md), choose another store.durability, ` +
          'or set store.accept_weaker_durability: true (COUNTERSIGN_ACCEPT_WEAKER_DURABILITY=1) to run anyway.',
      );
    }
    // Shadow only: the store keeps asking for the promise, so every use fails as not durable and
    // is recorded as would-block until Redis can keep it; a route switched to enforce then fails
    // closed instead of running on a weaker store.
    logger.warn({ durability: settings.durability, topology: topology.kind }, `${gap}; shadow routes record every use as would-block until it can`);
    return store;
  } catch (error) {
    await store.close();
    throw error;
  }
}
