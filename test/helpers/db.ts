/**
 * Storage backends for tests: every suite that touches the database runs once per backend.
 * PGlite (in memory, migrated) always; Postgres when DATABASE_URL is set (`npm test` starts a
 * throwaway server when the binaries exist), each `open()` in a fresh database of its own.
 *
 * @example
 *   for (const backend of dbBackends()) {
 *     t.test(backend.name, async (t) => {
 *       const { db, cleanup } = await backend.open();
 *       t.teardown(cleanup);
 *       ...
 *     });
 *   }
 *   const why = postgresSkipReason(); if (why) t.comment(why);
 */
import { createHash, randomBytes } from 'node:crypto';
import { mkdirSync, readdirSync, readFileSync, renameSync, writeFileSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { PGlite } from '@electric-sql/pglite';
import pg from 'pg';
import type { Test } from 'tap';
import type { Db } from '../../authority/store/db.js';
import { defaultMigrationsDir, migrate } from '../../authority/store/migrate.js';
import { PgDb } from '../../authority/store/pg.js';
import { PGLITE_PARSERS, PgliteDb } from '../../authority/store/pglite.js';
import { REPO_ROOT as root } from './repo.js';

export interface OpenedDb {
  db: Db;
  /** Closes the connection and, for Postgres, drops the database. */
  cleanup(): Promise<void>;
  /** Postgres: the database's URL, for a second connection (another replica, the CLI). */
  url?: string;
}

export interface DbBackend {
  name: 'pglite' | 'postgres';
  open(): Promise<OpenedDb>;
}

/** Why the Postgres variant does not run, or undefined when it does. */
export function postgresSkipReason(): string | undefined {
  return process.env['DATABASE_URL']
    ? undefined
    : 'postgres variant not run: DATABASE_URL is not set (npm test sets it when Postgres server ' +
        'binaries are installed; or point DATABASE_URL at a server where databases may be created)';
}

// Creating PGlite runs initdb and then the migrations take seconds of CPU; loading a snapshot of
// a migrated one takes a fraction of that. The snapshot is kept on disk, keyed by the PGlite
// version and the migrations' text, so a test run pays for initdb and migrations once, not once
// per test process (there are dozens); a changed migration or PGlite makes a new one.
const SNAPSHOT_CACHE = join(root, 'node_modules', '.cache', 'countersign-pglite');
let snapshot: Promise<Blob> | undefined;

function snapshotFile(): string {
  const hash = createHash('sha256');
  const pglite = join(root, 'node_modules', '@electric-sql', 'pglite', 'package.json');
  hash.update((JSON.parse(readFileSync(pglite, 'utf8')) as { version: string }).version);
  const migrations = defaultMigrationsDir();
  for (const name of readdirSync(migrations).sort()) hash.update(`\0${name}\0`).update(readFileSync(join(migrations, name)));
  return join(SNAPSHOT_CACHE, `migrated-${hash.digest('hex').slice(0, 24)}.tar`);
}

async function migratedSnapshot(): Promise<Blob> {
  const file = snapshotFile();
  try {
    return new Blob([readFileSync(file)]);
  } catch {
    // not made yet (or unreadable): make it
  }
  const pglite = await PGlite.create({ parsers: PGLITE_PARSERS });
  let dump: Blob;
  try {
    await migrate(new PgliteDb(pglite));
    dump = await pglite.dumpDataDir('none');
  } finally {
    await pglite.close();
  }
  try {
    mkdirSync(SNAPSHOT_CACHE, { recursive: true });
    const partial = `${file}.${process.pid}.partial`;
    writeFileSync(partial, Buffer.from(await dump.arrayBuffer()));
    renameSync(partial, file); // atomic: a parallel test process reads all of it or none
  } catch {
    // A read-only checkout still works, at the cost of migrating in every process.
  }
  return dump;
}

async function openPgliteMigrated(): Promise<OpenedDb> {
  snapshot ??= migratedSnapshot();
  const db = new PgliteDb(await PGlite.create({ loadDataDir: await snapshot, parsers: PGLITE_PARSERS }));
  return { db, cleanup: () => db.close() };
}

function adminClient(url: string): pg.Client {
  return new pg.Client({ connectionString: url, connectionTimeoutMillis: 10_000 });
}

async function openPostgresMigrated(adminUrl: string): Promise<OpenedDb> {
  const name = `countersign_test_${process.pid}_${randomBytes(6).toString('hex')}`;
  const admin = adminClient(adminUrl);
  await admin.connect();
  try {
    await admin.query(`CREATE DATABASE "${name}"`);
  } finally {
    await admin.end();
  }
  const url = new URL(adminUrl);
  url.pathname = `/${name}`;
  const db = new PgDb({ connectionString: url.toString() });
  const drop = async (): Promise<void> => {
    await db.close();
    const dropper = adminClient(adminUrl);
    await dropper.connect();
    try {
      // FORCE: a test that leaked a connection must not make cleanup fail.
      await dropper.query(`DROP DATABASE IF EXISTS "${name}" WITH (FORCE)`);
    } finally {
      await dropper.end();
    }
  };
  try {
    await migrate(db);
  } catch (err) {
    await drop();
    throw err;
  }
  return { db, cleanup: drop, url: url.toString() };
}

export function dbBackends(): DbBackend[] {
  const backends: DbBackend[] = [{ name: 'pglite', open: openPgliteMigrated }];
  const url = process.env['DATABASE_URL'];
  if (url) backends.push({ name: 'postgres', open: () => openPostgresMigrated(url) });
  return backends;
}

/** The SQLSTATE of a rejected promise (pg and PGlite both set `code`); undefined when it resolves. */
export async function sqlState(promise: Promise<unknown>): Promise<string | undefined> {
  try {
    await promise;
    return undefined;
  } catch (err) {
    return (err as { code?: string }).code;
  }
}

/** A fresh folder under the system's temp folder (a data directory, migration files), removed at teardown. */
export async function tempDir(t: Test, prefix: string): Promise<string> {
  const dir = await mkdtemp(join(tmpdir(), prefix));
  t.teardown(() => rm(dir, { recursive: true, force: true }));
  return dir;
}
