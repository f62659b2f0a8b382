/**
 * The credential cache (authority/auth/credential-cache.ts) and the change notices it relies on
 * (migration 0005, Db.listen), on every backend: a cached API key must stop working once it is
 * revoked, whoever revoked it, and nothing may be served from memory while notices can be lost.
 *
 * @example
 *   npx tap test/integration/credential-cache.test.ts
 */
import pg from 'pg';
import t from 'tap';
import type { Test } from 'tap';
import { createApiKey } from '../../authority/api-keys/keys.js';
import { CREDENTIALS_CHANNEL, CredentialCache } from '../../authority/auth/credential-cache.js';
import { createAuthorityMetrics } from '../../authority/metrics.js';
import { createOrganization } from '../../authority/orgs/organizations.js';
import type { ChangeListener, Db } from '../../authority/store/db.js';
import { PgDb } from '../../authority/store/pg.js';
import { systemClock } from '../../authority/time.js';
import { createLogger } from '../../shared/logging.js';
import { createTestAuthority } from '../helpers/authority.js';
import { appBackends } from '../helpers/backends.js';
import { dbBackends, postgresSkipReason } from '../helpers/db.js';

/** Records what a listener hears, in order; `next()` waits for the next event. */
function recorder(): ChangeListener & { next(): Promise<string> } {
  const heard: string[] = [];
  const waiting: Array<(event: string) => void> = [];
  const push = (event: string): void => {
    const waiter = waiting.shift();
    if (waiter) waiter(event);
    else heard.push(event);
  };
  return {
    notice: (payload) => push(`notice ${payload}`),
    interrupted: () => push('interrupted'),
    resumed: () => push('resumed'),
    next: () => {
      const event = heard.shift();
      return event !== undefined ? Promise.resolve(event) : new Promise((resolve) => waiting.push(resolve));
    },
  };
}

/** A second connection to the same database, as the CLI or another replica would have (PGlite: the same one). */
function otherConnection(t: Test, opened: { db: Db; url?: string }): Db {
  if (!opened.url) return opened.db;
  const other = new PgDb({ connectionString: opened.url, max: 1 });
  t.teardown(() => other.close());
  return other;
}

/** Waits, without a deadline of its own (tap's test timeout is the bound), until `check` holds. */
async function eventually(check: () => Promise<boolean>): Promise<void> {
  while (!(await check())) await new Promise((resolve) => setTimeout(resolve, 5));
}

const quietLogger = createLogger({ name: 'test', level: 'silent' });

for (const backend of dbBackends()) {
  t.test(`${backend.name}: change notices`, async (t) => {
    const opened = await backend.open();
    t.teardown(opened.cleanup);
    const { db } = opened;
    const org = await createOrganization(db, { name: 'notices' }, systemClock);
    const { key } = await createApiKey(db, { org, name: 'k', scopes: ['audit:read'], createdBy: 'test' }, systemClock);
    const heard = recorder();
    const stop = db.listen(CREDENTIALS_CHANNEL, heard);
    t.teardown(stop);
    t.equal(await heard.next(), 'resumed', 'listening starts with resumed');

    const other = otherConnection(t, opened);
    // Notices arrive in commit order, so had the last_used_at write sent one, it would come first.
    await other.query('UPDATE api_keys SET last_used_at = now() WHERE id = $1', [key.id]);
    await other.query("UPDATE organizations SET name = 'notices-renamed' WHERE id = $1", [org.id]);
    t.equal(await heard.next(), 'notice organizations', 'last_used_at alone sends nothing; an organization change does');
    await other.query('UPDATE api_keys SET revoked_at = now() WHERE id = $1', [key.id]);
    t.equal(await heard.next(), 'notice api_keys', 'revoking a key sends a notice');
    await other.query('DELETE FROM api_keys WHERE id = $1', [key.id]);
    t.equal(await heard.next(), 'notice api_keys', 'deleting a key sends a notice');
    t.throws(() => db.listen('bad channel; DROP TABLE x', heard), RangeError, 'a channel name is never spelled into SQL unchecked');
  });

  t.test(`${backend.name}: a lookup that overlaps a change is not cached`, async (t) => {
    const opened = await backend.open();
    t.teardown(opened.cleanup);
    const org = await createOrganization(opened.db, { name: 'overlap' }, systemClock);
    const metrics = createAuthorityMetrics();
    const cache = new CredentialCache({ metrics, logger: quietLogger });
    const invalidated = cache.nextInvalidation();
    cache.start(opened.db);
    t.teardown(() => cache.close());
    await invalidated;
    t.ok(cache.serving, 'serving once listening');

    let loads = 0;
    const load = async () => ({ loaded: ++loads });
    t.same(await cache.lookup('key:a', load), { loaded: 1 });
    t.same(await cache.lookup('key:a', load), { loaded: 1 }, 'the second lookup is served from memory');

    let release!: () => void;
    const slow = cache.lookup('key:b', async () => {
      await new Promise<void>((resolve) => (release = resolve));
      return { loaded: 'before the change' };
    });
    const notice = cache.nextInvalidation();
    await otherConnection(t, opened).query("UPDATE organizations SET name = 'renamed' WHERE id = $1", [org.id]);
    await notice;
    release();
    await slow;
    t.same(await cache.lookup('key:b', async () => ({ loaded: 'after the change' })), { loaded: 'after the change' }, 'an answer read before the change was not kept');
    t.same(await cache.lookup('key:a', load), { loaded: 2 }, 'the notice emptied the cache');
    t.equal(await cache.lookup('key:none', async () => null), null);
    t.same(await cache.lookup('key:none', async () => ({ found: 'now' })), { found: 'now' }, 'an unknown credential is not remembered as unknown');
  });
}

const postgres = dbBackends().find((b) => b.name === 'postgres');
const noPostgres = postgresSkipReason();
if (noPostgres) t.comment(noPostgres);
if (postgres) t.test('postgres: while the listening connection is down, every lookup asks the database', async (t) => {
  const opened = await postgres.open();
  t.teardown(opened.cleanup);
  const metrics = createAuthorityMetrics();
  const cache = new CredentialCache({ metrics, logger: quietLogger });
  let invalidated = cache.nextInvalidation();
  cache.start(opened.db);
  t.teardown(() => cache.close());
  await invalidated;

  let loads = 0;
  const load = async () => ({ loaded: ++loads });
  await cache.lookup('key:a', load);
  await cache.lookup('key:a', load);
  t.equal(loads, 1, 'cached while listening');

  // Cut the listening connection from the server side, as a restart or a network drop would.
  invalidated = cache.nextInvalidation();
  const admin = new pg.Client({ connectionString: opened.url });
  await admin.connect();
  t.teardown(() => admin.end());
  const { rowCount } = await admin.query(
    'SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = current_database() AND query = $1',
    [`LISTEN ${CREDENTIALS_CHANNEL}`],
  );
  t.equal(rowCount, 1, 'one listening connection');
  await invalidated;
  t.notOk(cache.serving, 'not serving from memory while notices may be lost');
  await cache.lookup('key:a', load);
  await cache.lookup('key:a', load);
  t.equal(loads, 3, 'each lookup asked the database');
  await eventually(async () => cache.serving);
  await cache.lookup('key:a', load);
  await cache.lookup('key:a', load);
  t.equal(loads, 4, 'cached again once listening resumed, starting empty');
  const bypassed = (await metrics.credentialCache.get()).values.find((v) => v.labels.result === 'bypass');
  t.equal(bypassed?.value, 2, 'the bypassed lookups are counted');
});

for (const backend of appBackends()) {
  t.test(`${backend.name}: a revoked key stops working on notice when revoked elsewhere, and at once here`, async (t) => {
    const opened = await backend.open();
    t.teardown(opened.cleanup);
    const authority = await createTestAuthority(opened);
    t.teardown(() => authority.close());
    const self = (secret: string) => authority.app.inject({ method: 'GET', url: '/v1-api-key-self', headers: authority.bearer(secret) });
    const hits = async () => (await authority.metrics.credentialCache.get()).values.find((v) => v.labels.result === 'hit')?.value ?? 0;
    /** Uses `secret` once; `fromMemory`: the cache answered, no lookup was made. */
    const use = async (secret: string) => {
      const before = await hits();
      const response = await self(secret);
      return { status: response.statusCode, fromMemory: (await hits()) > before };
    };

    // The cache serves once its listening connection is up (on Postgres a connection of its own,
    // which may take a while on a busy machine), and every change notice empties it whenever it
    // arrives. Creating keys sends none, so once one key is served from memory nothing is pending
    // and the key stays cached until this test changes something: the checks below read from
    // memory by construction, not by timing.
    const cliRevoked = await authority.key(['audit:read']);
    const { key_id: cliRevokedId } = (await self(cliRevoked)).json();
    await eventually(async () => (await use(cliRevoked)).fromMemory);
    t.same(await use(cliRevoked), { status: 200, fromMemory: true }, 'the key is served from memory');

    // The CLI (`countersign keys revoke`) writes from another process, so only the notice tells this one.
    await otherConnection(t, opened).query('UPDATE api_keys SET revoked_at = now() WHERE id = $1', [cliRevokedId]);
    await eventually(async () => (await self(cliRevoked)).statusCode === 401);
    // That notice was the only thing that could empty the cache, so it has been handled: nothing is pending.
    t.equal((await self(cliRevoked)).statusCode, 401, 'refused once the notice arrived, and from then on');

    const apiRevoked = await authority.key(['audit:read']);
    const { key_id: apiRevokedId } = (await self(apiRevoked)).json();
    t.same(await use(apiRevoked), { status: 200, fromMemory: true }, 'the key is served from memory');
    const revoked = await authority.app.inject({ method: 'POST', url: `/v1/api-keys/${apiRevokedId}/revoke`, headers: authority.bearer(authority.acmeAdmin) });
    t.equal(revoked.statusCode, 200);
    // Its notice may arrive at any time from now on; the route emptied this process's cache itself.
    t.equal((await self(apiRevoked)).statusCode, 401, 'the very next request is refused');

    // The policy version travels with the cached organization: a new version applies at once.
    const policies = await authority.app.inject({ method: 'GET', url: '/v1/policies', headers: authority.bearer(authority.acmeAdmin) });
    const before = policies.json().policy.version;
    const put = await authority.app.inject({
      method: 'PUT',
      url: '/v1/policies',
      headers: authority.bearer(authority.acmeAdmin),
      payload: { source: policies.json().policy.source, format: policies.json().policy.format },
    });
    t.equal(put.statusCode, 200);
    const after = await authority.app.inject({ method: 'GET', url: '/v1/policies', headers: authority.bearer(authority.acmeAdmin) });
    t.equal(after.json().policy.version, before + 1, 'the next request sees the new version');
  });
}
