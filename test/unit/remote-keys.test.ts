/**
 * RemoteKeyResolver: the gate's cache of the authority's permit keys. A fake `fetchKeys` counts
 * fetches and a hand-moved clock drives the cooldown and the maximum age, so nothing sleeps.
 * One test goes over loopback through CountersignClient to a tiny JWKS server.
 *
 * @example
 *   npx tap --disable-coverage test/unit/remote-keys.test.ts
 */
import t from 'tap';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { CompactSign, compactVerify, exportJWK, generateKeyPair, type CryptoKey, type JWK } from 'jose';
import { CountersignClient } from '../../shared/client/client.js';
import {
  PermitKeysUnavailableError,
  RemoteKeyResolver,
  type KeyRefreshResult,
  type RemoteKeyResolverOptions,
} from '../../shared/permits/remote-keys.js';
import type { PermitVerificationKey } from '../../shared/permits/verify.js';

interface TestKey {
  kid: string;
  jwk: JWK;
  privateKey: CryptoKey;
}

async function ed25519(kid: string): Promise<TestKey> {
  const { publicKey, privateKey } = await generateKeyPair('Ed25519', { extractable: true });
  return { kid, jwk: { ...(await exportJWK(publicKey)), kid, use: 'sig', alg: 'EdDSA' }, privateKey };
}

const [keyA, keyB, keyC] = await Promise.all([ed25519('kid-a'), ed25519('kid-b'), ed25519('kid-c')]);

/** The resolved key must be the public half of `key`: it verifies what `key` signed. */
async function verifiesWith(resolved: PermitVerificationKey | null, key: TestKey): Promise<boolean> {
  if (resolved === null) return false;
  const jws = await new CompactSign(new TextEncoder().encode('payload')).setProtectedHeader({ alg: 'EdDSA', kid: key.kid }).sign(key.privateKey);
  try {
    await compactVerify(jws, resolved, { algorithms: ['EdDSA'] });
    return true;
  } catch {
    return false;
  }
}

/** A fake authority: the served set can change, it can go down, and it counts fetches. */
function harness(options: Partial<RemoteKeyResolverOptions> = {}) {
  const state = {
    clock: Date.parse('2026-11-21T12:00:00.000Z'),
    served: [keyA.jwk] as unknown[],
    down: false,
    fetches: 0,
    events: [] as Array<{ result: KeyRefreshResult; error?: unknown }>,
  };
  const resolver = new RemoteKeyResolver({
    fetchKeys: async () => {
      state.fetches += 1;
      if (state.down) throw new Error('the authority could not be reached: ECONNREFUSED');
      return { keys: [...state.served] };
    },
    now: () => state.clock,
    onRefresh: (result, error) => state.events.push(error === undefined ? { result } : { result, error }),
    ...options,
  });
  return { state, resolver, advance: (ms: number) => (state.clock += ms) };
}

t.test('start loads the key set; a known kid is answered without a fetch', async (t) => {
  const { state, resolver } = harness();
  t.equal(resolver.ready(), false);
  t.same(resolver.status(), { loaded: false, keyCount: 0, lastRefreshAt: null, lastError: null });

  await resolver.start();
  t.equal(state.fetches, 1);
  t.equal(resolver.ready(), true);
  t.same(resolver.status(), { loaded: true, keyCount: 1, lastRefreshAt: state.clock, lastError: null });
  t.same(state.events, [{ result: 'ok' }]);

  for (let i = 0; i < 5; i++) t.ok(await verifiesWith(await resolver.resolve('kid-a'), keyA));
  t.equal(state.fetches, 1, 'no fetch for a cached kid');
});

t.test('unknown kid: one refresh per cooldown window', async (t) => {
  const { state, resolver, advance } = harness({ refreshCooldownMs: 10_000 });
  await resolver.start();
  advance(10_000);

  state.served = [keyA.jwk, keyB.jwk];
  t.ok(await verifiesWith(await resolver.resolve('kid-b'), keyB), 'found after one refresh');
  t.equal(state.fetches, 2);
  t.not(await resolver.resolve('kid-b'), null);
  t.equal(state.fetches, 2, 'now cached');

  state.served = [keyA.jwk, keyB.jwk, keyC.jwk];
  advance(9_999);
  t.equal(await resolver.resolve('kid-c'), null, 'within the cooldown: no fetch, unknown');
  t.equal(await resolver.resolve('forged'), null);
  t.equal(state.fetches, 2);
  t.same(
    state.events.map((e) => e.result),
    ['ok', 'ok', 'skipped_cooldown', 'skipped_cooldown'],
  );

  advance(1);
  t.ok(await verifiesWith(await resolver.resolve('kid-c'), keyC), 'after the cooldown: fetched again');
  t.equal(state.fetches, 3);
});

t.test('the cooldown also counts the first load', async (t) => {
  const { state, resolver } = harness();
  await resolver.start();
  t.equal(await resolver.resolve('kid-b'), null);
  t.equal(state.fetches, 1, 'a forged kid right after start does not fetch');
});

t.test('50 concurrent resolves of an unknown kid share one fetch', async (t) => {
  const { state, resolver, advance } = harness();
  await resolver.start();
  advance(60_000);
  state.served = [keyA.jwk, keyB.jwk];

  const results = await Promise.all(Array.from({ length: 50 }, () => resolver.resolve('kid-b')));
  t.equal(state.fetches, 2, 'exactly one refresh');
  t.ok(results.every((key) => key !== null && key === results[0]), 'every caller got the key');
  t.ok(await verifiesWith(results[0] ?? null, keyB));
});

t.test('concurrent first resolves without start share one fetch', async (t) => {
  const { state, resolver } = harness();
  const results = await Promise.all(Array.from({ length: 20 }, () => resolver.resolve('kid-a')));
  t.equal(state.fetches, 1);
  t.ok(results.every((key) => key !== null));
});

t.test('authority down after a successful load: the cached set keeps verifying', async (t) => {
  const { state, resolver, advance } = harness();
  await resolver.start();
  advance(60_000);
  state.down = true;

  t.ok(await verifiesWith(await resolver.resolve('kid-a'), keyA), 'cached key still resolves');
  t.equal(await resolver.resolve('kid-b'), null, 'unknown kid: null, not a rejection');
  t.equal(state.fetches, 2);
  const status = resolver.status();
  t.equal(status.loaded, true);
  t.equal(status.keyCount, 1);
  t.match(status.lastError, /ECONNREFUSED/);
  t.equal(resolver.ready(), true, 'still ready: verification works with the cached keys');
  const failed = state.events.at(-1);
  t.equal(failed?.result, 'failed');
  t.match(failed?.error, { message: /ECONNREFUSED/ });

  t.equal(await resolver.refreshIfStale(), false, 'a failed retry is also held to the cooldown');
  advance(300_000);
  t.equal(await resolver.refreshIfStale(), true, 'stale: tries again, and does not reject');
  t.equal(state.fetches, 3);
  t.ok(await verifiesWith(await resolver.resolve('kid-a'), keyA));

  state.down = false;
  advance(10_000);
  t.equal(await resolver.refreshIfStale(), true);
  t.equal(resolver.status().lastError, null, 'cleared by the next success');
});

t.test('nothing ever loaded and the fetch fails: resolve rejects (fail closed)', async (t) => {
  const { state, resolver, advance } = harness();
  state.down = true;

  await t.rejects(resolver.start(), PermitKeysUnavailableError);
  t.equal(resolver.ready(), false);
  await t.rejects(resolver.resolve('kid-a'), PermitKeysUnavailableError, 'within the cooldown: rejects without a fetch');
  t.equal(state.fetches, 1);

  advance(10_000);
  await t.rejects(resolver.resolve('kid-a'), { name: 'PermitKeysUnavailableError', message: /ECONNREFUSED/ });
  t.equal(state.fetches, 2);
  t.same(resolver.status(), { loaded: false, keyCount: 0, lastRefreshAt: null, lastError: 'the authority could not be reached: ECONNREFUSED' });

  state.down = false;
  advance(10_000);
  t.ok(await verifiesWith(await resolver.resolve('kid-a'), keyA), 'recovers once the authority answers');
});

t.test('an answer that is not a JWKS is a failed refresh, not an empty set', async (t) => {
  let answer: unknown = { keys: [keyA.jwk] };
  const now = 0;
  const resolver = new RemoteKeyResolver({ fetchKeys: async () => answer as { keys: unknown[] }, now: () => now, maxAgeMs: 0, refreshCooldownMs: 0 });
  await resolver.start();
  for (const bad of [null, {}, { keys: 'nope' }, 'text']) {
    answer = bad;
    await resolver.refreshIfStale();
    t.equal(resolver.status().keyCount, 1, `kept the set after ${JSON.stringify(bad)}`);
    t.match(resolver.status().lastError, /keys array/);
  }
});

t.test('a key withdrawn from the JWKS stops resolving after the next refresh; added keys appear', async (t) => {
  const { state, resolver, advance } = harness();
  state.served = [keyA.jwk, keyB.jwk];
  await resolver.start();
  t.equal(resolver.status().keyCount, 2);

  state.served = [keyB.jwk, keyC.jwk];
  advance(300_000);
  t.equal(await resolver.refreshIfStale(), true);
  t.equal(await resolver.resolve('kid-a'), null, 'withdrawn');
  t.ok(await verifiesWith(await resolver.resolve('kid-c'), keyC), 'added');
  t.ok(await verifiesWith(await resolver.resolve('kid-b'), keyB), 'kept');
  t.equal(resolver.status().keyCount, 2);
  t.equal(state.fetches, 2);

  state.served = [];
  advance(300_000);
  await resolver.refreshIfStale();
  t.equal(await resolver.resolve('kid-b'), null, 'an empty JWKS withdraws everything');
  t.equal(resolver.status().loaded, true);
  t.equal(resolver.ready(), false, 'a gate with no usable key is not ready');
});

t.test('refreshIfStale fetches only when the set is older than maxAgeMs', async (t) => {
  const { state, resolver, advance } = harness({ maxAgeMs: 60_000 });
  t.equal(await resolver.refreshIfStale(), true, 'never loaded: loads');
  t.equal(state.fetches, 1);
  advance(59_999);
  t.equal(await resolver.refreshIfStale(), false);
  t.equal(state.fetches, 1);
  advance(1);
  t.equal(await resolver.refreshIfStale(), true);
  t.equal(state.fetches, 2);
  t.equal(resolver.status().lastRefreshAt, state.clock);
});

t.test('only Ed25519 public signing keys with a kid are used', async (t) => {
  const ec = await generateKeyPair('ES256', { extractable: true });
  const ecJwk = { ...(await exportJWK(ec.publicKey)), kid: 'ec' };
  const { kid: _kid, ...noKid } = keyB.jwk;
  const { state, resolver } = harness();
  state.served = [
    ecJwk,
    { kty: 'OKP', crv: 'X25519', x: keyA.jwk.x, kid: 'x25519' },
    { ...keyA.jwk, kid: 'enc', use: 'enc' },
    { ...keyA.jwk, kid: 'rs', alg: 'RS256' },
    { kty: 'oct', k: 'c2VjcmV0', kid: 'hmac' },
    { kty: 'OKP', crv: 'Ed25519', x: 'not-a-key', kid: 'broken' },
    noKid,
    null,
    'junk',
    42,
    [keyA.jwk],
    keyC.jwk,
  ];
  await resolver.start();
  t.equal(resolver.status().keyCount, 1);
  for (const kid of ['ec', 'x25519', 'enc', 'rs', 'hmac', 'broken', '']) t.equal(await resolver.resolve(kid), null, kid);
  t.ok(await verifiesWith(await resolver.resolve('kid-c'), keyC));
});

t.test('a throwing onRefresh hook does not change the answer', async (t) => {
  const resolver = new RemoteKeyResolver({
    fetchKeys: async () => ({ keys: [keyA.jwk] }),
    onRefresh: () => {
      throw new Error('metrics broke');
    },
  });
  await resolver.start();
  t.ok(await resolver.resolve('kid-a'));
});

t.test('options are checked', async (t) => {
  const fetchKeys = async () => ({ keys: [] });
  t.throws(() => new RemoteKeyResolver({ fetchKeys, refreshCooldownMs: -1 }), RangeError);
  t.throws(() => new RemoteKeyResolver({ fetchKeys, maxAgeMs: Number.NaN }), RangeError);
});

t.test('end to end over loopback through CountersignClient', async (t) => {
  const apiKey = 'ask_test_' + 'x'.repeat(40);
  const seen: Array<string | undefined> = [];
  const server = createServer((request, response) => {
    seen.push(request.headers.authorization);
    response.setHeader('content-type', 'application/json');
    if (request.method !== 'GET' || request.url !== '/v1/permit-keys') {
      response.statusCode = 404;
      response.end(JSON.stringify({ error: 'not_found', message: 'Not found.', status: 404, request_id: 'req-1' }));
      return;
    }
    if (request.headers.authorization !== `Bearer ${apiKey}`) {
      response.statusCode = 401;
      response.end(JSON.stringify({ error: 'unauthorized', message: 'A valid credential is required.', status: 401, request_id: 'req-2' }));
      return;
    }
    response.end(JSON.stringify({ keys: [keyA.jwk] }));
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const baseUrl = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  let closed = false;
  const closeServer = async () => {
    if (closed) return;
    closed = true;
    server.closeAllConnections();
    await new Promise<void>((resolve) => server.close(() => resolve()));
  };
  t.teardown(closeServer);

  const wrong = new CountersignClient({ baseUrl, apiKey: 'ask_test_' + 'y'.repeat(40) });
  t.teardown(() => wrong.close());
  const refused = new RemoteKeyResolver({ fetchKeys: () => wrong.permitKeys() });
  await t.rejects(refused.start(), PermitKeysUnavailableError, 'a wrong API key loads nothing');
  t.match(refused.status().lastError, /credential/);

  let clock = 0;
  const client = new CountersignClient({ baseUrl, apiKey, timeoutMs: 5_000 });
  t.teardown(() => client.close());
  const resolver = new RemoteKeyResolver({ fetchKeys: () => client.permitKeys(), now: () => clock });
  seen.length = 0;
  await resolver.start();
  t.same(seen, [`Bearer ${apiKey}`], 'fetched with the proxy API key');
  t.ok(await verifiesWith(await resolver.resolve('kid-a'), keyA));

  await closeServer();
  clock += 10_000;
  t.ok(await verifiesWith(await resolver.resolve('kid-a'), keyA), 'cached key still resolves with the authority gone');
  t.equal(await resolver.resolve('kid-b'), null, 'unknown kid: the refresh fails, null');
  t.match(resolver.status().lastError, /could not be reached/);
  t.equal(resolver.ready(), true);
});
