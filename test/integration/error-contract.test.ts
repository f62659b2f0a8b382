/**
 * The error contract on the authority's endpoints: the envelope for every failure, 400 with
 * details, 413, 415, the router's URL errors, 404, 405 with Allow, 500 without internals, X-Request-ID, and the
 * credential rules that are not a matter of the matrix (deprecation, escalation of scopes,
 * revocation taking effect, secrets never logged).
 */
import t, { type Test } from 'tap';
import { ErrorEnvelope } from '../../shared/wire/envelope.js';
import { CreateApiKeyResponse, ListApiKeysResponse } from '../../shared/wire/api-keys.js';
import { createTestAuthority, type TestAuthority } from '../helpers/authority.js';
import { appBackends } from '../helpers/backends.js';

const [embedded] = appBackends();

async function withAuthority(t: Test, fn: (authority: TestAuthority) => Promise<void>, config = {}): Promise<void> {
  const opened = await embedded!.open();
  const authority = await createTestAuthority(opened, { config });
  t.teardown(async () => {
    await authority.close();
    await opened.cleanup();
  });
  await fn(authority);
}

const json = (token: string) => ({ authorization: `Bearer ${token}`, 'content-type': 'application/json' });

t.test('400 invalid_request carries details with the path of each bad field', (t) =>
  withAuthority(t, async ({ app, acmeAdmin }) => {
    const response = await app.inject({
      method: 'POST',
      url: '/v1/api-keys',
      headers: json(acmeAdmin),
      payload: { name: '', scopes: ['evaluate', 'audit:read'] },
    });
    t.equal(response.statusCode, 400);
    const body = ErrorEnvelope.parse(response.json());
    t.equal(body.error, 'invalid_request');
    const paths = (body.details ?? []).map((detail) => detail.path);
    t.ok(paths.includes('name'), 'name is named');
    t.ok(paths.includes('scopes.0'), 'the bare scope is named');
    t.match(body.details?.find((d) => d.path === 'scopes.0')?.message, /resource:action/);
  }),
);

t.test('bare scope names such as "evaluate" are refused with 400', (t) =>
  withAuthority(t, async ({ app, acmeAdmin }) => {
    for (const bare of ['evaluate', 'audit', 'admin']) {
      const response = await app.inject({ method: 'POST', url: '/v1/api-keys', headers: json(acmeAdmin), payload: { name: 'k', scopes: [bare] } });
      t.equal(response.statusCode, 400, bare);
      t.equal(response.json().error, 'invalid_request');
    }
    const unknown = await app.inject({ method: 'POST', url: '/v1/api-keys', headers: json(acmeAdmin), payload: { name: 'k', scopes: ['rockets:launch'] } });
    t.equal(unknown.statusCode, 400, 'a well-formed but unknown scope is refused too');
    const extra = await app.inject({ method: 'POST', url: '/v1/api-keys', headers: json(acmeAdmin), payload: { name: 'k', scopes: ['audit:read'], admin: true } });
    t.equal(extra.statusCode, 400, 'unknown fields are refused');
  }),
);

t.test('malformed and empty JSON bodies are 400, oversized 413, non-JSON 415', (t) =>
  withAuthority(t, async ({ app, acmeAdmin }) => {
    const bad = await app.inject({ method: 'POST', url: '/v1/api-keys', headers: json(acmeAdmin), payload: '{"name": ' });
    t.equal(bad.statusCode, 400);
    t.equal(ErrorEnvelope.parse(bad.json()).error, 'invalid_request');

    const empty = await app.inject({ method: 'POST', url: '/v1/api-keys', headers: json(acmeAdmin), payload: '' });
    t.equal(empty.statusCode, 400);
    t.equal(ErrorEnvelope.parse(empty.json()).error, 'invalid_request');

    const big = await app.inject({
      method: 'POST',
      url: '/v1/api-keys',
      headers: json(acmeAdmin),
      payload: JSON.stringify({ name: 'x'.repeat(64 * 1024), scopes: ['audit:read'] }),
    });
    t.equal(big.statusCode, 413);
    t.equal(ErrorEnvelope.parse(big.json()).error, 'payload_too_large');

    for (const type of ['text/plain', 'application/xml', 'application/x-www-form-urlencoded']) {
      const response = await app.inject({
        method: 'POST',
        url: '/v1/api-keys',
        headers: { authorization: `Bearer ${acmeAdmin}`, 'content-type': type },
        payload: 'name=k',
      });
      t.equal(response.statusCode, 415, type);
      t.equal(ErrorEnvelope.parse(response.json()).error, 'unsupported_media_type');
    }
  }),
);

t.test('unknown paths are 404 and unknown methods 405 with Allow', (t) =>
  withAuthority(t, async ({ app }) => {
    const unknown = await app.inject({ method: 'GET', url: '/v1/does-not-exist' });
    t.equal(unknown.statusCode, 404);
    t.equal(ErrorEnvelope.parse(unknown.json()).error, 'not_found');

    const wrongMethod = await app.inject({ method: 'DELETE', url: '/v1/api-keys' });
    t.equal(wrongMethod.statusCode, 405);
    t.equal(ErrorEnvelope.parse(wrongMethod.json()).error, 'method_not_allowed');
    t.same(wrongMethod.headers.allow?.toString().split(', ').sort(), ['GET', 'HEAD', 'POST']);

    const withParam = await app.inject({ method: 'GET', url: '/v1/api-keys/3f8a2c1e-0000-4000-8000-000000000000/revoke' });
    t.equal(withParam.statusCode, 405, 'parametric paths are recognised too');
    t.equal(withParam.headers.allow, 'POST');
  }),
);

t.test("the router's URL errors are 400 invalid_request in the envelope, not fastify's own body", (t) =>
  withAuthority(t, async ({ app, acmeAdmin }) => {
    // Regression: a path parameter over 100 characters was answered 414 with fastify's
    // FST_ERR_MAX_PARAM_LENGTH body, and a bad percent-encoding 400 with FST_ERR_BAD_URL. (The
    // permit routes take a permit token in the path: test/integration/sdk-permits.test.ts.)
    const cases = [
      ['GET', `/v1/approvals/${'a'.repeat(101)}`, /longer than 100 characters/],
      ['POST', `/v1/api-keys/${'a'.repeat(101)}/revoke`, /longer than 100 characters/],
      ['GET', '/v1/permits/%zz', /percent-encoding/],
    ] as const;
    for (const [method, url, message] of cases) {
      const response = await app.inject({ method, url, headers: json(acmeAdmin), ...(method === 'POST' ? { payload: {} } : {}) });
      t.equal(response.statusCode, 400, `${method} ${url.slice(0, 24)}…`);
      const envelope = ErrorEnvelope.parse(response.json());
      t.equal(envelope.error, 'invalid_request');
      t.match(envelope.message, message);
      t.equal(response.headers['x-request-id'], envelope.request_id, 'the request id is in the header and the envelope');
    }
  }),
);

t.test('an unexpected failure is a 500 internal that leaks nothing', (t) =>
  withAuthority(t, async ({ app, acmeAdmin, backend, logs }) => {
    // Every query now fails inside the handler chain with an error nobody foresaw. (A closed or
    // unreachable database is an outage, answered 503: see database-outage.test.ts.)
    backend.db.query = () => Promise.reject(new Error('PGlite internals: the relation is closed at pglite.ts:42'));
    const response = await app.inject({ method: 'GET', url: '/v1/api-keys', headers: json(acmeAdmin) });
    t.equal(response.statusCode, 500);
    const body = ErrorEnvelope.parse(response.json());
    t.equal(body.error, 'internal');
    t.equal(body.message, 'Internal error.');
    t.notMatch(response.body, /stack|at .*\.(ts|js):\d+|PGlite|closed/i, 'no stack or internals in the body');
    t.ok(logs.some((line) => line.includes('unhandled error answered with 500')), 'the cause is logged instead');
  }),
);

t.test('X-Request-ID is echoed when sane and generated otherwise, in header and envelope', (t) =>
  withAuthority(t, async ({ app }) => {
    const echoed = await app.inject({ method: 'GET', url: '/v1/api-keys', headers: { 'x-request-id': 'req-42.a:b' } });
    t.equal(echoed.headers['x-request-id'], 'req-42.a:b');
    t.equal(echoed.json().request_id, 'req-42.a:b');

    const generated = await app.inject({ method: 'GET', url: '/v1/api-keys' });
    t.match(generated.headers['x-request-id'], /^[0-9a-f-]{36}$/);
    t.equal(generated.json().request_id, generated.headers['x-request-id']);

    const hostile = await app.inject({ method: 'GET', url: '/healthz', headers: { 'x-request-id': 'a b\u0001<script>' } });
    t.match(hostile.headers['x-request-id'], /^[0-9a-f-]{36}$/, 'an unsafe id is replaced');
  }),
);

t.test('X-Service-Key works with a Deprecation header and a metric, and can be switched off', async (t) => {
  await withAuthority(t, async ({ app, acmeAdmin, metrics }) => {
    const response = await app.inject({ method: 'GET', url: '/v1-api-key-self', headers: { 'x-service-key': acmeAdmin } });
    t.equal(response.statusCode, 200);
    t.equal(response.headers.deprecation, 'true');
    const bearer = await app.inject({ method: 'GET', url: '/v1-api-key-self', headers: { authorization: `Bearer ${acmeAdmin}` } });
    t.notOk(bearer.headers.deprecation, 'no Deprecation header on Authorization: Bearer');
    t.match(await metrics.registry.metrics(), /countersign_deprecated_header_total\{header="x-service-key"\} 1/);
  });
  await withAuthority(
    t,
    async ({ app, acmeAdmin }) => {
      const response = await app.inject({ method: 'GET', url: '/v1-api-key-self', headers: { 'x-service-key': acmeAdmin } });
      t.equal(response.statusCode, 401);
      t.match(response.json().message, /Authorization: Bearer/);
    },
    { auth: { x_service_key: { enabled: false } } },
  );
});

t.test('API keys: created once in the clear, listed without secrets, revoked for good', (t) =>
  withAuthority(t, async ({ app, acmeAdmin, globexAdmin }) => {
    const created = CreateApiKeyResponse.parse(
      (await app.inject({ method: 'POST', url: '/v1/api-keys', headers: json(acmeAdmin), payload: { name: 'ci', scopes: ['keys:write', 'audit:read'] } })).json(),
    );
    t.match(created.secret, /^ask_test_[A-Za-z0-9]{40}$/, 'a test organization gets ask_test_ keys');
    t.equal(created.api_key.prefix, created.secret.slice(0, 13));
    const live = CreateApiKeyResponse.parse(
      (await app.inject({ method: 'POST', url: '/v1/api-keys', headers: json(globexAdmin), payload: { name: 'ci', scopes: ['audit:read'] } })).json(),
    );
    t.match(live.secret, /^ask_live_/, 'a live organization gets ask_live_ keys');

    const used = await app.inject({ method: 'GET', url: '/v1/api-keys', headers: json(created.secret) });
    t.equal(used.statusCode, 200);
    t.notOk(used.body.includes(created.secret), 'the listing never holds a secret');
    t.notOk(used.body.includes('hash'), 'nor a hash');
    const listed = ListApiKeysResponse.parse(used.json()).api_keys.find((key) => key.id === created.api_key.id);
    t.ok(listed?.last_used_at, 'last_used_at is recorded');
    t.notOk(ListApiKeysResponse.parse(used.json()).api_keys.some((key) => key.id === live.api_key.id), 'only the own organization is listed');

    const escalate = await app.inject({ method: 'POST', url: '/v1/api-keys', headers: json(created.secret), payload: { name: 'x', scopes: ['policy:write'] } });
    t.equal(escalate.statusCode, 403, 'keys:write cannot mint a key with scopes its holder lacks');
    t.match(escalate.json().message, /policy:write/);

    const past = await app.inject({
      method: 'POST',
      url: '/v1/api-keys',
      headers: json(acmeAdmin),
      payload: { name: 'x', scopes: ['audit:read'], expires_at: '2001-01-01T00:00:00Z' },
    });
    t.equal(past.statusCode, 400, 'an expiry in the past is refused');

    const revoked = await app.inject({ method: 'POST', url: `/v1/api-keys/${created.api_key.id}/revoke`, headers: json(acmeAdmin), payload: {} });
    t.equal(revoked.statusCode, 200);
    t.ok(revoked.json().api_key.revoked_at);
    const again = await app.inject({ method: 'POST', url: `/v1/api-keys/${created.api_key.id}/revoke`, headers: json(acmeAdmin), payload: {} });
    t.equal(again.json().api_key.revoked_at, revoked.json().api_key.revoked_at, 'revoking twice keeps the first time');
    const after = await app.inject({ method: 'GET', url: '/v1/api-keys', headers: json(created.secret) });
    t.equal(after.statusCode, 401, 'a revoked key stops working at once');

    const badId = await app.inject({ method: 'POST', url: '/v1/api-keys/not-a-uuid/revoke', headers: json(acmeAdmin), payload: {} });
    t.equal(badId.statusCode, 400);
  }),
);

t.test('secrets and tokens never reach the logs', (t) =>
  withAuthority(t, async ({ app, acmeAdmin, idp, acme, logs }) => {
    const token = await idp.sign({ sub: 'u1', org_id: acme.id, role: 'admin' });
    await app.inject({ method: 'GET', url: '/v1/session', headers: { authorization: `Bearer ${token}` } });
    await app.inject({ method: 'GET', url: '/v1-api-key-self', headers: { 'x-service-key': acmeAdmin } });
    const created = await app.inject({ method: 'POST', url: '/v1/api-keys', headers: json(acmeAdmin), payload: { name: 'n', scopes: ['audit:read'] } });
    const secret = created.json().secret as string;
    await app.inject({ method: 'GET', url: '/v1/api-keys', headers: { authorization: `Bearer ${secret}` } });
    await app.inject({ method: 'GET', url: '/v1/api-keys', headers: { authorization: 'Bearer ask_live_unknownunknownunknownunknownunknown' } });
    const all = logs.join('');
    t.ok(all.length > 0 && all.includes('request_id'), 'requests are logged with their request id');
    for (const value of [acmeAdmin, secret, token, token.split('.')[2] as string, 'unknownunknownunknown']) {
      t.notOk(all.includes(value), 'a credential is absent from the logs');
    }
  }),
);

t.test('GET /v1/session returns the body the design gives', (t) =>
  withAuthority(t, async ({ app, idp, acme }) => {
    const token = await idp.sign({ sub: 'u-7', org_id: acme.id, role: 'approver', email: 'ana@example.com' }, { expiresIn: '5m' });
    const response = await app.inject({ method: 'GET', url: '/v1/session', headers: { authorization: `Bearer ${token}` } });
    t.equal(response.statusCode, 200);
    const body = response.json();
    t.same(body.user, { id: 'u-7', email: 'ana@example.com' });
    t.same(body.organization, { id: acme.id, name: acme.name });
    t.equal(body.role, 'approver');
    t.same(body.permissions, ['approvals:read', 'approvals:write', 'audit:read', 'evaluate:write', 'hitl:approve', 'permits:read', 'permits:write']);
    t.match(body.expires_at, /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/);
  }),
);

t.test('/readyz names the dependency that is not reachable; /healthz still answers', async (t) => {
  const { RedisStore } = await import('../../shared/store/redis.js');
  const opened = await embedded!.open();
  const deadStore = new RedisStore({ url: 'redis://127.0.0.1:1', keyPrefix: 'dead:' });
  const authority = await createTestAuthority(opened, { store: deadStore });
  t.teardown(async () => {
    await authority.close();
    await deadStore.close();
    await opened.cleanup();
  });
  const ready = await authority.app.inject({ method: 'GET', url: '/readyz' });
  t.equal(ready.statusCode, 503);
  t.same(ready.json(), { status: 'unavailable', checks: { database: 'ok', store: 'unavailable' } });
  t.equal((await authority.app.inject({ method: 'GET', url: '/healthz' })).statusCode, 200);
});
