/**
 * Chooses the storage from configuration: Postgres when a DATABASE_URL is given, otherwise the
 * embedded PGlite kept in `<dataDir>/pglite`. Does not migrate or ping; callers do that.
 *
 * @example
 *   const db = await openDb({ databaseUrl: process.env.DATABASE_URL, dataDir: '.countersign' });
 *   await migrate(db);
 */
import { join } from 'node:path';
import type { Db } from './db.js';

export async function openDb(options: { databaseUrl?: string; dataDir: string }): Promise<Db> {
  // Imported on demand: a Postgres deployment never loads the PGlite bundle.
  if (options.databaseUrl) {
    const { PgDb } = await import('./pg.js');
    return new PgDb({ connectionString: options.databaseUrl });
  }
  const { openPglite } = await import('./pglite.js');
  return openPglite(join(options.dataDir, 'pglite'));
}
