/**
 * `Db` on PGlite: Postgres compiled to WASM, running inside this process. The embedded default
 * when no DATABASE_URL is configured, and the fast backend for tests (in memory).
 *
 * PGlite has a single connection: statements and transactions run one at a time, queued. Inside
 * `transaction(fn)` use the `tx` it passes; calling `db.query` from within `fn` waits for the
 * transaction to end, which never happens.
 *
 * A data directory must be opened by one process at a time (two WASM instances writing the same
 * files corrupt them), so opening it writes `<dataDir>/countersign.lock` with the PID and refuses
 * when another live process holds it.
 *
 * @example
 *   const db = await openPglite('.countersign/pglite'); // persisted; openPglite() = in memory
 *   await db.exec('CREATE TABLE t (id int8)');
 *   const rows = await db.query<{ id: number }>('SELECT id FROM t');
 *   await db.close(); // also removes the lock file
 */
import { PGlite } from '@electric-sql/pglite';
import type { Transaction } from '@electric-sql/pglite';
import { link, mkdir, readFile, unlink, writeFile } from 'node:fs/promises';
import { readFileSync, unlinkSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { CHANNEL_NAME, type ChangeListener, type Db, type Queryable, type StopListening } from './db.js';
import { parseInt8 } from './pg.js';

export const LOCK_FILE_NAME = 'countersign.lock';

/** Row parsers on top of PGlite's own: int8 (and so int8[]) → number, exactly as PgDb does. */
export const PGLITE_PARSERS = { 20: parseInt8 };

/** Thrown (as `code: 'DATA_DIR_LOCKED'`) when another process has the data directory open. */
export class DataDirLockedError extends Error {
  readonly code = 'DATA_DIR_LOCKED';
  constructor(
    readonly dataDir: string,
    readonly pid: number,
  ) {
    super(
      pid === process.pid
        ? `The data directory ${dataDir} is already open in this process (PID ${pid}); close it first.`
        : `The data directory ${dataDir} is locked by the running process PID ${pid} (see ` +
            `${join(dataDir, LOCK_FILE_NAME)}). Stop that server first: PGlite data can only be ` +
            `opened by one process at a time.`,
    );
    this.name = 'DataDirLockedError';
  }
}

// Directories this process holds, so a second open in the same process is refused as well
// (its lock file names our own PID, which is otherwise taken over as a leftover).
const heldHere = new Set<string>();

function isAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    // EPERM: the process exists but belongs to another user.
    return (err as NodeJS.ErrnoException).code === 'EPERM';
  }
}

async function readLockPid(lockPath: string): Promise<number | undefined> {
  try {
    const pid = Number.parseInt((await readFile(lockPath, 'utf8')).trim(), 10);
    return Number.isInteger(pid) && pid > 0 ? pid : undefined;
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return undefined;
    throw err;
  }
}

/** Creates `lockPath` holding our PID; false if it already exists. */
async function createLockFile(lockPath: string): Promise<boolean> {
  // Write to a private file, then hard-link it into place: the lock appears atomically with its
  // content, so a concurrent opener never reads an empty lock and mistakes it for a stale one.
  const tmp = `${lockPath}.${process.pid}.tmp`;
  await writeFile(tmp, `${process.pid}\n`);
  try {
    await link(tmp, lockPath);
    return true;
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    if (code === 'EEXIST') return false;
    // Filesystems without hard links: exclusive create is nearly as good.
    try {
      await writeFile(lockPath, `${process.pid}\n`, { flag: 'wx' });
      return true;
    } catch (wxErr) {
      if ((wxErr as NodeJS.ErrnoException).code === 'EEXIST') return false;
      throw wxErr;
    }
  } finally {
    await unlink(tmp).catch(() => undefined);
  }
}

async function acquireLock(dataDir: string): Promise<string> {
  if (heldHere.has(dataDir)) throw new DataDirLockedError(dataDir, process.pid);
  const lockPath = join(dataDir, LOCK_FILE_NAME);
  // A few rounds: each one either creates the lock, refuses, or removes a stale lock and retries.
  for (let attempt = 0; attempt < 5; attempt++) {
    if (await createLockFile(lockPath)) {
      heldHere.add(dataDir);
      return lockPath;
    }
    const holder = await readLockPid(lockPath);
    if (holder !== undefined && holder !== process.pid && isAlive(holder)) {
      throw new DataDirLockedError(dataDir, holder);
    }
    // Dead PID, garbage, or our own PID left by an earlier run that had the same PID (PID 1 in a
    // container restarts as PID 1): a leftover from a process that did not close cleanly.
    await unlink(lockPath).catch((err: NodeJS.ErrnoException) => {
      if (err.code !== 'ENOENT') throw err;
    });
  }
  throw new Error(`could not take the lock ${lockPath}: it keeps changing; is another server starting?`);
}

/** Removes the lock only while it still names us, so another process's lock is never deleted. */
function releaseLockSync(dataDir: string, lockPath: string): void {
  heldHere.delete(dataDir);
  try {
    if (Number.parseInt(readFileSync(lockPath, 'utf8'), 10) === process.pid) unlinkSync(lockPath);
  } catch {
    // Already gone.
  }
}

function queryable(target: PGlite | Transaction): Queryable {
  return {
    async query<Row = Record<string, unknown>>(sql: string, params?: readonly unknown[]): Promise<Row[]> {
      const result = await target.query<Row>(sql, params === undefined ? undefined : [...params]);
      return result.rows;
    },
    async exec(sql: string): Promise<void> {
      await target.exec(sql);
    },
  };
}

export class PgliteDb implements Db {
  readonly kind = 'pglite' as const;
  private readonly direct: Queryable;
  private closing: Promise<void> | undefined;

  /** Use `openPglite`; the constructor takes an already created instance and its lock. */
  constructor(
    private readonly pglite: PGlite,
    private readonly lock?: { dataDir: string; lockPath: string; onExit: () => void },
  ) {
    this.direct = queryable(pglite);
  }

  query<Row = Record<string, unknown>>(sql: string, params?: readonly unknown[]): Promise<Row[]> {
    return this.direct.query<Row>(sql, params);
  }

  exec(sql: string): Promise<void> {
    return this.direct.exec(sql);
  }

  transaction<T>(fn: (tx: Queryable) => Promise<T>): Promise<T> {
    return this.pglite.transaction((tx) => fn(queryable(tx)));
  }

  /** One in-process instance: its notices cannot be interrupted. */
  listen(channel: string, listener: ChangeListener): StopListening {
    if (!CHANNEL_NAME.test(channel)) throw new RangeError(`not a channel name: ${channel}`);
    const subscribed = this.pglite.listen(channel, (payload) => listener.notice(payload)).then((unlisten) => {
      listener.resumed();
      return unlisten;
    });
    subscribed.catch((error: unknown) => listener.interrupted(error instanceof Error ? error : new Error(String(error))));
    return async () => {
      const unlisten = await subscribed.catch(() => undefined);
      // After close() PGlite refuses every call; nothing is listening any more anyway.
      if (unlisten && !this.pglite.closed) await unlisten();
    };
  }

  async ping(): Promise<void> {
    await this.pglite.query('SELECT 1');
  }

  /** Closes PGlite (flushing data to the directory) and removes the lock; safe to call twice. */
  close(): Promise<void> {
    this.closing ??= (async () => {
      try {
        await this.pglite.close();
      } finally {
        if (this.lock) {
          process.off('exit', this.lock.onExit);
          releaseLockSync(this.lock.dataDir, this.lock.lockPath);
        }
      }
    })();
    return this.closing;
  }
}

/**
 * Opens PGlite: persisted in `dataDir` (created if missing, locked against other processes), or in
 * memory when no directory is given.
 */
export async function openPglite(dataDir?: string): Promise<PgliteDb> {
  const options = { parsers: PGLITE_PARSERS };
  if (dataDir === undefined) {
    return new PgliteDb(await PGlite.create(options));
  }
  const dir = resolve(dataDir);
  await mkdir(dir, { recursive: true });
  const lockPath = await acquireLock(dir);
  // A process that exits without close() should not leave a lock behind that names a PID which
  // may later belong to something else.
  const onExit = (): void => releaseLockSync(dir, lockPath);
  process.on('exit', onExit);
  try {
    const pglite = await PGlite.create(dir, options);
    return new PgliteDb(pglite, { dataDir: dir, lockPath, onExit });
  } catch (err) {
    process.off('exit', onExit);
    releaseLockSync(dir, lockPath);
    throw err;
  }
}
