/**
 * The permit verification core against real tokens, the token itself: its form, its header and
 * key id, its signature (checked on the event loop and on the thread pool), the shape of its
 * claims, the key resolver that publishes the keys, and the claims the authority builds. Permits
 * are built and signed by the authority's signer and verified by `verifyPermit` exactly as the
 * proxy and verify-permit call it (test/helpers/verify-core-fixture.ts). What the claims must
 * match is in verify-core-facts.test.ts; consuming in the shared store in
 * verify-core-store.test.ts.
 *
 * @example
 *   npx tap --disable-coverage test/integration/verify-core.test.ts
 */
import t from 'tap';
import { generateKeyPairSync } from 'node:crypto';
import { decodeProtectedHeader, exportJWK, generateKeyPair } from 'jose';
import type { JWK } from 'jose';
import { buildPermitClaims, signPermit } from '../../authority/permits/sign.js';
import { boundFacts } from '../../shared/permits/binding.js';
import { DEFAULT_PERMIT_AUDIENCE, MAX_PERMIT_LIFETIME_SECONDS } from '../../shared/permits/claims.js';
import { staticKeyResolver } from '../../shared/permits/static-keys.js';
import { POOL_WHEN_IN_FLIGHT, VERIFY_ERROR_CODES, signatureRunsOnPool, verifyPermit } from '../../shared/permits/verify.js';
import type { PermitKeyResolver, SignatureOn } from '../../shared/permits/verify.js';
import { tamperSignature } from '../helpers/permit-tokens.js';
import {
  IAT,
  ISSUER,
  KID,
  ORG,
  T0,
  b64,
  claimsFor,
  issue,
  manualSign,
  newMemoryStore,
  options,
  other,
  publicJwk,
  rawSign,
  refusal,
  signing,
} from '../helpers/verify-core-fixture.js';

t.test('a valid permit verifies once, with the full binding', async (t) => {
  const { token, claims } = await issue();
  t.same(decodeProtectedHeader(token), { alg: 'EdDSA', typ: 'permit+jwt', kid: KID }, 'header is exactly alg, typ, kid');
  t.same(claims.bkeys, ['account_code', 'action_type', 'actor_id', 'amount_usd', 'environment', 'target', 'ticket']);
  t.equal(claims.env, 'production');
  t.same(claims.tgt, { type: 'account', id: 'acct_42' });
  const outcome = await verifyPermit(options(t, token));
  t.same(outcome, { valid: true, claims, binding: 'full', consumed: true });
});

t.test('the thirteen codes', async (t) => {
  t.same(VERIFY_ERROR_CODES, [
    'MISSING_PERMIT', 'PERMIT_INVALID', 'PERMIT_NOT_FOUND', 'PERMIT_EXPIRED', 'PERMIT_NOT_YET_VALID', 'PERMIT_REVOKED',
    'PERMIT_ALREADY_USED', 'ACTION_TYPE_MISMATCH', 'ACTOR_MISMATCH', 'BINDING_MISMATCH', 'ORG_MISMATCH', 'REPLAY_STATE_RESET',
    'INTERNAL_ERROR',
  ]);
});

t.test('missing and malformed', async (t) => {
  refusal(t, await verifyPermit(options(t, undefined)), 'MISSING_PERMIT', 'no token');
  refusal(t, await verifyPermit(options(t, '')), 'MISSING_PERMIT', 'empty token');
  const { token } = await issue();
  const [h, p, s] = token.split('.') as [string, string, string];
  const malformed: [string, string][] = [
    ['one part', 'abc'],
    ['two parts', `${h}.${p}`],
    ['four parts', `${token}.x`],
    ['empty parts', '..'],
    ['empty signature', `${h}.${p}.`],
    ['not base64url', `${h}.${p}.${s}+/`],
    ['whitespace', ` ${token}`],
    ['header not JSON', `${Buffer.from('nope').toString('base64url')}.${p}.${s}`],
    ['header an array', `${b64(['EdDSA'])}.${p}.${s}`],
    ['header invalid UTF-8', `${Buffer.from([0xff, 0xfe]).toString('base64url')}.${p}.${s}`],
    ['oversized', `${h}.${'A'.repeat(20_000)}.${s}`],
  ];
  for (const [name, bad] of malformed) {
    const outcome = await verifyPermit(options(t, bad));
    refusal(t, outcome, 'PERMIT_INVALID', name);
    t.equal(outcome.valid === false && outcome.claims, null, `${name}: no claims`);
  }
  // The core's strict UTF-8 decoder serves every call: a header that ends inside a multi-byte
  // sequence is refused and leaves nothing behind for the next permit.
  const truncated = Buffer.concat([Buffer.from('{"alg":"EdDSA"}'), Buffer.from([0xe2, 0x82])]).toString('base64url');
  refusal(t, await verifyPermit(options(t, `${truncated}.${p}.${s}`)), 'PERMIT_INVALID', 'header ends inside a UTF-8 sequence');
  t.equal((await verifyPermit(options(t, token))).valid, true, 'the next permit decodes and verifies');
});

t.test('algorithm, type and key id', async (t) => {
  const claims = claimsFor();
  const [, p] = (await issue()).token.split('.') as [string, string];
  // alg none, with and without a signature part: never accepted.
  refusal(t, await verifyPermit(options(t, `${b64({ alg: 'none', typ: 'permit+jwt', kid: KID })}.${p}.`)), 'PERMIT_INVALID', 'alg none, empty signature');
  refusal(t, await verifyPermit(options(t, `${b64({ alg: 'none', typ: 'permit+jwt', kid: KID })}.${p}.AAAA`)), 'PERMIT_INVALID', 'alg none', /EdDSA/);

  // HS256 keyed with the public key's bytes: the classic algorithm-confusion attack.
  const publicBytes = new TextEncoder().encode(JSON.stringify(publicJwk));
  const hs = await rawSign({ alg: 'HS256', typ: 'permit+jwt', kid: KID }, claims, publicBytes);
  refusal(t, await verifyPermit(options(t, hs)), 'PERMIT_INVALID', 'HS256', /EdDSA/);
  // Even a resolver that hands out a secret does not make an HMAC permit acceptable.
  const secretResolver: PermitKeyResolver = { resolve: async () => publicBytes };
  const hsAsEdDSA = `${b64({ alg: 'EdDSA', typ: 'permit+jwt', kid: KID })}.${hs.split('.')[1]}.${hs.split('.')[2]}`;
  refusal(t, await verifyPermit(options(t, hsAsEdDSA, { keys: secretResolver })), 'PERMIT_INVALID', 'symmetric key from the resolver', /Ed25519 public key/);

  refusal(t, await verifyPermit(options(t, await rawSign({ alg: 'Ed25519', typ: 'permit+jwt', kid: KID }, claims))), 'PERMIT_INVALID', 'alg Ed25519 (not the exact name)', /EdDSA/);
  refusal(t, await verifyPermit(options(t, await rawSign({ alg: 'EdDSA', typ: 'JWT', kid: KID }, claims))), 'PERMIT_INVALID', 'typ JWT', /not a permit/);
  refusal(t, await verifyPermit(options(t, await rawSign({ alg: 'EdDSA', typ: 'PERMIT+JWT', kid: KID }, claims))), 'PERMIT_INVALID', 'typ in other case');
  refusal(t, await verifyPermit(options(t, await rawSign({ alg: 'EdDSA', kid: KID }, claims))), 'PERMIT_INVALID', 'no typ');
  refusal(t, await verifyPermit(options(t, await rawSign({ alg: 'EdDSA', typ: 'permit+jwt' }, claims))), 'PERMIT_INVALID', 'no kid', /names no key/);
  refusal(t, await verifyPermit(options(t, await rawSign({ alg: 'EdDSA', typ: 'permit+jwt', kid: '' }, claims))), 'PERMIT_INVALID', 'empty kid');
  refusal(
    t,
    await verifyPermit(options(t, manualSign({ alg: 'EdDSA', typ: 'permit+jwt', kid: KID, crit: ['exp'], exp: 1 }, claims))),
    'PERMIT_INVALID',
    'critical header extension',
    /critical/,
  );

  const unknown = await signPermit(claims, { kid: 'not-published', privateKey: signing.privateKey });
  const outcome = await verifyPermit(options(t, unknown));
  refusal(t, outcome, 'PERMIT_INVALID', 'unknown kid');
  t.match(outcome.valid === false && outcome.reason, /unknown key/);

  // A resolver returning a non-Ed25519 key (say, a misconfigured JWKS).
  const ec = generateKeyPairSync('ec', { namedCurve: 'P-256' });
  refusal(t, await verifyPermit(options(t, (await issue()).token, { keys: { resolve: async () => ec.publicKey } })), 'PERMIT_INVALID', 'EC key', /Ed25519 public key/);
  const ed = generateKeyPairSync('ed25519');
  refusal(t, await verifyPermit(options(t, (await issue()).token, { keys: { resolve: async () => ed.privateKey } })), 'PERMIT_INVALID', 'private KeyObject');
  // A matching public KeyObject is fine.
  const edToken = await signPermit(claims, { kid: KID, privateKey: ed.privateKey });
  t.equal((await verifyPermit(options(t, edToken, { keys: { resolve: async () => ed.publicKey } }))).valid, true, 'KeyObject keys work');
});

for (const signatureOn of ['event-loop', 'thread-pool'] as const satisfies readonly SignatureOn[]) {
  t.test(`signature and payload tampering, signature checked on the ${signatureOn}`, async (t) => {
    const { token, claims } = await issue();
    const [h, p, s] = token.split('.') as [string, string, string];
    t.same(await verifyPermit(options(t, token, { signatureOn })), { valid: true, claims, binding: 'full', consumed: true }, 'the untouched permit verifies');
    let outcome = await verifyPermit(options(t, tamperSignature(token), { signatureOn }));
    refusal(t, outcome, 'PERMIT_INVALID', 'tampered signature', /signature/);
    t.equal(outcome.valid === false && outcome.claims, null, 'no claims before a valid signature');

    const payload = JSON.parse(Buffer.from(p, 'base64url').toString('utf8')) as Record<string, unknown>;
    outcome = await verifyPermit(options(t, `${h}.${b64({ ...payload, amount_usd: 1 })}.${s}`, { signatureOn }));
    refusal(t, outcome, 'PERMIT_INVALID', 'tampered payload (added claim)', /signature/);
    outcome = await verifyPermit(options(t, `${h}.${b64({ ...payload, exp: (payload['exp'] as number) + 100 })}.${s}`, { signatureOn }));
    refusal(t, outcome, 'PERMIT_INVALID', 'tampered payload (exp)', /signature/);
    outcome = await verifyPermit(options(t, `${b64({ alg: 'EdDSA', typ: 'permit+jwt', kid: KID, x: 1 })}.${p}.${s}`, { signatureOn }));
    refusal(t, outcome, 'PERMIT_INVALID', 'tampered header', /signature/);

    const otherKey = await signPermit(claimsFor(), { kid: KID, privateKey: other.privateKey });
    refusal(t, await verifyPermit(options(t, otherKey, { signatureOn })), 'PERMIT_INVALID', 'signed by another key under our kid', /signature/);
  });
}

t.test("'auto' checks signatures on the event loop until several verifications are in flight", async (t) => {
  t.equal(signatureRunsOnPool('auto', 1), false, 'alone: on the event loop');
  t.equal(signatureRunsOnPool('auto', POOL_WHEN_IN_FLIGHT - 1), false, 'just below the threshold: on the event loop');
  t.equal(signatureRunsOnPool('auto', POOL_WHEN_IN_FLIGHT), true, 'at the threshold: on the thread pool');
  t.equal(signatureRunsOnPool('event-loop', 100), false, 'event-loop: always');
  t.equal(signatureRunsOnPool('thread-pool', 1), true, 'thread-pool: always');

  // Started together, all 80 are in flight when they reach the signature, so 'auto' sends each
  // to the pool, and the answers are the event loop's: genuine permits valid, tampered refused.
  const store = newMemoryStore(t);
  const genuine = await Promise.all(Array.from({ length: 40 }, () => issue()));
  const outcomes = await Promise.all(
    genuine.flatMap(({ token }) => [
      verifyPermit(options(t, token, { store })),
      verifyPermit(options(t, tamperSignature(token), { store })),
    ]),
  );
  t.same(
    outcomes.filter((_, i) => i % 2 === 0).map((o) => o.valid && o.claims.jti),
    genuine.map(({ claims }) => claims.jti),
    'every genuine permit verified',
  );
  const tampered = outcomes.filter((_, i) => i % 2 === 1);
  t.ok(tampered.every((o) => !o.valid && o.code === 'PERMIT_INVALID' && /signature/.test(o.reason)), 'every tampered permit refused at the signature');
});

t.test('claims that do not parse', async (t) => {
  const claims = claimsFor();
  const header = { alg: 'EdDSA', typ: 'permit+jwt', kid: KID };
  const bad: [string, unknown][] = [
    ['not an object', 'hello'],
    ['missing jti', { ...claims, jti: undefined }],
    ['short jti', { ...claims, jti: 'abc' }],
    ['one false', { ...claims, one: false }],
    ['lifetime over the maximum', { ...claims, exp: claims.iat + MAX_PERMIT_LIFETIME_SECONDS + 1 }],
    ['exp before nbf', { ...claims, exp: claims.nbf }],
    ['bkeys without actor_id', { ...claims, bkeys: ['action_type'] }],
    ['aud as an array', { ...claims, aud: [DEFAULT_PERMIT_AUDIENCE] }],
    ['iat after nbf', { ...claims, iat: claims.nbf + 1, iat_ms: undefined }],
    ['negative iat', { ...claims, iat: -1, iat_ms: undefined }],
    ['a fractional iat (milliseconds belong in iat_ms)', { ...claims, iat: claims.iat - 0.5, iat_ms: undefined }],
    ['iat_ms outside the second of iat', { ...claims, iat_ms: (claims.iat + 1) * 1000 }],
    ['iat_ms before the second of iat', { ...claims, iat_ms: claims.iat * 1000 - 1 }],
    ['a fractional iat_ms', { ...claims, iat_ms: claims.iat * 1000 + 0.5 }],
  ];
  for (const [name, payload] of bad) {
    const outcome = await verifyPermit(options(t, await rawSign(header, payload)));
    refusal(t, outcome, 'PERMIT_INVALID', name, /claims are invalid/);
    t.equal(outcome.valid === false && outcome.claims, null, `${name}: no claims`);
  }
});

t.test('staticKeyResolver', async (t) => {
  const ec = await generateKeyPair('ES256', { extractable: true });
  const ecJwk = { ...(await exportJWK(ec.publicKey)), kid: 'ec' } as JWK;
  const privateJwk = { ...(await exportJWK(other.privateKey)), kid: 'with-d' } as JWK;
  const resolver = staticKeyResolver({
    keys: [
      ecJwk,
      { kty: 'oct', k: 'c2VjcmV0', kid: 'oct' },
      { kty: 'OKP', crv: 'Ed25519', x: 'not-a-key', kid: 'broken' },
      { ...publicJwk, kid: 'enc', use: 'enc' },
      { ...publicJwk, kid: 'wrong-alg', alg: 'ES256' },
      { kty: 'OKP', crv: 'Ed25519', x: publicJwk.x } as JWK,
      publicJwk,
      { ...(await exportJWK(other.publicKey)), kid: KID },
      privateJwk,
    ],
  });
  for (const kid of ['ec', 'oct', 'broken', 'enc', 'wrong-alg', 'absent']) t.equal(await resolver.resolve(kid), null, `${kid}: ignored`);
  const key = await resolver.resolve(KID);
  t.not(key, null);
  t.equal((key as { type: string }).type, 'public');
  const withD = await resolver.resolve('with-d');
  t.equal((withD as { type: string }).type, 'public', 'only the public part of a private JWK is imported');
  // First of two keys with one kid wins.
  t.equal((await verifyPermit(options(t, (await issue()).token, { keys: resolver }))).valid, true, 'first key for a kid wins');
});

t.test('buildPermitClaims', async (t) => {
  const { facts, keys: bkeys } = boundFacts({ action_type: 'deploy.production', actor_id: 'ci', context: { environment: 'prod' } }, []);
  const base = { issuer: ISSUER, audience: DEFAULT_PERMIT_AUDIENCE, org: ORG, requestId: 'r', facts, keys: bkeys, policyVersion: 1, nowMs: T0 + 999 };
  const short = buildPermitClaims({ ...base, lifetimeSeconds: 0 });
  t.equal(short.iat, IAT, 'iat is floor(now / 1000): whole seconds');
  t.equal(short.iat_ms, T0 + 999, 'iat_ms carries the millisecond of now (for the epoch fence)');
  t.equal(short.nbf, IAT, 'nbf is iat');
  t.equal(buildPermitClaims({ ...base, nowMs: T0 + 999.9, lifetimeSeconds: 60 }).iat_ms, T0 + 999, 'iat_ms is floored to an integer');
  t.equal(short.exp, IAT + 1, 'lifetime at least 1 s');
  t.equal(buildPermitClaims({ ...base, lifetimeSeconds: 10_000 }).exp, IAT + MAX_PERMIT_LIFETIME_SECONDS, 'lifetime at most 300 s');
  t.match(short.jti, /^[A-Za-z0-9_-]{22}$/);
  t.not(short.jti, buildPermitClaims({ ...base, lifetimeSeconds: 60 }).jti, 'fresh jti each time');
  t.equal(short.env, 'prod');
  t.notOk('tgt' in short);
  t.notOk('apr' in short);
  t.same(buildPermitClaims({ ...base, lifetimeSeconds: 60, approvals: ['apr_1'] }).apr, ['apr_1']);
  t.throws(() => buildPermitClaims({ ...base, lifetimeSeconds: 60, keys: [...bkeys, 'ticket'] }), { code: 'INVALID_BOUND_FACT' }, 'a listed key without a value');
  t.throws(() => buildPermitClaims({ ...base, lifetimeSeconds: Number.NaN }), RangeError);
  t.throws(() => buildPermitClaims({ ...base, lifetimeSeconds: 60, org: 'org{x}' }), 'org with braces refused');
  await t.rejects(signPermit(short, { kid: KID, privateKey: other.publicKey }), TypeError, 'a public key cannot sign');
  await t.rejects(signPermit(short, { kid: '', privateKey: other.privateKey }), RangeError, 'a kid is required');
});
