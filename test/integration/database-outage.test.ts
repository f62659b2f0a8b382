/**
 * Regression: with Postgres down the authority once answered `500 internal`, because
 * the failure surfaced while authenticating, before any route could map it. Every endpoint, the
 * auth layer included, must answer 503 in the error envelope (`service_unavailable`, or
 * `audit_unavailable` where the audited write itself failed) with `request_id` and `Retry-After`,
 * never 500; a request refused during the outage leaves no record; and once the database is back
 * the same requests succeed without restarting the authority.
 *
 * Real Postgres: a server of this test's own (test/helpers/postgres-server.ts) that it stops and
 * starts again. PGlite: the embedded database closed under the running app.
 */
import t, { type Test } from 'tap';
import type { LightMyRequestResponse } from 'fastify';
import { migrate } from '../../authority/store/migrate.js';
import { PgDb } from '../../authority/store/pg.js';
import { MemoryStore } from '../../shared/store/memory.js';
import { ErrorEnvelope } from '../../shared/wire/envelope.js';
import { EvaluateResponse } from '../../shared/wire/evaluate.js';
import { createTestAuthority, GENEROUS_LIMITS, type TestAuthority } from '../helpers/authority.js';
import { appBackends, type OpenedBackend } from '../helpers/backends.js';
import { ManualClock } from '../helpers/clock.js';
import { startDedicatedPostgres } from '../helpers/postgres-server.js';

const demo = (requestId: string) => ({ action_type: 'demo.echo', actor_id: 'demo-agent', request_id: requestId, context: { environment: 'dev', target: { type: 'demo', id: requestId } } });

interface Probe {
  name: string;
  method: 'GET' | 'POST';
  url: string;
  headers: Record<string, string>;
  payload?: string;
}

/** One request per kind of endpoint: the audited write, reads, verification, both identities. */
async function probes(authority: TestAuthority, permit: { id: string; token: string }, evaluateRequestId: string): Promise<Probe[]> {
  const key = authority.bearer(authority.acmeAdmin);
  // Never used before: no cache holds it, so authenticating it needs the database.
  const unseenKey = authority.bearer(await authority.key(['audit:read']));
  const user = authority.bearer(await authority.idp.sign({ sub: 'user-1', email: 'user-1@acme.test', org_id: authority.acme.id, role: 'admin' }));
  const json = { ...key, 'content-type': 'application/json' };
  return [
    { name: 'evaluate', method: 'POST', url: '/v1/evaluate', headers: json, payload: JSON.stringify(demo(evaluateRequestId)) },
    { name: 'audit events', method: 'GET', url: '/v1/audit/events', headers: key },
    { name: 'permit read', method: 'GET', url: `/v1/permits/${permit.id}`, headers: key },
    { name: 'verify-permit', method: 'POST', url: '/v1-verify-permit', headers: json, payload: JSON.stringify({ permit_token: permit.token, action_type: 'demo.echo', actor_id: 'demo-agent' }) },
    { name: 'api-key-self (authentication of an unseen key)', method: 'GET', url: '/v1-api-key-self', headers: unseenKey },
    { name: 'session (authentication of a user token)', method: 'GET', url: '/v1/session', headers: user },
    { name: 'policy read', method: 'GET', url: '/v1/policies', headers: key },
  ];
}

const send = (authority: TestAuthority, probe: Probe, requestId: string): Promise<LightMyRequestResponse> =>
  authority.app.inject({ method: probe.method, url: probe.url, headers: { ...probe.headers, 'x-request-id': requestId }, ...(probe.payload === undefined ? {} : { payload: probe.payload }) });

/** Every probe is refused with a retryable 503 in the envelope. */
async function assertUnavailable(t: Test, authority: TestAuthority, list: Probe[]): Promise<void> {
  for (const [index, probe] of list.entries()) {
    const requestId = `outage-${index}`;
    const response = await send(authority, probe, requestId);
    t.equal(response.statusCode, 503, `${probe.name}: 503 (${response.body})`);
    const parsed = ErrorEnvelope.safeParse(response.json());
    t.ok(parsed.success, `${probe.name}: the error envelope`);
    if (!parsed.success) continue;
    t.ok(['service_unavailable', 'audit_unavailable'].includes(parsed.data.error), `${probe.name}: ${parsed.data.error}`);
    t.equal(parsed.data.request_id, requestId, `${probe.name}: the request id is in the body`);
    t.equal(response.headers['x-request-id'], requestId, `${probe.name}: and in X-Request-ID`);
    t.match(String(response.headers['retry-after']), /^[1-9][0-9]*$/, `${probe.name}: Retry-After in seconds`);
  }
}

const readiness = async (authority: TestAuthority) => {
  const response = await authority.app.inject({ method: 'GET', url: '/readyz' });
  return { status: response.statusCode, database: response.json().checks?.database };
};

async function evaluateAllowed(authority: TestAuthority, requestId: string) {
  const response = await authority.app.inject({ method: 'POST', url: '/v1/evaluate', headers: { ...authority.bearer(authority.acmeAdmin), 'content-type': 'application/json' }, payload: JSON.stringify(demo(requestId)) });
  if (response.statusCode !== 200) throw new Error(`evaluate answered ${response.statusCode}: ${response.body}`);
  const body = EvaluateResponse.parse(response.json());
  if (!body.permit_id || !body.permit_token) throw new Error(`no permit: ${response.body}`);
  return { id: body.permit_id, token: body.permit_token };
}

t.test('postgres stopped: every endpoint answers 503 with Retry-After, nothing is recorded, and it recovers without a restart', async (t) => {
  const outcome = await startDedicatedPostgres();
  if (!outcome.ok) {
    t.comment(`postgres variant not run: ${outcome.reason} (CI installs postgresql; the PGlite variant below still runs)`);
    return;
  }
  const server = outcome.server;
  t.teardown(() => server.close());
  // The pool's errors on idle connections are expected here; the process must not warn or crash.
  const db = new PgDb({ connectionString: server.url, onError: () => undefined });
  await migrate(db);
  // The store and the app share one clock, as in appBackends().
  const clock = new ManualClock(Date.now());
  const store = new MemoryStore({ now: () => clock.now() });
  const opened: OpenedBackend = { db, store, openPeerStore: () => store, cleanup: async () => { await store.close(); await db.close(); } };
  const authority = await createTestAuthority(opened, { config: GENEROUS_LIMITS, clock });
  t.teardown(async () => {
    await authority.close();
    await opened.cleanup();
  });

  const permit = await evaluateAllowed(authority, 'before-outage');
  const list = await probes(authority, permit, 'during-outage');
  const records = async () => {
    const [row] = await db.query<{ permits: number; events: number; evaluations: number; refused: number }>(
      `SELECT (SELECT count(*) FROM permits WHERE org_id = $1)::int AS permits,
              (SELECT count(*) FROM audit_events WHERE org_id = $1)::int AS events,
              (SELECT count(*) FROM evaluations WHERE org_id = $1)::int AS evaluations,
              (SELECT count(*) FROM evaluations WHERE org_id = $1 AND request_id = 'during-outage')::int AS refused`,
      [authority.acme.id],
    );
    return row;
  };
  const before = await records();

  await server.stop();
  t.same(await readiness(authority), { status: 503, database: 'unavailable' }, '/readyz says not ready');
  await assertUnavailable(t, authority, list);
  t.equal(authority.logs.filter((line) => line.includes('answered with 500')).length, 0, 'no 500 was logged');

  await server.start();
  t.same(await records(), before, 'the refused requests left no evaluation, permit or audit event');
  t.same(await readiness(authority), { status: 200, database: 'ok' }, '/readyz is ready again');
  const statuses: Record<string, number> = {};
  for (const probe of list) statuses[probe.name] = (await send(authority, probe, `after-${probe.name.replace(/\W+/g, '-')}`)).statusCode;
  t.same(statuses, Object.fromEntries(list.map((probe) => [probe.name, 200])), 'the same requests succeed on the same authority');

  const after = await records();
  t.equal(after?.refused, 1, 'the evaluation refused during the outage is recorded once, when retried');
  const permitRow = await db.query<{ status: string }>('SELECT status FROM permits WHERE id = $1', [permit.id]);
  t.equal(permitRow[0]?.status, 'consumed', 'the permit whose verification was refused stayed usable, and the retry consumed it');
});

t.test('pglite closed under the running app: every endpoint answers 503 in the envelope, never 500', async (t) => {
  const [embedded] = appBackends();
  const clock = new ManualClock(Date.now());
  const opened = await embedded!.open({ now: () => clock.now() });
  const authority = await createTestAuthority(opened, { config: GENEROUS_LIMITS, clock });
  t.teardown(async () => {
    await authority.close();
    await opened.cleanup();
  });
  const permit = await evaluateAllowed(authority, 'before-close');
  const list = await probes(authority, permit, 'after-close');

  await opened.db.close();
  t.same(await readiness(authority), { status: 503, database: 'unavailable' }, '/readyz says not ready');
  await assertUnavailable(t, authority, list);
  t.equal(authority.logs.filter((line) => line.includes('answered with 500')).length, 0, 'no 500 was logged');
});
