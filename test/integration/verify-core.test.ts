/**
 * The permit verification core against real tokens: an Ed25519 key pair from jose, permits
 * built and signed by the authority's signer, verified by `verifyPermit` exactly as the proxy
 * and verify-permit call it. Every refusal code is produced by a real token; time moves through
 * `nowMs`, never by sleeping. Replay, revocation, the verification record and 500 concurrent
 * verifications run on MemoryStore always and on RedisStore when REDIS_URL is set.
 *
 * @example
 *   REDIS_URL=redis://127.0.0.1:6391 npx tap --disable-coverage test/integration/verify-core.test.ts
 */
import t from 'tap';
import type { Test } from 'tap';
import { KeyObject, generateKeyPairSync, sign as cryptoSign } from 'node:crypto';
import type { webcrypto } from 'node:crypto';
import { CompactSign, decodeProtectedHeader, exportJWK, generateKeyPair } from 'jose';
import type { CryptoKey, JWK } from 'jose';
import { buildPermitClaims, signPermit } from '../../authority/permits/sign.js';
import { boundFacts } from '../../shared/permits/binding.js';
import {
  DEFAULT_PERMIT_AUDIENCE,
  MAX_PERMIT_LIFETIME_SECONDS,
  PERMIT_LEEWAY_SECONDS,
} from '../../shared/permits/claims.js';
import type { PermitClaims } from '../../shared/permits/claims.js';
import { permitStoreKey, verificationStream } from '../../shared/permits/store-keys.js';
import { staticKeyResolver } from '../../shared/permits/static-keys.js';
import { POOL_WHEN_IN_FLIGHT, VERIFY_ERROR_CODES, signatureRunsOnPool, verifyPermit } from '../../shared/permits/verify.js';
import type { PermitKeyResolver, SignatureOn, VerifyOutcome, VerifyPermitOptions } from '../../shared/permits/verify.js';
import { MemoryStore } from '../../shared/store/memory.js';
import { RedisStore } from '../../shared/store/redis.js';
import type { SharedStore } from '../../shared/store/types.js';
import { REDIS_NOT_RUN_REASON, TEST_COMMAND_TIMEOUT_MS, deleteKeys, redisUrl, uniquePrefix } from '../helpers/redis.js';
import { tamperSignature } from '../helpers/permit-tokens.js';

const ISSUER = 'https://authority.test';
const ORG = 'org_1';
const KID = 'permit-key-1';
const T0 = 1_800_000_000_000;
const IAT = T0 / 1000;

const CONTEXT = {
  environment: 'production',
  target: { type: 'account', id: 'acct_42' },
  amount_usd: 1250.5,
  account_code: 'GL-4010',
  ticket: 'CHG-1001',
  memo: 'not bound',
};
/** What the gate derives for the request the permit was issued for. */
const GATE_FACTS = {
  action_type: 'payment.wire',
  actor_id: 'svc-billing',
  environment: 'production',
  target: { type: 'account', id: 'acct_42' },
  amount_usd: 1250.5,
  account_code: 'GL-4010',
  ticket: 'CHG-1001',
};

const signing = await generateKeyPair('EdDSA', { crv: 'Ed25519', extractable: true });
const other = await generateKeyPair('EdDSA', { crv: 'Ed25519', extractable: true });
const publicJwk = { ...(await exportJWK(signing.publicKey)), kid: KID, alg: 'EdDSA', use: 'sig' } as JWK;
const keys = staticKeyResolver({ keys: [publicJwk] });

interface IssueOptions {
  issuer?: string;
  audience?: string;
  org?: string;
  context?: Record<string, unknown>;
  actionType?: string;
  actorId?: string;
  bind?: string[];
  lifetimeSeconds?: number;
}

function claimsFor(options: IssueOptions = {}): PermitClaims {
  const { facts, keys: bkeys } = boundFacts(
    {
      action_type: options.actionType ?? 'payment.wire',
      actor_id: options.actorId ?? 'svc-billing',
      context: options.context ?? CONTEXT,
    },
    options.bind ?? ['ticket'],
  );
  return buildPermitClaims({
    issuer: options.issuer ?? ISSUER,
    audience: options.audience ?? DEFAULT_PERMIT_AUDIENCE,
    org: options.org ?? ORG,
    requestId: 'req_1',
    facts,
    keys: bkeys,
    policyVersion: 3,
    nowMs: T0,
    lifetimeSeconds: options.lifetimeSeconds ?? 60,
  });
}

async function issue(options: IssueOptions = {}): Promise<{ token: string; claims: PermitClaims }> {
  const claims = claimsFor(options);
  return { token: await signPermit(claims, { kid: KID, privateKey: signing.privateKey }), claims };
}

/** Signs anything, bypassing signPermit's checks: for headers and claims an attacker controls. */
async function rawSign(header: Record<string, unknown>, payload: unknown, key: CryptoKey | Uint8Array = signing.privateKey): Promise<string> {
  return new CompactSign(new TextEncoder().encode(JSON.stringify(payload)))
    .setProtectedHeader(header as { alg: string })
    .sign(key);
}

/** Signs without jose, for headers jose refuses to produce (a `crit` extension). */
function manualSign(header: Record<string, unknown>, payload: unknown): string {
  const input = `${b64(header)}.${b64(payload)}`;
  const signature = cryptoSign(null, Buffer.from(input), KeyObject.from(signing.privateKey as unknown as webcrypto.CryptoKey));
  return `${input}.${signature.toString('base64url')}`;
}

function newMemoryStore(t: Test, now = () => T0): MemoryStore {
  const store = new MemoryStore({ now, maxMarkers: 10_000, maxRevocations: 1000 });
  t.teardown(() => store.close());
  return store;
}

function options(t: Test, token: string | undefined, overrides: Partial<VerifyPermitOptions> = {}): VerifyPermitOptions {
  return {
    token,
    keys,
    issuer: ISSUER,
    audience: DEFAULT_PERMIT_AUDIENCE,
    orgId: ORG,
    nowMs: T0 + 1000,
    binding: { kind: 'full', facts: { ...GATE_FACTS } },
    store: overrides.store ?? newMemoryStore(t),
    record: (claims) => ({ stream: verificationStream(claims.org), fields: { permit_id: claims.jti, outcome: 'allow' } }),
    ...overrides,
  };
}

/**
 * Asserts the code (the contract). `step`, when given, pins the refusing step through its reason,
 * so a test cannot pass because an earlier check happened to refuse the token.
 */
function refusal(t: Test, outcome: VerifyOutcome, code: string, message: string, step?: RegExp): void {
  t.equal(outcome.valid, false, `${message}: refused`);
  if (!outcome.valid) {
    t.equal(outcome.code, code, `${message}: ${code}`);
    t.type(outcome.reason, 'string');
    t.ok(outcome.reason.length > 0, `${message}: has a reason`);
    if (step) t.match(outcome.reason, step, `${message}: refused at the intended step`);
  }
}

function b64(value: unknown): string {
  return Buffer.from(JSON.stringify(value)).toString('base64url');
}

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

t.test('issuer, audience, organization, existence', async (t) => {
  let outcome = await verifyPermit(options(t, (await issue({ issuer: 'https://evil.test' })).token));
  refusal(t, outcome, 'PERMIT_INVALID', 'wrong issuer', /issuer/);
  t.equal(outcome.valid === false && outcome.claims?.iss, 'https://evil.test', 'claims are reported once the signature holds');

  outcome = await verifyPermit(options(t, (await issue({ audience: 'countersign:other-gate' })).token));
  refusal(t, outcome, 'PERMIT_INVALID', 'wrong audience', /audience/);

  outcome = await verifyPermit(options(t, (await issue({ org: 'org_2' })).token));
  refusal(t, outcome, 'ORG_MISMATCH', 'other organization');
  t.equal(outcome.valid === false && outcome.claims?.org, 'org_2');

  const { token, claims } = await issue();
  const seen: string[] = [];
  outcome = await verifyPermit(
    options(t, token, {
      permitStatus: async (c) => {
        seen.push(c.jti);
        return 'unknown';
      },
    }),
  );
  refusal(t, outcome, 'PERMIT_NOT_FOUND', 'not found');
  t.same(seen, [claims.jti], 'asked about this permit');

  // Recorded as used or revoked: refused before the store is asked, so a store that lost the fact cannot re-open it.
  const recorded = await issue();
  refusal(t, await verifyPermit(options(t, recorded.token, { permitStatus: async () => 'consumed' })), 'PERMIT_ALREADY_USED', 'recorded as consumed');
  refusal(t, await verifyPermit(options(t, recorded.token, { permitStatus: async () => 'revoked' })), 'PERMIT_REVOKED', 'recorded as revoked');

  outcome = await verifyPermit(options(t, token, { permitStatus: async () => 'issued' }));
  t.equal(outcome.valid, true, 'found');

  outcome = await verifyPermit(
    options(t, (await issue()).token, {
      permitStatus: async () => {
        throw new Error('database down');
      },
    }),
  );
  refusal(t, outcome, 'INTERNAL_ERROR', 'lookup fails');
  t.equal(outcome.valid === false && outcome.unavailable, true, 'unavailable');
});

t.test('not yet valid and expired, at the leeway boundaries', async (t) => {
  const { token, claims } = await issue({ lifetimeSeconds: 60 });
  const leewayMs = PERMIT_LEEWAY_SECONDS * 1000;
  t.equal(claims.exp - claims.iat, 60);
  refusal(t, await verifyPermit(options(t, token, { nowMs: claims.nbf * 1000 - leewayMs - 1 })), 'PERMIT_NOT_YET_VALID', 'before nbf beyond the leeway');
  t.equal((await verifyPermit(options(t, token, { nowMs: claims.nbf * 1000 - leewayMs }))).valid, true, 'within the leeway before nbf');
  t.equal((await verifyPermit(options(t, token, { nowMs: claims.exp * 1000 + leewayMs - 1 }))).valid, true, 'within the leeway after exp');
  refusal(t, await verifyPermit(options(t, token, { nowMs: claims.exp * 1000 + leewayMs })), 'PERMIT_EXPIRED', 'at exp + leeway');
  refusal(t, await verifyPermit(options(t, token, { nowMs: claims.exp * 1000 + 3_600_000 })), 'PERMIT_EXPIRED', 'long expired');
  refusal(t, await verifyPermit(options(t, token, { nowMs: claims.exp * 1000, leewaySeconds: 0 })), 'PERMIT_EXPIRED', 'no leeway');

  // The consume marker outlives the last accepted moment.
  const store = newMemoryStore(t);
  const ttls: number[] = [];
  const spy: SharedStore = Object.assign(Object.create(store) as SharedStore, {
    consumePermit: (key: string, ttlMs: number) => {
      ttls.push(ttlMs);
      return store.consumePermit(key, ttlMs);
    },
  });
  await verifyPermit(options(t, (await issue()).token, { store: spy, nowMs: T0 + 10_000 }));
  await verifyPermit(options(t, (await issue()).token, { store: spy, nowMs: claims.exp * 1000 + leewayMs - 1 }));
  t.same(ttls, [60_000 - 10_000 + leewayMs, 1], 'TTL until exp + leeway, at least 1 ms');
});

t.test('action type and actor', async (t) => {
  const { token } = await issue();
  refusal(t, await verifyPermit(options(t, token, { binding: { kind: 'full', facts: { ...GATE_FACTS, action_type: 'payment.refund' } } })), 'ACTION_TYPE_MISMATCH', 'action type');
  refusal(t, await verifyPermit(options(t, token, { binding: { kind: 'full', facts: { ...GATE_FACTS, actor_id: 'svc-other' } } })), 'ACTOR_MISMATCH', 'actor');
  // Action type is checked before the actor.
  refusal(
    t,
    await verifyPermit(options(t, token, { binding: { kind: 'full', facts: { ...GATE_FACTS, action_type: 'x.y', actor_id: 'z' } } })),
    'ACTION_TYPE_MISMATCH',
    'both differ',
  );
});

t.test('binding mismatch on each bound fact', async (t) => {
  const { token } = await issue();
  const changed: [string, Record<string, unknown>][] = [
    ['environment', { environment: 'staging' }],
    ['target.type', { target: { type: 'wallet', id: 'acct_42' } }],
    ['target.id', { target: { type: 'account', id: 'acct_43' } }],
    ['amount_usd', { amount_usd: 1250.51 }],
    ['amount_usd as a string', { amount_usd: '1250.5' }],
    ['account_code', { account_code: 'GL-4011' }],
    ['extra bound key', { ticket: 'CHG-1002' }],
    ['unbound standard fact the gate derived', { environment: 'production' }],
  ];
  for (const [name, change] of changed) {
    const facts = name.startsWith('unbound') ? { ...GATE_FACTS } : { ...GATE_FACTS, ...change };
    const permit = name.startsWith('unbound') ? (await issue({ context: { ...CONTEXT, environment: undefined } })).token : token;
    const outcome = await verifyPermit(options(t, permit, { binding: { kind: 'full', facts } }));
    refusal(t, outcome, 'BINDING_MISMATCH', name, name.startsWith('unbound') ? /carries environment/ : name.endsWith('string') ? /amount_usd/ : /does not match/);
    t.not(outcome.valid === false && outcome.claims, null, `${name}: claims reported`);
  }

  for (const missing of ['environment', 'target', 'amount_usd', 'account_code', 'ticket']) {
    const facts: Record<string, unknown> = { ...GATE_FACTS };
    delete facts[missing];
    const outcome = await verifyPermit(options(t, token, { binding: { kind: 'full', facts } }));
    refusal(t, outcome, 'BINDING_MISMATCH', `gate could not derive ${missing}`);
    t.match(outcome.valid === false && outcome.reason, missing, 'the reason names the fact');
  }
  const noAction: Record<string, unknown> = { ...GATE_FACTS };
  delete noAction['action_type'];
  refusal(t, await verifyPermit(options(t, token, { binding: { kind: 'full', facts: noAction } })), 'BINDING_MISMATCH', 'gate could not derive action_type');

  refusal(
    t,
    await verifyPermit(options(t, token, { binding: { kind: 'full', facts: { ...GATE_FACTS, amount_usd: Number.NaN } } })),
    'BINDING_MISMATCH',
    'a gate fact without canonical form',
  );

  // Facts the permit does not bind, and extra target keys, do not matter.
  const outcome = await verifyPermit(
    options(t, token, {
      binding: { kind: 'full', facts: { ...GATE_FACTS, memo: 'anything', target: { id: 'acct_42', type: 'account', label: 'x' } } },
    }),
  );
  t.equal(outcome.valid, true, 'unbound extras and extra target keys are ignored');
});

t.test('partial binding', async (t) => {
  const { token } = await issue();
  let outcome = await verifyPermit(options(t, token, { binding: { kind: 'partial', actionType: 'payment.wire', actorId: 'svc-billing' } }));
  t.equal(outcome.valid, true);
  t.equal(outcome.valid && outcome.binding, 'partial');

  outcome = await verifyPermit(options(t, (await issue()).token, { binding: { kind: 'partial', actionType: '', actorId: '' } }));
  t.equal(outcome.valid && outcome.binding, 'partial', 'empty strings mean not given');
  outcome = await verifyPermit(options(t, (await issue()).token, { binding: { kind: 'partial' } }));
  t.equal(outcome.valid && outcome.binding, 'partial', 'nothing given');

  refusal(t, await verifyPermit(options(t, (await issue()).token, { binding: { kind: 'partial', actionType: 'payment.refund' } })), 'ACTION_TYPE_MISMATCH', 'partial action type');
  refusal(t, await verifyPermit(options(t, (await issue()).token, { binding: { kind: 'partial', actorId: 'svc-other' } })), 'ACTOR_MISMATCH', 'partial actor');
});

t.test('a failing store or key source fails closed', async (t) => {
  const store = newMemoryStore(t);
  const failing = Object.assign(Object.create(store) as SharedStore, { consumePermit: async () => Promise.reject(new Error('connection refused')) });
  const failed = await verifyPermit(options(t, (await issue()).token, { store: failing }));
  refusal(t, failed, 'INTERNAL_ERROR', 'the revocation check and consume reject');
  t.equal(failed.valid === false && failed.unavailable, true, 'unavailable');

  const closed = newMemoryStore(t);
  await closed.close();
  const outcome = await verifyPermit(options(t, (await issue()).token, { store: closed }));
  refusal(t, outcome, 'INTERNAL_ERROR', 'closed store');
  t.equal(outcome.valid === false && outcome.unavailable, true);

  const keysDown: PermitKeyResolver = { resolve: async () => Promise.reject(new Error('JWKS fetch failed')) };
  const keysOutcome = await verifyPermit(options(t, (await issue()).token, { keys: keysDown }));
  refusal(t, keysOutcome, 'INTERNAL_ERROR', 'key source down');
  t.equal(keysOutcome.valid === false && keysOutcome.unavailable, true);

  const recordThrows = await verifyPermit(
    options(t, (await issue()).token, {
      record: () => {
        throw new Error('bug');
      },
    }),
  );
  refusal(t, recordThrows, 'INTERNAL_ERROR', 'record builder throws');

  const badOption = await verifyPermit(options(t, (await issue()).token, { nowMs: Number.NaN }));
  refusal(t, badOption, 'INTERNAL_ERROR', 'invalid nowMs: an outcome, not an exception');
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

// ---------------------------------------------------------------------------------------------
// State shared between gates: on MemoryStore always, on RedisStore when REDIS_URL is set.

type StoreFactory = (t: Test) => SharedStore;

const stores: [string, StoreFactory][] = [['memory', (t) => newMemoryStore(t)]];
const url = redisUrl();
if (url) {
  stores.push([
    'redis',
    (t) => {
      const keyPrefix = uniquePrefix();
      const store = new RedisStore({ url, keyPrefix, commandTimeoutMs: TEST_COMMAND_TIMEOUT_MS });
      t.teardown(async () => {
        await store.close();
        await deleteKeys(url, keyPrefix);
      });
      return store;
    },
  ]);
} else {
  t.comment(`RedisStore variant of the replay, revocation and concurrency tests not run: ${REDIS_NOT_RUN_REASON}`);
}

for (const [name, open] of stores) {
  t.test(`${name}: revoked, replayed, and the verification record`, async (t) => {
    const store = open(t);
    const first = await issue();
    const revoked = await issue();
    await store.revoke(permitStoreKey(ORG, revoked.claims.jti), 120_000);
    refusal(t, await verifyPermit(options(t, revoked.token, { store })), 'PERMIT_REVOKED', 'revoked');

    const ok = await verifyPermit(options(t, first.token, { store }));
    t.equal(ok.valid, true, 'first use');
    t.equal(ok.valid && ok.consumed, true);
    refusal(t, await verifyPermit(options(t, first.token, { store })), 'PERMIT_ALREADY_USED', 'second use');
    refusal(t, await verifyPermit(options(t, first.token, { store, binding: { kind: 'partial' } })), 'PERMIT_ALREADY_USED', 'second use via verify-permit');

    // A refused permit is not consumed: after the refusal it still verifies once.
    const later = await issue();
    refusal(t, await verifyPermit(options(t, later.token, { store, binding: { kind: 'full', facts: { ...GATE_FACTS, ticket: 'x' } } })), 'BINDING_MISMATCH', 'mismatch');
    t.equal((await verifyPermit(options(t, later.token, { store }))).valid, true, 'a refused permit was not consumed');

    const records = await store.readRecords(verificationStream(ORG), '0', 100);
    t.same(
      records.map((r) => r.fields),
      [
        { permit_id: first.claims.jti, outcome: 'allow' },
        { permit_id: later.claims.jti, outcome: 'allow' },
      ],
      'one record per successful verification, none for refusals',
    );

    // The revocation marker and the consume marker live apart under one key.
    const consumedThenRevoked = await issue();
    t.equal((await verifyPermit(options(t, consumedThenRevoked.token, { store }))).valid, true);
    await store.revoke(permitStoreKey(ORG, consumedThenRevoked.claims.jti), 120_000);
    refusal(t, await verifyPermit(options(t, consumedThenRevoked.token, { store })), 'PERMIT_REVOKED', 'revocation is checked before replay');
  });

  t.test(`${name}: 500 concurrent verifications of one permit`, async (t) => {
    const store = open(t);
    const { token, claims } = await issue();
    const outcomes = await Promise.all(Array.from({ length: 500 }, () => verifyPermit(options(t, token, { store }))));
    const valid = outcomes.filter((o) => o.valid);
    const used = outcomes.filter((o) => !o.valid && o.code === 'PERMIT_ALREADY_USED');
    t.equal(valid.length, 1, 'exactly one valid');
    t.equal(used.length, 499, '499 PERMIT_ALREADY_USED');
    const records = await store.readRecords(verificationStream(ORG), '0', 1000);
    t.same(records.map((r) => r.fields['permit_id']), [claims.jti], 'exactly one record');
  });
}
