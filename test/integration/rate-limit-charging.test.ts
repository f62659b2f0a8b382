/**
 * Who a request is charged to: an organization only after its credential authenticated and held
 * the route's permission; everything refused before that to the client's address, whose bucket
 * (rate_limits.unauthenticated) answers 429 rate_limited once empty, before an unknown key costs a
 * credential lookup. Lookups are counted with a spy on the database, not by time.
 */
import t from 'tap';
import { addressKey } from '../../authority/ratelimit/address-limiter.js';
import { ErrorEnvelope } from '../../shared/wire/envelope.js';
import { createTestAuthority } from '../helpers/authority.js';
import { appBackends, type OpenedBackend } from '../helpers/backends.js';
import { ManualClock } from '../helpers/clock.js';

const limits = {
  rate_limits: {
    plans: { community: { per_minute: 60, burst: 3 } },
    unauthenticated: { per_minute: 60, burst: 5 },
  },
};

/** Counts the queries that look an API key up by its secret's hash. */
function countKeyLookups(opened: OpenedBackend): { readonly count: number } {
  const db = opened.db as unknown as { query: (...args: unknown[]) => Promise<unknown> };
  const query = db.query.bind(db);
  const counter = { count: 0 };
  db.query = (...args: unknown[]) => {
    if (typeof args[0] === 'string' && args[0].includes('k.key_hash = $1')) counter.count += 1;
    return query(...args);
  };
  return counter;
}

const UNKNOWN = (i: number) => `ask_live_${'x'.repeat(30)}${String(i).padStart(6, '0')}`;

for (const backend of appBackends()) {
  t.test(`a key without the route's scope leaves its organization's bucket full on ${backend.name}`, async (t) => {
    const clock = new ManualClock();
    const opened = await backend.open({ now: () => clock.now() });
    const authority = await createTestAuthority(opened, { config: { rate_limits: { ...limits.rate_limits, unauthenticated: { per_minute: 60, burst: 100 } } }, clock });
    t.teardown(async () => {
      await authority.close();
      await opened.cleanup();
    });
    const scopeless = await authority.key(['evaluate:write']);
    for (let i = 0; i < 10; i += 1) {
      const refused = await authority.app.inject({ method: 'GET', url: '/v1/api-keys', headers: authority.bearer(scopeless) });
      t.equal(refused.statusCode, 403, `request ${i + 1} without keys:write is forbidden`);
      t.equal(refused.headers['x-ratelimit-remaining'], undefined, 'and draws nothing from the organization');
    }
    const proper = await authority.app.inject({ method: 'GET', url: '/v1/api-keys', headers: authority.bearer(authority.acmeAdmin) });
    t.equal(proper.statusCode, 200);
    t.equal(proper.headers['x-ratelimit-remaining'], '2', 'the burst of 3 is whole: this is its first token');
  });

  t.test(`floods of unknown keys are limited per address, before the lookup, on ${backend.name}`, async (t) => {
    const clock = new ManualClock();
    const opened = await backend.open({ now: () => clock.now() });
    const lookups = countKeyLookups(opened);
    const authority = await createTestAuthority(opened, { config: limits, clock });
    t.teardown(async () => {
      await authority.close();
      await opened.cleanup();
    });
    const from = (remoteAddress: string, headers: Record<string, string>, url = '/v1/api-keys') =>
      authority.app.inject({ method: 'GET', url, headers, remoteAddress });

    // Whether the credential cache serves keys from memory (a use that needs no lookup). On Postgres
    // it starts serving once its LISTEN connection is up, so this waits (bounded) for that, with
    // another organization's key from another address, the clock moved on before each try so that
    // neither bucket runs out, rather than read a state that may still change.
    const warm = () => authority.app.inject({ method: 'GET', url: '/v1/api-keys', headers: authority.bearer(authority.globexAdmin), remoteAddress: '203.0.113.1' });
    let serving = false;
    for (let attempt = 0; attempt < 50 && !serving; attempt++) {
      clock.advance(60_000);
      await warm();
      const afterUse = lookups.count;
      await warm();
      serving = lookups.count === afterUse;
      if (!serving) await new Promise((resolve) => setTimeout(resolve, 100));
    }
    // The acme key is in the cache once used.
    t.equal((await from('198.51.100.7', authority.bearer(authority.acmeAdmin))).statusCode, 200);
    t.comment(`credential cache serving: ${serving}`);
    const before = lookups.count;

    const statuses: number[] = [];
    let limited: Awaited<ReturnType<typeof from>> | undefined;
    for (let i = 0; i < 50; i += 1) {
      const response = await from('198.51.100.7', authority.bearer(UNKNOWN(i)));
      statuses.push(response.statusCode);
      if (response.statusCode === 429) limited ??= response;
    }
    t.same(statuses.slice(0, 5), [401, 401, 401, 401, 401], 'the burst of failures is answered as such');
    t.same(new Set(statuses.slice(5)), new Set([429]), 'then every failure is 429');
    t.equal(lookups.count - before, 5, 'only the burst reached the credential lookup');
    t.equal(ErrorEnvelope.parse(limited?.json()).error, 'rate_limited');
    t.equal(limited?.headers['retry-after'], '1', 'a token a second at 60/min');
    t.equal(limited?.headers['x-ratelimit-remaining'], undefined, "the organization's headers are not involved");

    t.equal((await from('198.51.100.7', {})).statusCode, 429, 'no credential at all: 429 too');
    t.equal((await from('198.51.100.7', { authorization: 'Basic abc' })).statusCode, 429, 'a malformed one: 429 too');
    t.equal((await from('198.51.100.7', {}, '/healthz')).statusCode, 200, 'public routes are not limited');
    t.equal((await from('198.51.100.8', authority.bearer(UNKNOWN(99)))).statusCode, 401, 'another address has its own bucket');

    const cached = await from('198.51.100.7', authority.bearer(authority.acmeAdmin));
    // A key served from memory costs nothing and is not refused; one that needs a lookup waits.
    t.equal(cached.statusCode, serving ? 200 : 429, 'a valid key from the limited address');
    t.equal(lookups.count - before, 6, 'the unknown key from the other address was the only further lookup');

    clock.advance(1_000);
    t.equal((await from('198.51.100.7', authority.bearer(UNKNOWN(100)))).statusCode, 401, 'one failure allowed again after a second');
    t.equal((await from('198.51.100.7', authority.bearer(UNKNOWN(101)))).statusCode, 429, 'and only one');
    t.match(await authority.metrics.registry.metrics(), /countersign_rate_limited_total\{bucket="address"\} \d+/);
    t.match(await authority.metrics.registry.metrics(), /countersign_auth_failures_total\{reason="unknown_key"\} 7/);
  });

  t.test(`behind a trusted proxy the client address is X-Forwarded-For on ${backend.name}`, async (t) => {
    const clock = new ManualClock();
    const opened = await backend.open({ now: () => clock.now() });
    const authority = await createTestAuthority(opened, { config: { ...limits, trust_proxy: true }, clock });
    t.teardown(async () => {
      await authority.close();
      await opened.cleanup();
    });
    const from = (client: string) =>
      authority.app.inject({ method: 'GET', url: '/v1/api-keys', headers: { 'x-forwarded-for': client }, remoteAddress: '10.0.0.2' });
    for (let i = 0; i < 5; i += 1) t.equal((await from('203.0.113.1')).statusCode, 401);
    t.equal((await from('203.0.113.1')).statusCode, 429, 'the sixth from that client');
    t.equal((await from('203.0.113.2')).statusCode, 401, 'another client behind the same proxy is not affected');
    for (let i = 0; i < 5; i += 1) t.equal((await from('2001:db8:1:2::a')).statusCode, 401);
    t.equal((await from('2001:db8:1:2::ffff')).statusCode, 429, 'IPv6 clients share a bucket per /64');
    t.equal((await from('2001:db8:1:3::a')).statusCode, 401, 'the next /64 does not');
  });
}

t.test('address keys: IPv4, IPv4-mapped IPv6 as IPv4, IPv6 by /64', async (t) => {
  t.equal(addressKey('203.0.113.9'), '203.0.113.9');
  t.equal(addressKey('::ffff:203.0.113.9'), '203.0.113.9');
  // Other spellings of an IPv4 address (an X-Forwarded-For a proxy passed on) share its bucket.
  t.equal(addressKey('127.1'), '127.0.0.1');
  t.equal(addressKey('0x7f.0.0.1'), '127.0.0.1');
  t.equal(addressKey('010.0.0.1'), '8.0.0.1', 'a leading zero is octal, as inet_aton reads it');
  t.equal(addressKey('2001:db8:1:2::a'), addressKey('2001:0db8:0001:0002:ffff::1'));
  t.not(addressKey('2001:db8:1:2::a'), addressKey('2001:db8:1:3::a'));
  t.equal(addressKey('not an address'), 'raw:not an address');
});
