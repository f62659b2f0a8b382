/**
 * Permit times: `iat`, `nbf` and `exp` are whole seconds, so standard JWT libraries accept a
 * permit the moment `POST /v1/evaluate` (real HTTP on loopback) issues it: PyJWT with its default
 * options (it compares `iat` with a whole-second clock) and jose's `jwtVerify` with no clock
 * tolerance, for permits issued at several points of a second, late ones included. The replay
 * store's epoch fence keeps its millisecond precision through `iat_ms`: a permit issued in the
 * epoch's own second but before it is refused, one issued at the epoch passes, and a permit
 * without `iat_ms` is fenced from the start of its `iat` second (refused rather than let through).
 */
import { setTimeout as sleep } from 'node:timers/promises';
import t from 'tap';
import { createLocalJWKSet, exportJWK, generateKeyPair, jwtVerify, type JWK } from 'jose';
import { buildPermitClaims, signPermit } from '../../authority/permits/sign.js';
import { boundFacts } from '../../shared/permits/binding.js';
import { DEFAULT_PERMIT_AUDIENCE, PERMIT_TYP, issuedAtMs, type PermitClaims } from '../../shared/permits/claims.js';
import { staticKeyResolver } from '../../shared/permits/static-keys.js';
import { verifyPermit, type VerifyOutcome } from '../../shared/permits/verify.js';
import { MemoryStore } from '../../shared/store/memory.js';
import { EvaluateResponse } from '../../shared/wire/evaluate.js';
import { withTestAuthority, type TestAuthority } from '../helpers/authority.js';
import { appBackends } from '../helpers/backends.js';
import { loopbackApi } from '../helpers/loopback-api.js';
import { PYJWT_NOT_RUN_REASON, pyjwtAvailable, startPyjwt, type PyjwtVerdict } from '../helpers/pyjwt.js';

const ISSUER = 'countersign';
/** Milliseconds into a second at which permits are issued: early, middle and late. */
const OFFSETS_MS = [20, 250, 500, 750, 900, 980];

/** Waits (without asserting anything about time) until the wall clock is `offset` ms into a second. */
async function untilOffset(offset: number): Promise<void> {
  await sleep((offset - (Date.now() % 1000) + 1000) % 1000);
}

/** The authority on loopback: evaluate (its clock caught up with the wall clock first) and its JWKS. */
async function permits(authority: TestAuthority) {
  const { call, problems } = await loopbackApi(authority);
  const jwks = (await call('GET', '/v1/permit-keys')).body as { keys: JWK[] };
  return {
    jwks,
    problems,
    /** A permit for demo.echo, issued now. */
    async issue(): Promise<string> {
      authority.clock.advance(Math.max(0, Date.now() - authority.clock.now()));
      const reply = await call('POST', '/v1/evaluate', {
        body: { action_type: 'demo.echo', actor_id: 'demo-agent', context: { environment: 'dev', target: { type: 'demo', id: 'p' } } },
      });
      const answer = EvaluateResponse.parse(reply.body);
      if (!answer.permit_token) throw new Error(`evaluate issued no permit: ${reply.text}`);
      return answer.permit_token;
    },
  };
}

const claimsOf = (token: string): Record<string, unknown> => JSON.parse(Buffer.from(token.split('.')[1] ?? '', 'base64url').toString('utf8'));

for (const backend of appBackends()) {
  t.test(`PyJWT (default options) verifies a permit at once, at any point of a second, on ${backend.name}`, (t) =>
    withTestAuthority(t, backend, async (authority) => {
      if (!pyjwtAvailable()) {
        t.comment(`PyJWT test did not run: ${PYJWT_NOT_RUN_REASON}`);
        return;
      }
      const pyjwt = startPyjwt(t);
      const api = await permits(authority);
      for (const offset of OFFSETS_MS) {
        await untilOffset(offset);
        const token = await api.issue();
        const claims = claimsOf(token);
        const jwk = api.jwks.keys.find((key) => key.kid === JSON.parse(Buffer.from(token.split('.')[0] ?? '', 'base64url').toString('utf8')).kid);
        const verdict: PyjwtVerdict = await pyjwt.decode({ token, jwk: jwk as Record<string, unknown>, audience: DEFAULT_PERMIT_AUDIENCE, issuer: ISSUER });
        t.same(verdict, { ok: true, claims }, `issued ${offset} ms into a second (iat ${String(claims['iat'])}, iat_ms ${String(claims['iat_ms'])}): PyJWT accepts it`);
      }
      t.same(api.problems, [], 'every answer is one the OpenAPI document describes');
    }),
  );

  t.test(`jose's jwtVerify with no clock tolerance verifies a permit at once, on ${backend.name}`, (t) =>
    withTestAuthority(t, backend, async (authority) => {
      const api = await permits(authority);
      const keys = createLocalJWKSet(api.jwks);
      for (const offset of OFFSETS_MS) {
        await untilOffset(offset);
        const token = await api.issue();
        // maxTokenAge makes jose check iat as well as nbf and exp.
        const verified = await jwtVerify(token, keys, { algorithms: ['EdDSA'], typ: PERMIT_TYP, issuer: ISSUER, audience: DEFAULT_PERMIT_AUDIENCE, clockTolerance: 0, maxTokenAge: '300s' }).then(
          ({ payload }) => payload,
          (error: Error) => error.message,
        );
        t.same(verified, claimsOf(token), `issued ${offset} ms into a second: jose accepts it`);
      }
      t.same(api.problems, [], 'every answer is one the OpenAPI document describes');
    }),
  );
}

t.test('the claims: whole seconds, and the millisecond of issue in iat_ms', async (t) => {
  const nowMs = Date.parse('2026-11-21T12:00:00.987Z');
  const claims = claimsAt(nowMs);
  t.equal(claims.iat, Math.floor(nowMs / 1000), 'iat is the second of issue, floored');
  t.equal(claims.nbf, claims.iat, 'nbf is iat: valid from the moment of issue');
  t.equal(claims.exp, claims.iat + 60, 'exp is a whole second');
  t.equal(claims.iat_ms, nowMs, 'iat_ms is the millisecond of issue');
  t.equal(issuedAtMs(claims), nowMs, 'the fence reads iat_ms');
  t.equal(issuedAtMs({ iat: claims.iat }), Math.floor(nowMs / 1000) * 1000, 'without iat_ms, the start of the iat second: never later than the issue');
});

t.test('the epoch fence keeps milliseconds: a permit from the same second but before the epoch is refused', async (t) => {
  const signing = await generateKeyPair('EdDSA', { crv: 'Ed25519', extractable: true });
  const keys = staticKeyResolver({ keys: [{ ...(await exportJWK(signing.publicKey)), kid: 'k1', alg: 'EdDSA', use: 'sig' }] });
  // The store's state began (its epoch) 400 ms into a second.
  const epochMs = Date.parse('2026-11-21T12:00:00.400Z');
  const store = new MemoryStore({ now: () => epochMs });
  t.teardown(() => store.close());
  t.equal(await store.ensureEpoch('unused'), epochMs, 'the in-process store\'s epoch is its creation');
  const verify = async (claims: PermitClaims): Promise<VerifyOutcome> =>
    verifyPermit({
      token: await signPermit(claims, { kid: 'k1', privateKey: signing.privateKey }),
      keys,
      issuer: ISSUER,
      audience: DEFAULT_PERMIT_AUDIENCE,
      orgId: 'org_1',
      nowMs: epochMs + 100,
      binding: { kind: 'partial' },
      store,
    });
  const codeOf = (outcome: VerifyOutcome) => (outcome.valid ? 'valid' : outcome.code);

  t.equal(codeOf(await verify(claimsAt(epochMs - 1))), 'REPLAY_STATE_RESET', 'issued 1 ms before the epoch, in the same second: refused');
  t.equal(codeOf(await verify(claimsAt(epochMs - 400))), 'REPLAY_STATE_RESET', 'issued at the start of the epoch\'s second: refused');
  t.equal(codeOf(await verify(claimsAt(epochMs))), 'valid', 'issued at the epoch: accepted');
  t.equal(codeOf(await verify(claimsAt(epochMs + 1))), 'valid', 'issued 1 ms after the epoch: accepted');

  // A permit without iat_ms (an authority that did not write it) is fenced from the start of its
  // iat second: refused even when it was in fact issued after the epoch, in the epoch's second.
  const withoutMs = (nowMs: number): PermitClaims => ({ ...claimsAt(nowMs), iat_ms: undefined });
  t.equal(codeOf(await verify(withoutMs(epochMs + 300))), 'REPLAY_STATE_RESET', 'no iat_ms, iat in the epoch\'s second: refused');
  t.equal(codeOf(await verify(withoutMs(epochMs + 600))), 'valid', 'no iat_ms, iat in the second after the epoch: accepted');
});

function claimsAt(nowMs: number): PermitClaims {
  const { facts, keys } = boundFacts({ action_type: 'demo.echo', actor_id: 'demo-agent', context: {} }, []);
  return buildPermitClaims({ issuer: ISSUER, audience: DEFAULT_PERMIT_AUDIENCE, org: 'org_1', requestId: 'r', facts, keys, policyVersion: 1, nowMs, lifetimeSeconds: 60 });
}
