/**
 * The storage combinations an app test runs on: PGlite + the in-process store always, and
 * Postgres + Redis when DATABASE_URL and REDIS_URL are set (`npm test` sets them when the
 * servers are installed).
 *
 * @example
 *   for (const backend of appBackends()) t.test(backend.name, async (t) => { const { db, store, cleanup } = await backend.open(); … });
 */
import type { Db } from '../../authority/store/db.js';
import { MemoryStore } from '../../shared/store/memory.js';
import { RedisStore } from '../../shared/store/redis.js';
import type { SharedStore } from '../../shared/store/types.js';
import { dbBackends } from './db.js';
import { redisUrl, TEST_COMMAND_TIMEOUT_MS, uniquePrefix } from './redis.js';

export interface OpenedBackend {
  db: Db;
  store: SharedStore;
  /** Another store client on the same state: a second replica. */
  openPeerStore(): SharedStore;
  cleanup(): Promise<void>;
  /** Postgres: the database's URL, for a second connection (another replica, the CLI). */
  url?: string;
}

export interface AppBackend {
  name: string;
  open(options?: { now?: () => number }): Promise<OpenedBackend>;
}

export function appBackends(): AppBackend[] {
  const [pglite, postgres] = [dbBackends().find((b) => b.name === 'pglite'), dbBackends().find((b) => b.name === 'postgres')];
  const backends: AppBackend[] = [];
  if (pglite) {
    backends.push({
      name: 'pglite + in-process store',
      async open(options = {}) {
        const { db, cleanup } = await pglite.open();
        const store = new MemoryStore(options.now ? { now: options.now } : {});
        return { db, store, openPeerStore: () => store, cleanup: async () => { await store.close(); await cleanup(); } };
      },
    });
  }
  const url = redisUrl();
  if (postgres && url) {
    backends.push({
      name: 'postgres + redis',
      async open() {
        const { db, cleanup, url: dbUrl } = await postgres.open();
        const keyPrefix = uniquePrefix();
        const peers: SharedStore[] = [];
        const openPeerStore = () => {
          const peer = new RedisStore({ url, keyPrefix, commandTimeoutMs: TEST_COMMAND_TIMEOUT_MS });
          peers.push(peer);
          return peer;
        };
        const store = openPeerStore();
        return {
          db,
          url: dbUrl,
          store,
          openPeerStore,
          cleanup: async () => {
            for (const peer of peers) await peer.close();
            await cleanup();
          },
        };
      },
    });
  }
  return backends;
}

/** Why the real-server variant did not run, or null when it did. */
export function realServersMissing(): string | null {
  if (!process.env.DATABASE_URL) return 'DATABASE_URL is not set';
  if (!process.env.REDIS_URL) return 'REDIS_URL is not set';
  return null;
}
