/**
 * Rate limits per organization: burst and refill, the X-RateLimit-* headers, both 429 codes,
 * plan tiers and overrides, the evaluate tier, one bucket shared by two app instances on one
 * store, and fail-closed when the store is down.
 */
import Fastify from 'fastify';
import t from 'tap';
import { createOrganization } from '../../authority/orgs/organizations.js';
import { createApiKey } from '../../authority/api-keys/keys.js';
import { parseAuthorityConfig } from '../../authority/config.js';
import { createAuthorityMetrics } from '../../authority/metrics.js';
import { installErrorHandling } from '../../authority/http/errors.js';
import { installGuard } from '../../authority/http/guard.js';
import { EVALUATE_LIMIT, VERIFY_LIMIT } from '../../authority/http/route-access.js';
import { RateLimiter } from '../../authority/ratelimit/limiter.js';
import type { Principal } from '../../authority/auth/principal.js';
import { RedisStore } from '../../shared/store/redis.js';
import { ErrorEnvelope } from '../../shared/wire/envelope.js';
import { createTestAuthority } from '../helpers/authority.js';
import { appBackends, realServersMissing } from '../helpers/backends.js';
import { ManualClock } from '../helpers/clock.js';

const small = { rate_limits: { plans: { community: { per_minute: 60, burst: 3 } } } };

for (const backend of appBackends()) {
  t.test(`burst, headers, 429 rate_limited and refill on ${backend.name}`, async (t) => {
    const clock = new ManualClock();
    const opened = await backend.open({ now: () => clock.now() });
    const authority = await createTestAuthority(opened, { config: small, clock });
    t.teardown(async () => {
      await authority.close();
      await opened.cleanup();
    });
    const get = (token = authority.acmeAdmin) => authority.app.inject({ method: 'GET', url: '/v1/api-keys', headers: authority.bearer(token) });

    const remaining: string[] = [];
    for (let i = 0; i < 3; i += 1) {
      const response = await get();
      t.equal(response.statusCode, 200, `request ${i + 1} of the burst passes`);
      t.equal(response.headers['x-ratelimit-limit'], '60');
      remaining.push(String(response.headers['x-ratelimit-remaining']));
      t.match(String(response.headers['x-ratelimit-reset']), /^\d{10}$/, 'reset is Unix seconds');
    }
    t.same(remaining, ['2', '1', '0']);

    const limited = await get();
    t.equal(limited.statusCode, 429);
    const body = ErrorEnvelope.parse(limited.json());
    t.equal(body.error, 'rate_limited');
    t.equal(body.retry_after_ms, undefined, 'retry_after_ms belongs to evaluate and verify-permit only');
    t.equal(limited.headers['retry-after'], '1', 'one token per second at 60/min');
    t.equal(limited.headers['x-ratelimit-remaining'], '0');

    t.equal((await get(authority.globexAdmin)).statusCode, 200, 'another organization has its own bucket');

    authority.clock.advance(1_000);
    t.equal((await get()).statusCode, 200, 'one token back after a second');
    t.equal((await get()).statusCode, 429, 'and only one');

    authority.clock.advance(10 * 60_000);
    const refilled = await get();
    t.equal(refilled.headers['x-ratelimit-remaining'], '2', 'a long pause refills to the burst, not beyond');
    t.match(await authority.metrics.registry.metrics(), /countersign_rate_limited_total\{bucket="api"\} 2/);
  });

  t.test(`one bucket shared by two app instances on ${backend.name}`, async (t) => {
    const clock = new ManualClock();
    const opened = await backend.open({ now: () => clock.now() });
    const first = await createTestAuthority(opened, { config: small, clock });
    const second = await createTestAuthority(opened, { config: small, clock, store: opened.openPeerStore() });
    t.teardown(async () => {
      await first.close();
      await second.close();
      await opened.cleanup();
    });
    const statuses: number[] = [];
    for (let i = 0; i < 6; i += 1) {
      const app = i % 2 === 0 ? first.app : second.app;
      statuses.push((await app.inject({ method: 'GET', url: '/v1/api-keys', headers: first.bearer(first.acmeAdmin) })).statusCode);
    }
    t.same(statuses, [200, 200, 200, 429, 429, 429], 'three passes in all, across both instances');
  });

  t.test(`plan tiers and per-organization overrides on ${backend.name}`, async (t) => {
    const opened = await backend.open();
    const clock = new ManualClock();
    const business = await createOrganization(opened.db, { name: `biz-${Date.now()}`, plan: 'business' }, clock);
    const special = await createOrganization(opened.db, { name: `special-${Date.now()}`, plan: 'business' }, clock);
    const authority = await createTestAuthority(opened, {
      clock,
      config: { rate_limits: { organizations: { [special.id]: { api: { per_minute: 7, burst: 7 } } } } },
    });
    t.teardown(async () => {
      await authority.close();
      await opened.cleanup();
    });
    const limitOf = async (orgId: string) => {
      const org = orgId === business.id ? business : special;
      const { secret } = await createApiKey(opened.db, { org, name: 'k', scopes: ['keys:write'], createdBy: 'test' }, clock);
      const response = await authority.app.inject({ method: 'GET', url: '/v1/api-keys', headers: authority.bearer(secret) });
      return [response.headers['x-ratelimit-limit'], response.headers['x-ratelimit-remaining']];
    };
    t.same(await limitOf(business.id), ['1000', '1999'], 'business: 1000/min, burst 2000');
    t.same(await limitOf(special.id), ['7', '6'], 'the override wins over the plan');
    const community = await authority.app.inject({ method: 'GET', url: '/v1/api-keys', headers: authority.bearer(authority.acmeAdmin) });
    t.same([community.headers['x-ratelimit-limit'], community.headers['x-ratelimit-remaining']], ['100', '149'], 'community: 100/min, burst 150');
  });

  t.test(`the evaluate tier: 100 per minute per organization on ${backend.name}`, async (t) => {
    const clock = new ManualClock();
    const opened = await backend.open({ now: () => clock.now() });
    t.teardown(() => opened.cleanup());
    const config = parseAuthorityConfig({});
    const limiter = new RateLimiter(opened.store, config.rate_limits, clock);
    const org = { id: '7d4f0000-0000-4000-8000-000000000001', plan: 'business' as const };
    let allowed = 0;
    let first;
    for (let i = 0; i < 101; i += 1) {
      const decision = await limiter.take(org, 'evaluate');
      if (decision.allowed) allowed += 1;
      else first ??= decision;
    }
    t.equal(allowed, 100, 'a business organization still gets 100 evaluations a minute');
    t.equal(first?.limit, 100);
    t.equal(first?.retryAfterMs, 600, 'one evaluation every 600 ms');
    const api = await limiter.take(org, 'api');
    t.ok(api.allowed, 'the evaluate bucket is separate from the plan bucket');
    clock.advance(600);
    t.ok((await limiter.take(org, 'evaluate')).allowed, 'refilled after 600 ms');
  });
}

t.test('429 on evaluate and verify-permit routes is "unavailable" with retry_after_ms', async (t) => {
  // A guard-only app: it proves how routes that declare the evaluate or verify policy answer,
  // without standing in for those endpoints.
  const clock = new ManualClock();
  const [embedded] = appBackends();
  const opened = await embedded!.open({ now: () => clock.now() });
  const org = await createOrganization(opened.db, { name: 'guarded' }, clock);
  const { secret } = await createApiKey(opened.db, { org, name: 'k', scopes: ['evaluate:write', 'verify:execute'], createdBy: 'test' }, clock);
  const config = parseAuthorityConfig({ rate_limits: { evaluate: { per_minute: 60, burst: 1 }, plans: { community: { per_minute: 60, burst: 1 } } } });
  const app = Fastify();
  installErrorHandling(app);
  installGuard(app, {
    authenticate: async () => ({ kind: 'api_key', org, keyId: 'k', scopes: [], allowedActors: null, permissions: new Set(['evaluate:write', 'verify:execute']), credential: 'api_key:k' }) as Principal,
    limiter: new RateLimiter(opened.store, config.rate_limits, clock),
    metrics: createAuthorityMetrics(),
  });
  app.post('/guarded-evaluate', { config: { access: 'evaluate:write', rateLimit: EVALUATE_LIMIT } }, async () => ({ ok: true }));
  app.post('/guarded-verify', { config: { access: 'verify:execute', rateLimit: VERIFY_LIMIT } }, async () => ({ ok: true }));
  t.teardown(async () => {
    await app.close();
    await opened.cleanup();
  });
  for (const url of ['/guarded-evaluate', '/guarded-verify']) {
    const headers = { authorization: `Bearer ${secret}` };
    t.equal((await app.inject({ method: 'POST', url, headers })).statusCode, 200);
    const limited = await app.inject({ method: 'POST', url, headers });
    t.equal(limited.statusCode, 429, url);
    const body = ErrorEnvelope.parse(limited.json());
    t.equal(body.error, 'unavailable');
    t.equal(body.retry_after_ms, 1000);
    t.equal(limited.headers['retry-after'], '1');
  }
});

t.test('an unreachable rate-limit store fails closed with 503', async (t) => {
  const [embedded] = appBackends();
  const opened = await embedded!.open();
  const deadStore = new RedisStore({ url: 'redis://127.0.0.1:1', keyPrefix: 'dead:' });
  const authority = await createTestAuthority(opened, { store: deadStore });
  t.teardown(async () => {
    await authority.close();
    await deadStore.close();
    await opened.cleanup();
  });
  const response = await authority.app.inject({ method: 'GET', url: '/v1/api-keys', headers: authority.bearer(authority.acmeAdmin) });
  t.equal(response.statusCode, 503);
  t.equal(ErrorEnvelope.parse(response.json()).error, 'service_unavailable');
});

const missing = realServersMissing();
if (missing) t.comment(`the Postgres + Redis variant did not run: ${missing}`);
