/**
 * The migrations, on every backend of dbBackends() (PGlite always, Postgres when DATABASE_URL is
 * set): a run applies each migration once and records it, a failing one changes nothing,
 * concurrent runs do not collide, a downgrade or a diverged history is refused, and the schema
 * they make holds its constraints and compression. Then where the migrations are found.
 *
 * @example
 *   npx tap test/integration/db-migrations.test.ts
 */
import { existsSync } from 'node:fs';
import { mkdir, readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import t from 'tap';
import type { Test } from 'tap';
import type { Db } from '../../authority/store/db.js';
import { listMigrations, migrate, packageRoot } from '../../authority/store/migrate.js';
import { dbBackends, sqlState, tempDir } from '../helpers/db.js';

const ORG_ID = '00000000-0000-4000-8000-000000000001';

/** Writes migration files into a fresh folder: the real ones plus `extra`. */
async function migrationsDir(t: Test, extra: Record<string, string>): Promise<string> {
  const dir = await tempDir(t, 'countersign-migrations-');
  for (const file of await listMigrations()) {
    await writeFile(join(dir, `${String(file.version).padStart(4, '0')}_${file.name}.sql`), await readFile(file.path));
  }
  for (const [name, sql] of Object.entries(extra)) await writeFile(join(dir, name), sql);
  return dir;
}

async function tableExists(db: Db, name: string): Promise<boolean> {
  const [row] = await db.query<{ found: boolean }>('SELECT to_regclass($1) IS NOT NULL AS found', [name]);
  return row?.found === true;
}

for (const backend of dbBackends()) {
  t.test(backend.name, async (t) => {
    const { db, cleanup } = await backend.open();
    t.teardown(cleanup);

    t.test('migrate is idempotent and records versions', async (t) => {
      const again = await migrate(db);
      t.same(again.applied, [], 'second run applies nothing');
      const rows = await db.query<{ version: number; name: string; applied_at: Date }>(
        'SELECT version, name, applied_at FROM schema_migrations ORDER BY version',
      );
      t.same(
        rows.map((r) => [r.version, r.name]),
        (await listMigrations()).map((m) => [m.version, m.name]),
      );
      t.equal(rows[0]?.version, 1);
      t.equal(rows[0]?.name, 'foundation');
      t.ok(rows[0]?.applied_at instanceof Date);
    });

    t.test('the stored response and audit payload compress with lz4 where the server has it', async (t) => {
      // attcompression: 'l' for lz4, '' for the server's default (pglz).
      const rows = await db.query<{ column: string; compression: string }>(
        `SELECT attrelid::regclass::text || '.' || attname AS column, attcompression::text AS compression
           FROM pg_attribute
          WHERE (attrelid, attname) IN (('evaluations'::regclass, 'response'), ('audit_events'::regclass, 'payload'))
          ORDER BY 1`,
      );
      const expected = backend.name === 'postgres' ? 'l' : '';
      t.same(rows, [
        { column: 'audit_events.payload', compression: expected },
        { column: 'evaluations.response', compression: expected },
      ], backend.name === 'postgres' ? 'lz4 on Postgres built with it' : 'PGlite has no lz4: the default stays and the migration still applies');
    });

    t.test('a failing migration changes nothing', async (t) => {
      const dir = await migrationsDir(t, {
        '9001_ok.sql': 'CREATE TABLE mig_ok (id int);',
        '9002_broken.sql': 'CREATE TABLE mig_broken (id int); SELECT * FROM no_such_table;',
      });
      await t.rejects(migrate(db, { dir }));
      t.notOk(await tableExists(db, 'mig_ok'), 'earlier migration of the same run rolled back');
      t.notOk(await tableExists(db, 'mig_broken'));
      t.same(await db.query('SELECT version FROM schema_migrations WHERE version > 9000'), []);
    });

    t.test('concurrent migrate runs apply each migration once', async (t) => {
      const dir = await migrationsDir(t, {
        '9001_ok.sql': 'CREATE TABLE mig_ok (id int);',
        '9002_more.sql': 'ALTER TABLE mig_ok ADD COLUMN note text;',
      });
      const results = await Promise.all([migrate(db, { dir }), migrate(db, { dir }), migrate(db, { dir })]);
      t.same(results.flatMap((r) => r.applied).sort(), ['9001_ok', '9002_more']);
      t.ok(await tableExists(db, 'mig_ok'));
    });

    t.test('migrate refuses a downgrade and a diverged history', async (t) => {
      const older = await migrationsDir(t, {});
      await t.rejects(migrate(db, { dir: older }), /newer than this build/);
      const diverged = await migrationsDir(t, {
        '9000_gap.sql': 'SELECT 1;',
        '9001_ok.sql': 'SELECT 1;',
        '9002_more.sql': 'SELECT 1;',
      });
      await t.rejects(migrate(db, { dir: diverged }), /diverged/);
      const badName = await migrationsDir(t, { 'add-thing.sql': 'SELECT 1;' });
      await t.rejects(migrate(db, { dir: badName }), /NNNN_name\.sql/);
    });

    t.test('the 0001 tables and their constraints', async (t) => {
      const now = new Date();
      await db.query('INSERT INTO organizations (id, name, created_at) VALUES ($1, $2, $3)', [ORG_ID, 'acme', now]);
      const [org] = await db.query<{ plan: string; is_test: boolean }>(
        'SELECT plan, is_test FROM organizations WHERE id = $1',
        [ORG_ID],
      );
      t.same(org, { plan: 'community', is_test: false }, 'defaults');
      t.equal(
        await sqlState(
          db.query('INSERT INTO organizations (id, name, plan, created_at) VALUES ($1, $2, $3, $4)', [
            '00000000-0000-4000-8000-000000000002',
            'gold-co',
            'gold',
            now,
          ]),
        ),
        '23514',
        "plan CHECK rejects 'gold'",
      );
      t.equal(
        await sqlState(
          db.query('INSERT INTO organizations (id, name, created_at) VALUES ($1, $2, $3)', [
            '00000000-0000-4000-8000-000000000003',
            'acme',
            now,
          ]),
        ),
        '23505',
        'organization name UNIQUE',
      );

      const insertKey = (id: string, orgId: string, hash: string): Promise<unknown> =>
        db.query(
          `INSERT INTO api_keys (id, org_id, name, key_hash, display_prefix, scopes, created_by, created_at)
           VALUES ($1, $2, 'ci', $3, 'ask_live_AbCd', $4, 'test', $5)`,
          [id, orgId, hash, ['evaluate', 'keys:read'], now],
        );
      await insertKey('10000000-0000-4000-8000-000000000001', ORG_ID, 'a'.repeat(64));
      const [key] = await db.query<{ scopes: string[]; allowed_cidrs: string[] | null; revoked_at: Date | null }>(
        'SELECT scopes, allowed_cidrs, revoked_at FROM api_keys',
      );
      t.same(key, { scopes: ['evaluate', 'keys:read'], allowed_cidrs: null, revoked_at: null });
      t.equal(
        await sqlState(insertKey('10000000-0000-4000-8000-000000000002', ORG_ID, 'a'.repeat(64))),
        '23505',
        'api_keys.key_hash UNIQUE',
      );
      t.equal(
        await sqlState(insertKey('10000000-0000-4000-8000-000000000003', '00000000-0000-4000-8000-0000000000ff', 'b'.repeat(64))),
        '23503',
        'api_keys.org_id references organizations',
      );
      t.equal(
        await sqlState(db.query('INSERT INTO organizations (id, name) VALUES ($1, $2)', ['00000000-0000-4000-8000-000000000004', 'x'])),
        '23502',
        'created_at NOT NULL',
      );
    });
  });
}

t.test('migrations are found from the package root', async (t) => {
  t.ok(existsSync(join(packageRoot(), 'package.json')));
  const files = await listMigrations();
  t.equal(files[0]?.name, 'foundation');
  const nested = join(await tempDir(t, 'countersign-root-'), 'a', 'b');
  await mkdir(nested, { recursive: true });
  await writeFile(join(nested, '..', 'package.json'), '{}');
  t.equal(packageRoot(nested), join(nested, '..'));
});
