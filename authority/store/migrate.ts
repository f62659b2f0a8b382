/**
 * Schema migrations: versioned SQL files `NNNN_name.sql` in authority/store/migrations, applied in
 * order and recorded in `schema_migrations`.
 *
 * Everything pending runs in ONE transaction that first takes a transaction-scoped advisory lock,
 * so replicas starting together apply each migration exactly once (the second waits, then finds
 * nothing pending), and a failing migration leaves the schema as it was. Migration files must
 * therefore not contain their own BEGIN/COMMIT or statements that cannot run in a transaction
 * (CREATE INDEX CONCURRENTLY).
 *
 * @example
 *   const { applied } = await migrate(db); // e.g. ['0001_foundation'], then [] on the next start
 */
import { existsSync } from 'node:fs';
import { readdir, readFile } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { Db } from './db.js';

/** Key of the advisory lock serialising migrations ("countersign migrate" as a stable number). */
export const MIGRATION_LOCK_KEY = 4_153_712_893;

const FILE_PATTERN = /^(\d{4})_([A-Za-z0-9_-]+)\.sql$/;

export interface MigrationFile {
  version: number;
  /** The part after the version: `foundation` for 0001_foundation.sql. */
  name: string;
  path: string;
}

/**
 * The folder holding package.json, found by walking up from this module. The same answer from
 * authority/store/migrate.ts and from dist/authority/store/migrate.js, which matters because the
 * build does not copy the .sql files into dist.
 */
export function packageRoot(from: string = dirname(fileURLToPath(import.meta.url))): string {
  for (let dir = from; ; dir = dirname(dir)) {
    if (existsSync(join(dir, 'package.json'))) return dir;
    if (dirname(dir) === dir) throw new Error(`no package.json above ${from}`);
  }
}

export function defaultMigrationsDir(): string {
  return join(packageRoot(), 'authority', 'store', 'migrations');
}

/** The migration files of `dir`, by version. Any other *.sql there is an error, not silently skipped. */
export async function listMigrations(dir: string = defaultMigrationsDir()): Promise<MigrationFile[]> {
  const files: MigrationFile[] = [];
  for (const entry of await readdir(dir)) {
    if (!entry.endsWith('.sql')) continue;
    const match = FILE_PATTERN.exec(entry);
    if (!match) throw new Error(`migration file ${join(dir, entry)} is not named NNNN_name.sql`);
    files.push({ version: Number(match[1]), name: match[2] ?? '', path: join(dir, entry) });
  }
  files.sort((a, b) => a.version - b.version);
  for (let i = 1; i < files.length; i++) {
    if (files[i]?.version === files[i - 1]?.version) {
      throw new Error(`two migration files have version ${files[i]?.version} in ${dir}`);
    }
  }
  return files;
}

/**
 * Applies the pending migrations of `options.dir` (default: authority/store/migrations).
 * Returns the ones applied, as `NNNN_name`. Throws, changing nothing, when the database is newer
 * than the files (a downgrade) or when a file older than the newest applied one is still pending.
 */
export async function migrate(db: Db, options: { dir?: string } = {}): Promise<{ applied: string[] }> {
  const files = await listMigrations(options.dir);
  const sources = new Map<number, string>();
  for (const file of files) sources.set(file.version, await readFile(file.path, 'utf8'));

  return db.transaction(async (tx) => {
    await tx.query(`SELECT pg_advisory_xact_lock(${MIGRATION_LOCK_KEY})`);
    await tx.exec(`CREATE TABLE IF NOT EXISTS schema_migrations (
      version     int PRIMARY KEY,
      name        text NOT NULL,
      applied_at  timestamptz NOT NULL DEFAULT now()
    )`);
    const done = new Set(
      (await tx.query<{ version: number }>('SELECT version FROM schema_migrations')).map((r) => r.version),
    );
    const newestDone = Math.max(0, ...done);
    const newestFile = files.at(-1)?.version ?? 0;
    if (newestDone > newestFile) {
      throw new Error(
        `the database schema is at version ${newestDone}, newer than this build knows (${newestFile}); ` +
          'refusing to run an older Countersign against it',
      );
    }
    const pending = files.filter((f) => !done.has(f.version));
    const stale = pending.find((f) => f.version < newestDone);
    if (stale) {
      throw new Error(
        `migration ${stale.version}_${stale.name} was never applied but ${newestDone} was; ` +
          'the migration history has diverged',
      );
    }
    const applied: string[] = [];
    for (const file of pending) {
      await tx.exec(sources.get(file.version) ?? '');
      await tx.query('INSERT INTO schema_migrations (version, name, applied_at) VALUES ($1, $2, now())', [
        file.version,
        file.name,
      ]);
      applied.push(`${String(file.version).padStart(4, '0')}_${file.name}`);
    }
    return { applied };
  });
}
