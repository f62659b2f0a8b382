/**
 * First start (organization `default`, an admin key in a 0600 bootstrap.json, or the key from
 * COUNTERSIGN_BOOTSTRAP_KEY) and the administration commands (`orgs`, `keys`), on both
 * database backends.
 */
import { mkdtemp, readFile, stat, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import t from 'tap';
import { findApiKeyBySecret } from '../../authority/api-keys/keys.js';
import { runAdminCommand } from '../../authority/cli/admin-commands.js';
import { bootstrap } from '../../authority/orgs/bootstrap.js';
import { findOrganization } from '../../authority/orgs/organizations.js';
import { SCOPES } from '../../shared/wire/scopes.js';
import { dbBackends } from '../helpers/db.js';
import { ManualClock } from '../helpers/clock.js';

for (const backend of dbBackends()) {
  t.test(`bootstrap on ${backend.name}`, async (t) => {
    const { db, cleanup } = await backend.open();
    t.teardown(cleanup);
    const dataDir = await mkdtemp(join(tmpdir(), 'countersign-boot-'));
    const clock = new ManualClock();

    const result = await bootstrap(db, { dataDir, clock });
    t.ok(result, 'an empty database is bootstrapped');
    const file = join(dataDir, 'bootstrap.json');
    t.equal(result?.file, file);
    t.equal((await stat(file)).mode & 0o777, 0o600, 'bootstrap.json is readable by its owner only');
    const written = JSON.parse(await readFile(file, 'utf8'));
    t.same(Object.keys(written).sort(), ['api_key', 'database', 'organization_id']);
    t.match(written.database, backend.name === 'pglite' ? `embedded:${dataDir}` : /^postgres:\/\/[^:@]+@[^/]+\/countersign_test_/, 'it names its database, without a password');
    t.match(written.api_key, /^ask_test_[A-Za-z0-9]{40}$/);

    const org = await findOrganization(db, 'default');
    t.equal(org?.id, written.organization_id, 'organization "default" exists');
    const key = await findApiKeyBySecret(db, written.api_key);
    t.same([...(key?.key.scopes ?? [])].sort(), [...SCOPES].sort(), 'the admin key holds every scope');
    t.equal(key?.org.name, 'default');

    t.equal(await bootstrap(db, { dataDir, clock }), null, 'a second start changes nothing');
  });

  t.test(`an existing bootstrap.json is never overwritten: a second, empty database on the same data directory (${backend.name}) gets its own file`, async (t) => {
    const embedded = await dbBackends()[0]!.open();
    t.teardown(embedded.cleanup);
    const { db, cleanup } = await backend.open();
    t.teardown(cleanup);
    const dataDir = await mkdtemp(join(tmpdir(), 'countersign-boot-'));
    const clock = new ManualClock();
    const warnings: Array<{ fields: Record<string, unknown>; message: string }> = [];
    const logger = { warn: (fields: Record<string, unknown>, message: string) => void warnings.push({ fields, message }) };

    const first = await bootstrap(embedded.db, { dataDir, clock, logger });
    const file = join(dataDir, 'bootstrap.json');
    const before = await readFile(file, 'utf8');
    t.equal(first?.kept, null);
    t.same(warnings, [], 'the first bootstrap warns about nothing');

    // DATABASE_URL now points at an empty database; the data directory stays the same.
    const second = await bootstrap(db, { dataDir, clock, logger });
    t.equal(await readFile(file, 'utf8'), before, 'bootstrap.json is left as it was');
    t.equal(second?.kept, file);
    t.match(second?.file, /bootstrap-\d{8}T\d{6}Z\.json$/, 'the new key goes to a file of its own');
    t.not(second?.file, file);
    t.equal((await stat(second!.file!)).mode & 0o777, 0o600, 'readable by its owner only');
    const written = JSON.parse(await readFile(second!.file!, 'utf8'));
    t.equal(written.organization_id, second?.organizationId);
    t.ok(await findApiKeyBySecret(db, written.api_key), 'the new file holds the admin key of the new database');
    t.ok(await findApiKeyBySecret(embedded.db, JSON.parse(before).api_key), 'and the old key still opens the old one');

    t.equal(warnings.length, 1, 'one warning');
    const [warning] = warnings;
    t.match(warning?.message, file, 'naming the file kept');
    t.match(warning?.message, second!.file!, 'and the new one');
    t.match(warning?.message, `another database (embedded:${dataDir})`, 'and the database the kept file belongs to');
    t.match(warning?.fields, { file: second?.file, kept: file, kept_database: `embedded:${dataDir}` });
    t.notOk(JSON.stringify(warning).includes(written.api_key), 'without the secret');

    const another = await dbBackends()[0]!.open();
    t.teardown(another.cleanup);
    const third = await bootstrap(another.db, { dataDir, clock, logger });
    t.not(third?.file, second?.file, 'a third database in the same second gets yet another file');
  });

  t.test(`bootstrap with COUNTERSIGN_BOOTSTRAP_KEY on ${backend.name}`, async (t) => {
    const { db, cleanup } = await backend.open();
    t.teardown(cleanup);
    const dataDir = await mkdtemp(join(tmpdir(), 'countersign-boot-'));
    const clock = new ManualClock();
    await t.rejects(bootstrap(db, { dataDir, clock, bootstrapKey: 'not-a-key' }), { code: 'API_KEY_SECRET_INVALID' }, 'a malformed key is refused');
    t.equal(await findOrganization(db, 'default'), null, 'and nothing was created');

    const supplied = `ask_live_${'Z9'.repeat(20)}`;
    const result = await bootstrap(db, { dataDir, clock, bootstrapKey: supplied });
    t.equal(result?.file, null, 'no file is written when the key was supplied');
    await t.rejects(stat(join(dataDir, 'bootstrap.json')), { code: 'ENOENT' });
    t.ok(await findApiKeyBySecret(db, supplied), 'the supplied key works');
  });
}

/** A configuration for the CLI that points at a fresh database of the backend under test. */
async function cliTarget(name: 'pglite' | 'postgres'): Promise<{ env: NodeJS.ProcessEnv; config: string; cleanup(): Promise<void> }> {
  const dir = await mkdtemp(join(tmpdir(), 'countersign-cli-'));
  const config = join(dir, 'authority.yaml');
  await writeFile(config, `data_dir: ${join(dir, 'data')}\n`);
  if (name === 'pglite') return { env: {}, config, cleanup: async () => undefined };
  const admin = new pg.Client({ connectionString: process.env.DATABASE_URL });
  await admin.connect();
  const database = `cli_${Math.random().toString(36).slice(2, 10)}`;
  await admin.query(`CREATE DATABASE ${database}`);
  const url = new URL(process.env.DATABASE_URL as string);
  url.pathname = `/${database}`;
  return {
    env: { DATABASE_URL: url.toString(), COUNTERSIGN_ALLOW_IN_PROCESS_STORE: '1' },
    config,
    cleanup: async () => {
      await admin.query(`DROP DATABASE IF EXISTS ${database} WITH (FORCE)`);
      await admin.end();
    },
  };
}

for (const backend of dbBackends()) {
  t.test(`countersign orgs and keys commands on ${backend.name}`, async (t) => {
    const target = await cliTarget(backend.name);
    t.teardown(target.cleanup);
    const run = async (...argv: string[]) => {
      const lines: string[] = [];
      await runAdminCommand([...argv, '--config', target.config], { out: (line) => lines.push(line), env: target.env });
      return JSON.parse(lines.join('\n'));
    };

    t.match(await run('migrate'), { applied: Array }, 'migrate prints what it applied');
    const { organization } = await run('orgs', 'create', '--name', 'acme', '--plan', 'business');
    t.match(organization, { name: 'acme', plan: 'business', is_test: false });
    t.equal((await run('orgs', 'list')).organizations.length, 1);

    const created = await run('keys', 'create', '--org', 'acme', '--name', 'ci', '--scopes', 'evaluate:write,verify:execute', '--allowed-cidrs', '10.0.0.0/8');
    t.match(created.secret, /^ask_live_/);
    t.same(created.api_key.scopes, ['evaluate:write', 'verify:execute']);
    t.same(created.api_key.allowed_cidrs, ['10.0.0.0/8']);

    const listed = await run('keys', 'list', '--org', organization.id);
    t.equal(listed.api_keys.length, 1);
    t.notOk(JSON.stringify(listed).includes(created.secret), 'list never prints a secret');

    const revoked = await run('keys', 'revoke', created.api_key.id, '--org', 'acme');
    t.ok(revoked.api_key.revoked_at);

    const agents = await run('keys', 'create', '--org', 'acme', '--name', 'mcp-gate', '--scopes', 'evaluate:write', '--actors', 'agent:*, ci-bot');
    t.same(agents.api_key.allowed_actors, ['agent:*', 'ci-bot'], '--actors restricts the actors the key may speak for');
    t.equal(created.api_key.allowed_actors, null, 'without --actors a key speaks for any actor');
    const stored = (await run('keys', 'list', '--org', 'acme')).api_keys.find((key: { id: string }) => key.id === agents.api_key.id);
    t.same(stored.allowed_actors, ['agent:*', 'ci-bot'], 'keys list shows what was stored');
    await t.rejects(run('keys', 'create', '--org', 'acme', '--name', 'x', '--scopes', 'evaluate:write', '--actors', 'age*nt'), { code: 'USAGE', message: /may only end an actor pattern/ }, 'a * inside a pattern is refused');

    await t.rejects(run('keys', 'create', '--org', 'acme', '--name', 'x', '--scopes', 'evaluate'), { code: 'USAGE', message: /resource:action/ }, 'a bare scope is refused');
    await t.rejects(run('keys', 'create', '--org', 'nope', '--name', 'x', '--scopes', 'audit:read'), /no organization "nope"/);
    await t.rejects(run('orgs', 'create', '--name', 'Bad Name'), { code: 'USAGE' });
    await t.rejects(run('keys', 'frobnicate'), /unknown command/);
  });
}
