/**
 * The fixture of the permit verification core's tests (test/integration/verify-core*.test.ts):
 * an Ed25519 key pair from jose, permits built and signed by the authority's signer for one
 * action, the facts a gate derives for it, and `verifyPermit`'s options as the proxy and
 * verify-permit pass them. Time is a fixed `T0`; a test moves it through `nowMs`, never by sleeping.
 *
 * @example
 *   const { token } = await issue();
 *   refusal(t, await verifyPermit(options(t, token, { nowMs: T0 + 3_600_000 })), 'PERMIT_EXPIRED', 'long expired');
 */
import type { Test } from 'tap';
import { KeyObject, sign as cryptoSign } from 'node:crypto';
import type { webcrypto } from 'node:crypto';
import { CompactSign, exportJWK, generateKeyPair } from 'jose';
import type { CryptoKey, JWK } from 'jose';
import { buildPermitClaims, signPermit } from '../../authority/permits/sign.js';
import { boundFacts } from '../../shared/permits/binding.js';
import { DEFAULT_PERMIT_AUDIENCE } from '../../shared/permits/claims.js';
import type { PermitClaims } from '../../shared/permits/claims.js';
import { verificationStream } from '../../shared/permits/store-keys.js';
import { staticKeyResolver } from '../../shared/permits/static-keys.js';
import type { VerifyOutcome, VerifyPermitOptions } from '../../shared/permits/verify.js';
import { MemoryStore } from '../../shared/store/memory.js';

export const ISSUER = 'https://authority.test';
export const ORG = 'org_1';
export const KID = 'permit-key-1';
export const T0 = 1_800_000_000_000;
export const IAT = T0 / 1000;

export const CONTEXT = {
  environment: 'production',
  target: { type: 'account', id: 'acct_42' },
  amount_usd: 1250.5,
  account_code: 'GL-4010',
  ticket: 'CHG-1001',
  memo: 'not bound',
};
/** What the gate derives for the request the permit was issued for. */
export const GATE_FACTS = {
  action_type: 'payment.wire',
  actor_id: 'svc-billing',
  environment: 'production',
  target: { type: 'account', id: 'acct_42' },
  amount_usd: 1250.5,
  account_code: 'GL-4010',
  ticket: 'CHG-1001',
};

export const signing = await generateKeyPair('EdDSA', { crv: 'Ed25519', extractable: true });
export const other = await generateKeyPair('EdDSA', { crv: 'Ed25519', extractable: true });
export const publicJwk = { ...(await exportJWK(signing.publicKey)), kid: KID, alg: 'EdDSA', use: 'sig' } as JWK;
export const keys = staticKeyResolver({ keys: [publicJwk] });

export interface IssueOptions {
  issuer?: string;
  audience?: string;
  org?: string;
  context?: Record<string, unknown>;
  actionType?: string;
  actorId?: string;
  bind?: string[];
  lifetimeSeconds?: number;
}

export function claimsFor(options: IssueOptions = {}): PermitClaims {
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

export async function issue(options: IssueOptions = {}): Promise<{ token: string; claims: PermitClaims }> {
  const claims = claimsFor(options);
  return { token: await signPermit(claims, { kid: KID, privateKey: signing.privateKey }), claims };
}

/** Signs anything, bypassing signPermit's checks: for headers and claims an attacker controls. */
export async function rawSign(header: Record<string, unknown>, payload: unknown, key: CryptoKey | Uint8Array = signing.privateKey): Promise<string> {
  return new CompactSign(new TextEncoder().encode(JSON.stringify(payload)))
    .setProtectedHeader(header as { alg: string })
    .sign(key);
}

/** Signs without jose, for headers jose refuses to produce (a `crit` extension). */
export function manualSign(header: Record<string, unknown>, payload: unknown): string {
  const input = `${b64(header)}.${b64(payload)}`;
  const signature = cryptoSign(null, Buffer.from(input), KeyObject.from(signing.privateKey as unknown as webcrypto.CryptoKey));
  return `${input}.${signature.toString('base64url')}`;
}

export function newMemoryStore(t: Test, now = () => T0): MemoryStore {
  const store = new MemoryStore({ now, maxMarkers: 10_000, maxRevocations: 1000 });
  t.teardown(() => store.close());
  return store;
}

export function options(t: Test, token: string | undefined, overrides: Partial<VerifyPermitOptions> = {}): VerifyPermitOptions {
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
export function refusal(t: Test, outcome: VerifyOutcome, code: string, message: string, step?: RegExp): void {
  t.equal(outcome.valid, false, `${message}: refused`);
  if (!outcome.valid) {
    t.equal(outcome.code, code, `${message}: ${code}`);
    t.type(outcome.reason, 'string');
    t.ok(outcome.reason.length > 0, `${message}: has a reason`);
    if (step) t.match(outcome.reason, step, `${message}: refused at the intended step`);
  }
}

export function b64(value: unknown): string {
  return Buffer.from(JSON.stringify(value)).toString('base64url');
}
