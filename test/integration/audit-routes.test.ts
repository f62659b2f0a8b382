/**
 * The audit routes over HTTP, on a guard-only app (error handling + the real guard with real API
 * keys + auditRoutes): cursor paging, filters, the SDK paths, signed exports that verify with the
 * published key, organization scoping, 401/403, and 400s for bad paging and export ranges.
 */
import { generateKeyPairSync, sign } from 'node:crypto';
import Fastify, { type FastifyInstance } from 'fastify';
import { serializerCompiler, validatorCompiler } from 'fastify-type-provider-zod';
import t, { type Test } from 'tap';
import { createApiKey } from '../../authority/api-keys/keys.js';
import { appendAuditEvents } from '../../authority/audit/chain.js';
import { MAX_EXPORT_EVENTS } from '../../authority/audit/export.js';
import { auditRoutes } from '../../authority/audit/routes.js';
import type { AuditKeys, NewAuditEvent } from '../../authority/audit/types.js';
import { verifyAuditBundle } from '../../authority/audit/verify-bundle.js';
import { createAuthenticator } from '../../authority/auth/authenticate.js';
import { UNCACHED } from '../../authority/auth/credential-cache.js';
import { parseAuthorityConfig } from '../../authority/config.js';
import { installErrorHandling } from '../../authority/http/errors.js';
import { installGuard } from '../../authority/http/guard.js';
import { createAuthorityMetrics } from '../../authority/metrics.js';
import { createOrganization, type Organization } from '../../authority/orgs/organizations.js';
import { RateLimiter } from '../../authority/ratelimit/limiter.js';
import type { Db } from '../../authority/store/db.js';
import { MemoryStore } from '../../shared/store/memory.js';
import { AuditBundle, AuditEventsResponse, AuditKeysResponse } from '../../shared/wire/audit.js';
import { ErrorEnvelope } from '../../shared/wire/envelope.js';
import type { Scope } from '../../shared/wire/scopes.js';
import { ManualClock } from '../helpers/clock.js';
import { dbBackends, postgresSkipReason } from '../helpers/db.js';

function testAuditKeys(): AuditKeys {
  const { privateKey, publicKey } = generateKeyPairSync('ed25519');
  return {
    signer: async () => ({ keyId: 'audit-1', sign: async (data) => new Uint8Array(sign(null, data, privateKey)) }),
    publicKeys: async () => [
      {
        key_id: 'audit-1',
        algorithm: 'Ed25519',
        public_key_pem: publicKey.export({ type: 'spki', format: 'pem' }).toString(),
        created_at: '2026-01-01T00:00:00.000Z',
        retired_at: null,
      },
    ],
  };
}

async function buildApp(db: Db, clock: ManualClock): Promise<FastifyInstance> {
  const metrics = createAuthorityMetrics();
  const app = Fastify();
  app.setValidatorCompiler(validatorCompiler);
  app.setSerializerCompiler(serializerCompiler);
  installErrorHandling(app);
  installGuard(app, {
    authenticate: createAuthenticator({ db, credentials: UNCACHED, clock, jwt: null, xServiceKeyEnabled: false, metrics }),
    limiter: new RateLimiter(new MemoryStore({ now: () => clock.now() }), parseAuthorityConfig({}).rate_limits, clock),
    metrics,
  });
  auditRoutes(app, { db, keys: testAuditKeys(), clock });
  await app.ready();
  return app;
}

const T0 = Date.parse('2026-11-21T12:00:00.000Z');

function events(org: Organization, count: number, start = 0): NewAuditEvent[] {
  return Array.from({ length: count }, (_, j) => {
    const i = start + j;
    return {
      orgId: org.id,
      type: i % 3 === 0 ? 'permit.issued' : i % 3 === 1 ? 'evaluation.decided' : 'permit.verified',
      actorId: i % 2 === 0 ? 'alice' : 'bob',
      decision: 'allow',
      resourceType: 'permit',
      resourceId: `permit-${i % 4}`,
      requestId: `req-${Math.floor(i / 2)}`,
      credential: 'api_key:seed',
      occurredAt: new Date(T0 + i * 60_000),
      details: { i },
    };
  });
}

for (const backend of dbBackends()) {
  t.test(`audit routes on ${backend.name}`, async (t) => {
    const { db, cleanup } = await backend.open();
    const clock = new ManualClock();
    const app = await buildApp(db, clock);
    t.teardown(async () => {
      await app.close();
      await cleanup();
    });
    const org = async (name: string) => createOrganization(db, { name: `${name}-${Math.random().toString(36).slice(2, 8)}`, plan: 'business' }, clock);
    const [acme, globex] = [await org('acme'), await org('globex')];
    const key = async (o: Organization, scopes: Scope[]) =>
      `Bearer ${(await createApiKey(db, { org: o, name: 'k', scopes, createdBy: 'test' }, clock)).secret}`;
    const [acmeReader, globexReader, acmeWriter] = [await key(acme, ['audit:read']), await key(globex, ['audit:read']), await key(acme, ['evaluate:write'])];
    await db.transaction((tx) => appendAuditEvents(tx, events(acme, 7), new Date(T0)));
    await db.transaction((tx) => appendAuditEvents(tx, events(globex, 3), new Date(T0)));

    const get = (url: string, authorization = acmeReader) => app.inject({ method: 'GET', url, headers: { authorization } });
    const list = async (t: Test, url: string, authorization = acmeReader) => {
      const response = await get(url, authorization);
      t.equal(response.statusCode, 200, url);
      return AuditEventsResponse.parse(response.json());
    };
    const sequences = async (t: Test, query: string) => (await list(t, `/v1/audit/events?${query}`)).events.map((e) => e.sequence);

    t.test('paging with limit and next_cursor', async (t) => {
      const first = await list(t, '/v1/audit/events');
      t.equal(first.events.length, 7, 'default limit 50');
      t.equal(first.next_cursor, null);
      t.equal(first.total, 7);
      t.ok(first.events.every((e) => e.organization_id === acme.id && e.request_id === e.payload.request_id));

      const seen: number[] = [];
      let url = '/v1/audit/events?limit=3';
      for (;;) {
        const page = await list(t, url);
        t.equal(page.total, 7);
        seen.push(...page.events.map((e) => e.sequence));
        if (page.next_cursor === null) break;
        url = `/v1/audit/events?limit=3&cursor=${encodeURIComponent(page.next_cursor)}`;
      }
      t.same(seen, [1, 2, 3, 4, 5, 6, 7], 'three pages, each event once, in order');
    });

    t.test('filters', async (t) => {
      t.same(await sequences(t, 'type=permit.issued'), [1, 4, 7]);
      t.same(await sequences(t, 'type=permit.issued&type=permit.verified'), [1, 3, 4, 6, 7], 'repeated');
      t.same(await sequences(t, 'type=permit.issued,permit.verified'), [1, 3, 4, 6, 7], 'comma list');
      t.same(await sequences(t, 'types=evaluation.decided'), [2, 5], "the SDK's types=");
      t.same(await sequences(t, 'actor_id=bob'), [2, 4, 6]);
      t.same(await sequences(t, 'request_id=req-1'), [3, 4]);
      t.same(await sequences(t, 'resource_id=permit-2'), [3, 7]);
      const from = encodeURIComponent(new Date(T0 + 2 * 60_000).toISOString());
      const to = encodeURIComponent(new Date(T0 + 5 * 60_000).toISOString());
      t.same(await sequences(t, `from=${from}&to=${to}`), [3, 4, 5]);
      const filtered = await list(t, '/v1/audit/events?actor_id=alice&limit=2');
      t.equal(filtered.total, 4, 'total counts the filtered events');
      t.not(filtered.next_cursor, null);
    });

    t.test("the SDK's path", async (t) => {
      const page = await list(t, '/v1-audit/events?types=permit.issued&limit=2');
      t.same(page.events.map((e) => e.sequence), [1, 4]);
      t.equal(page.total, 3);
      t.type(page.next_cursor, 'string');
    });

    t.test('organization scoping', async (t) => {
      const page = await list(t, '/v1/audit/events', globexReader);
      t.same(page.events.map((e) => e.sequence), [1, 2, 3], "its own chain");
      t.ok(page.events.every((e) => e.organization_id === globex.id), "another organization's events never appear");
      t.equal(page.total, 3);
      const response = await app.inject({ method: 'POST', url: '/v1/audit/exports', headers: { authorization: globexReader } });
      const bundle = AuditBundle.parse(response.json());
      t.equal(bundle.org_id, globex.id);
      t.equal(bundle.event_count, 3);
    });

    t.test('exports verify with the published key', async (t) => {
      const keys = AuditKeysResponse.parse((await get('/v1/audit/keys')).json()).keys;
      t.equal(keys.length, 1);
      const pem = keys[0]!.public_key_pem;

      const whole = await app.inject({ method: 'POST', url: '/v1/audit/exports', headers: { authorization: acmeReader } });
      t.equal(whole.statusCode, 200);
      t.match(whole.headers['content-type'], /^application\/json/);
      const bundle = AuditBundle.parse(whole.json());
      t.equal(bundle.event_count, 7);
      t.equal(bundle.signing_key_id, 'audit-1');
      t.same(verifyAuditBundle(whole.json(), pem).problems, [], 'the bundle as received verifies');

      const ranged = await app.inject({
        method: 'POST',
        url: '/v1-audit/exports',
        headers: { authorization: acmeReader },
        payload: { from_sequence: 2, to_sequence: 4 },
      });
      t.same(AuditBundle.parse(ranged.json()).events.map((e) => e.sequence), [2, 3, 4], "the SDK's path, a range");
      t.same(verifyAuditBundle(ranged.json(), pem).problems, []);

      const emptyJson = await app.inject({
        method: 'POST',
        url: '/v1/audit/exports',
        headers: { authorization: acmeReader, 'content-type': 'application/json' },
        payload: '',
      });
      t.equal(emptyJson.statusCode, 200, 'an empty body declared as JSON is "everything"');
      const zeroLength = await app.inject({
        method: 'POST',
        url: '/v1/audit/exports',
        headers: { authorization: acmeReader, 'content-type': 'application/json', 'content-length': '0' },
      });
      t.equal(AuditBundle.parse(zeroLength.json()).event_count, 7, 'so is Content-Length: 0');
      const braces = await app.inject({ method: 'POST', url: '/v1/audit/exports', headers: { authorization: acmeReader }, payload: {} });
      t.equal(AuditBundle.parse(braces.json()).event_count, 7, 'as is {}');
    });

    t.test('permissions', async (t) => {
      for (const [method, url] of [
        ['GET', '/v1/audit/events'],
        ['GET', '/v1-audit/events'],
        ['POST', '/v1/audit/exports'],
        ['POST', '/v1-audit/exports'],
        ['GET', '/v1/audit/keys'],
      ] as const) {
        const forbidden = await app.inject({ method, url, headers: { authorization: acmeWriter } });
        t.equal(forbidden.statusCode, 403, `${method} ${url} needs audit:read`);
        t.equal(ErrorEnvelope.parse(forbidden.json()).error, 'forbidden');
        t.equal((await app.inject({ method, url })).statusCode, 401, `${method} ${url} needs a credential`);
      }
    });

    t.test('bad requests are 400 invalid_request', async (t) => {
      for (const url of [
        '/v1/audit/events?limit=501',
        '/v1/audit/events?limit=0',
        '/v1/audit/events?limit=ten',
        '/v1/audit/events?cursor=bm9wZQ',
        '/v1/audit/events?cursor=%25%25',
        '/v1/audit/events?type=no.such.type',
        '/v1/audit/events?from=yesterday',
        `/v1/audit/events?from=${encodeURIComponent(new Date(T0).toISOString())}&to=${encodeURIComponent(new Date(T0).toISOString())}`,
      ]) {
        const response = await get(url);
        t.equal(response.statusCode, 400, url);
        t.equal(ErrorEnvelope.parse(response.json()).error, 'invalid_request');
      }
      const limit = ErrorEnvelope.parse((await get('/v1/audit/events?limit=501')).json());
      t.equal(limit.details?.[0]?.path, 'query.limit');
      for (const payload of [{ from_sequence: 5, to_sequence: 2 }, { from_sequence: 0 }, { types: 'no.such.type' }, { sequence: 3 }]) {
        const response = await app.inject({ method: 'POST', url: '/v1/audit/exports', headers: { authorization: acmeReader }, payload });
        t.equal(response.statusCode, 400, JSON.stringify(payload));
      }
    });

    t.test(`an export beyond ${MAX_EXPORT_EVENTS} events is refused, and ranges page it`, async (t) => {
      const big = await org('big');
      const bigReader = await key(big, ['audit:read']);
      await db.transaction((tx) => appendAuditEvents(tx, events(big, MAX_EXPORT_EVENTS + 1), new Date(T0)));
      const refused = await app.inject({ method: 'POST', url: '/v1/audit/exports', headers: { authorization: bigReader } });
      t.equal(refused.statusCode, 400);
      t.match(ErrorEnvelope.parse(refused.json()).message, /at most 10000 events.*from_sequence 1 to_sequence 10000, then from_sequence 10001/);
      const rest = await app.inject({ method: 'POST', url: '/v1/audit/exports', headers: { authorization: bigReader }, payload: { from_sequence: 10_001 } });
      t.same(AuditBundle.parse(rest.json()).events.map((e) => e.sequence), [10_001], 'the remainder');
      const pem = AuditKeysResponse.parse((await get('/v1/audit/keys', bigReader)).json()).keys[0]!.public_key_pem;
      t.same(verifyAuditBundle(rest.json(), pem).problems, [], 'a later range verifies on its own');
    });
  });
}

const skipped = postgresSkipReason();
if (skipped) t.comment(skipped);
