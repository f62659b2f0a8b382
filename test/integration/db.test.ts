/**
 * The storage suite: the same checks against every backend of dbBackends() (PGlite always,
 * Postgres when DATABASE_URL is set), so both keep returning the same types and honouring
 * transactions the same way. Then what only one backend has: PGlite's data directory and lock,
 * Postgres's pool behaviour. The migrations and the schema they make are in db-migrations.test.ts.
 *
 * @example
 *   npx tap test/integration/db.test.ts
 */
import { spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import pg from 'pg';
import t from 'tap';
import { listMigrations, migrate } from '../../authority/store/migrate.js';
import { openDb } from '../../authority/store/open.js';
import { PgDb } from '../../authority/store/pg.js';
import { LOCK_FILE_NAME, openPglite } from '../../authority/store/pglite.js';
import { dbBackends, postgresSkipReason, sqlState, tempDir } from '../helpers/db.js';
import { deadPort } from '../helpers/loopback.js';

const ORG_ID = '00000000-0000-4000-8000-000000000001';

/** A dead PID: a child that has already exited (its PID is not reused within this test). */
function deadPid(): number {
  const child = spawnSync(process.execPath, ['-e', '']);
  if (!child.pid) throw new Error('could not spawn a child process');
  return child.pid;
}

for (const backend of dbBackends()) {
  t.test(backend.name, async (t) => {
    const { db, cleanup } = await backend.open();
    t.teardown(cleanup);

    t.test('kind and ping', async (t) => {
      t.equal(db.kind, backend.name);
      await t.resolves(db.ping());
    });

    t.test('query with parameters', async (t) => {
      const rows = await db.query<{ s: string; n: number }>('SELECT $1::text || $2::text AS s, $3::int + 1 AS n', [
        'ab',
        'cd',
        41,
      ]);
      t.same(rows, [{ s: 'abcd', n: 42 }]);
      t.same(await db.query('SELECT 1 AS one WHERE false'), [], 'no rows → empty array');
    });

    t.test('type mapping matches across backends', async (t) => {
      await db.exec(`CREATE TABLE type_probe (
        id int8, at timestamptz, doc jsonb, tags text[], ids int8[], maybe text[]
      )`);
      const at = new Date('2024-05-06T07:08:09.123Z');
      await db.query('INSERT INTO type_probe VALUES ($1, $2, $3, $4, $5, NULL)', [
        9_007_199_254_740_991,
        at,
        { a: [1, 'x', null], nested: { ok: true } },
        ['read', 'write', 'with,comma', 'with "quote"'],
        [1, null, 3],
      ]);
      const [row] = await db.query<Record<string, unknown>>('SELECT * FROM type_probe');
      t.equal(row?.['id'], 9_007_199_254_740_991, 'int8 → number');
      t.type(row?.['id'], 'number');
      t.ok(row?.['at'] instanceof Date, 'timestamptz → Date');
      t.equal((row?.['at'] as Date).toISOString(), at.toISOString());
      t.same(row?.['doc'], { a: [1, 'x', null], nested: { ok: true } }, 'jsonb → parsed');
      t.same(row?.['tags'], ['read', 'write', 'with,comma', 'with "quote"'], 'text[] → string[]');
      t.same(row?.['ids'], [1, null, 3], 'int8[] → number[]');
      t.equal(row?.['maybe'], null, 'NULL → null');

      const [count] = await db.query<{ n: unknown }>('SELECT count(*) AS n FROM type_probe');
      t.equal(count?.n, 1, 'count(*) is int8 → number');

      const [arr] = await db.query<{ doc: unknown }>('SELECT $1::jsonb AS doc', [JSON.stringify([1, 2])]);
      t.same(arr?.doc, [1, 2], 'jsonb array passed as JSON text');

      await t.rejects(db.query('SELECT 9007199254740993::int8 AS n'), RangeError, 'int8 beyond 2^53 is an error');
      t.same(await db.query('SELECT 1 AS ok'), [{ ok: 1 }], 'still usable after the parse error');
    });

    t.test('transaction commits', async (t) => {
      await db.exec('CREATE TABLE tx_probe (id int PRIMARY KEY, note text)');
      const result = await db.transaction(async (tx) => {
        await tx.query('INSERT INTO tx_probe VALUES ($1, $2)', [1, 'one']);
        await tx.exec("INSERT INTO tx_probe VALUES (2, 'two'); INSERT INTO tx_probe VALUES (3, 'three')");
        return (await tx.query<{ n: number }>('SELECT count(*) AS n FROM tx_probe'))[0]?.n;
      });
      t.equal(result, 3, 'fn result is returned and sees its own writes');
      t.same(await db.query('SELECT id FROM tx_probe ORDER BY id'), [{ id: 1 }, { id: 2 }, { id: 3 }]);
    });

    t.test('transaction rolls back when fn throws', async (t) => {
      const boom = new Error('boom');
      const caught = await db
        .transaction(async (tx) => {
          await tx.query('INSERT INTO tx_probe VALUES ($1, $2)', [10, 'ten']);
          throw boom;
        })
        .then(
          () => undefined,
          (err: unknown) => err,
        );
      t.equal(caught, boom, 'the same error is propagated');
      t.same(await db.query('SELECT id FROM tx_probe WHERE id = 10'), [], 'row not there afterwards');
    });

    t.test('transaction rolls back on a failing statement', async (t) => {
      const code = await sqlState(
        db.transaction(async (tx) => {
          await tx.query('INSERT INTO tx_probe VALUES ($1, $2)', [20, 'twenty']);
          await tx.query('INSERT INTO tx_probe VALUES ($1, $2)', [1, 'duplicate']);
        }),
      );
      t.equal(code, '23505', 'unique violation surfaces with its SQLSTATE');
      t.same(await db.query('SELECT id FROM tx_probe WHERE id = 20'), []);
    });

    t.test('a swallowed statement error still fails the commit', async (t) => {
      await t.rejects(
        db.transaction(async (tx) => {
          await tx.query('INSERT INTO tx_probe VALUES ($1, $2)', [30, 'thirty']);
          await tx.query('SELECT 1/0').catch(() => undefined);
        }),
      );
      t.same(await db.query('SELECT id FROM tx_probe WHERE id = 30'), [], 'nothing committed');
    });

    t.test('a transaction handle cannot be used after the transaction', async (t) => {
      let leaked: { query: (sql: string) => Promise<unknown> } | undefined;
      await db.transaction(async (tx) => {
        leaked = tx;
      });
      await t.rejects(leaked?.query('SELECT 1') ?? Promise.resolve(), /closed/);
    });

    t.test('exec runs a multi-statement script', async (t) => {
      await db.exec(`
        CREATE TABLE script_probe (id int PRIMARY KEY);
        INSERT INTO script_probe VALUES (1), (2);
        -- a comment between statements
        UPDATE script_probe SET id = id * 10;
      `);
      t.same(await db.query('SELECT id FROM script_probe ORDER BY id'), [{ id: 10 }, { id: 20 }]);
      await t.rejects(db.exec('SELECT 1; SELECT * FROM no_such_table'), 'an error in a script rejects');
    });

    t.test('concurrent transactions with SELECT ... FOR UPDATE lose no increment', async (t) => {
      await db.exec('CREATE TABLE counter (id int PRIMARY KEY, n int NOT NULL); INSERT INTO counter VALUES (1, 0);');
      const workers = 25;
      await Promise.all(
        Array.from({ length: workers }, () =>
          db.transaction(async (tx) => {
            const [row] = await tx.query<{ n: number }>('SELECT n FROM counter WHERE id = 1 FOR UPDATE');
            // Read, then write back from JS: only the row lock keeps this from losing updates.
            await new Promise((r) => setImmediate(r));
            await tx.query('UPDATE counter SET n = $1 WHERE id = 1', [(row?.n ?? 0) + 1]);
          }),
        ),
      );
      t.same(await db.query('SELECT n FROM counter WHERE id = 1'), [{ n: workers }]);
    });
  });
}

t.test('pglite only', async (t) => {
  t.test('data persists across close and reopen', async (t) => {
    const dir = join(await tempDir(t, 'countersign-pglite-'), 'nested', 'data');
    const first = await openPglite(dir);
    t.equal(first.kind, 'pglite');
    t.equal(await readFile(join(dir, LOCK_FILE_NAME), 'utf8'), `${process.pid}\n`, 'lock holds our PID');
    await migrate(first);
    await first.query('INSERT INTO organizations (id, name, created_at) VALUES ($1, $2, now())', [ORG_ID, 'kept']);
    await first.close();
    await first.close();
    t.notOk(existsSync(join(dir, LOCK_FILE_NAME)), 'lock removed on close');

    const second = await openPglite(dir);
    t.teardown(() => second.close());
    t.same(await second.query('SELECT name FROM organizations'), [{ name: 'kept' }]);
    t.same((await migrate(second)).applied, [], 'schema kept too');
  });

  t.test('a directory locked by another live process is refused', async (t) => {
    const dir = await tempDir(t, 'countersign-pglite-');
    const lockPath = join(dir, LOCK_FILE_NAME);
    await writeFile(lockPath, `${process.ppid}\n`);
    const err = await openPglite(dir).then(
      () => undefined,
      (e: unknown) => e as Error & { code?: string },
    );
    t.equal(err?.code, 'DATA_DIR_LOCKED');
    t.match(err?.message, new RegExp(`PID ${process.ppid}\\b`), 'names the PID holding it');
    t.match(err?.message, /[Ss]top that server first/);
    t.equal(await readFile(lockPath, 'utf8'), `${process.ppid}\n`, 'the other lock is left alone');
  });

  t.test('a stale lock (dead PID) is taken over', async (t) => {
    const dir = await tempDir(t, 'countersign-pglite-');
    const lockPath = join(dir, LOCK_FILE_NAME);
    await writeFile(lockPath, `${deadPid()}\n`);
    const db = await openPglite(dir);
    t.equal(await readFile(lockPath, 'utf8'), `${process.pid}\n`);
    await t.resolves(db.ping());

    const again = await openPglite(dir).then(
      () => undefined,
      (e: unknown) => e as { code?: string },
    );
    t.equal(again?.code, 'DATA_DIR_LOCKED', 'a second open in this process is refused too');
    await db.close();
    t.notOk(existsSync(lockPath));
  });

  t.test('a garbage lock file is treated as stale', async (t) => {
    const dir = await tempDir(t, 'countersign-pglite-');
    await writeFile(join(dir, LOCK_FILE_NAME), 'not a pid');
    const db = await openPglite(dir);
    t.equal((await readFile(join(dir, LOCK_FILE_NAME), 'utf8')).trim(), String(process.pid), 'the lock is taken over');
    await db.close();
  });

  t.test('openDb without a database URL: PGlite under <dataDir>/pglite', async (t) => {
    const dataDir = await tempDir(t, 'countersign-data-');
    const db = await openDb({ dataDir });
    t.teardown(() => db.close());
    t.equal(db.kind, 'pglite');
    t.ok(existsSync(join(dataDir, 'pglite', LOCK_FILE_NAME)));
    t.same((await migrate(db)).applied, (await listMigrations()).map((file) => `${String(file.version).padStart(4, '0')}_${file.name}`));
  });
});

t.test('postgres only', async (t) => {
  const url = process.env['DATABASE_URL'];
  if (!url) {
    t.comment(postgresSkipReason() ?? '');
    return;
  }

  t.test('ping rejects when nothing listens', async (t) => {
    const db = new PgDb({ connectionString: `postgres://postgres@127.0.0.1:${await deadPort()}/postgres`, connectTimeoutMs: 5_000 });
    t.teardown(() => db.close());
    await t.rejects(db.ping());
  });

  t.test('an idle connection killed by the server reaches onError, not a crash', async (t) => {
    let reportError: (err: Error) => void = () => undefined;
    const reported = new Promise<Error>((resolve) => (reportError = resolve));
    const db = new PgDb({ connectionString: url, max: 1, onError: (err) => reportError(err) });
    t.teardown(() => db.close());
    const [row] = await db.query<{ pid: number }>('SELECT pg_backend_pid() AS pid');
    const admin = new pg.Client({ connectionString: url });
    await admin.connect();
    t.teardown(() => admin.end());
    await admin.query('SELECT pg_terminate_backend($1)', [row?.pid]);
    t.type(await reported, Error);
    await t.resolves(db.ping(), 'the pool opens a new connection');
  });

  t.test('a connection lost inside a transaction is discarded, not reused', async (t) => {
    const db = new PgDb({ connectionString: url, max: 1, onError: () => undefined });
    t.teardown(() => db.close());
    await t.rejects(
      db.transaction(async (tx) => {
        await tx.query('SELECT pg_terminate_backend(pg_backend_pid())');
      }),
    );
    // With max: 1, this only works if the dead connection left the pool.
    await t.resolves(db.ping());
  });

  t.test('openDb with a database URL: PgDb', async (t) => {
    const db = await openDb({ databaseUrl: url, dataDir: '/nonexistent' });
    t.teardown(() => db.close());
    t.equal(db.kind, 'postgres');
    await t.resolves(db.ping());
  });
});
