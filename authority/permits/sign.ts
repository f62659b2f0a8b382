/**
 * Issues permits: builds the claims of an allowed action (binding hash included, via the shared
 * binding code the gates use) and signs them as a compact JWS with header exactly
 * `{alg: 'EdDSA', typ: 'permit+jwt', kid}`.
 *
 * @example
 *   const { facts, keys } = boundFacts({ action_type, actor_id, context }, actionClass.bind);
 *   const claims = buildPermitClaims({
 *     issuer, audience: DEFAULT_PERMIT_AUDIENCE, org: orgId, requestId, facts, keys,
 *     policyVersion: 7, nowMs: clock.now(), lifetimeSeconds: actionClass.permitLifetimeSeconds,
 *   });
 *   const token = await signPermit(claims, { kid: signingKey.kid, privateKey: signingKey.privateKey });
 */
import { KeyObject } from 'node:crypto';
import type { CryptoKey } from 'jose';
import { BindingFactError, bindingHash, factOf, normalizeBoundFact } from '../../shared/permits/binding.js';
import { keyObjectOf, processEd25519 } from '../../shared/permits/ed25519.js';
import {
  MAX_PERMIT_LIFETIME_SECONDS,
  PERMIT_ALG,
  PERMIT_TYP,
  PermitClaims,
  newPermitId,
} from '../../shared/permits/claims.js';
import type { PermitTarget } from '../../shared/permits/claims.js';

export interface PermitSigningKey {
  kid: string;
  privateKey: CryptoKey | KeyObject;
}

export interface BuildPermitClaimsInput {
  issuer: string;
  audience: string;
  org: string;
  /** Default: a fresh 128-bit id. */
  jti?: string;
  requestId: string;
  /** The bound facts, as `boundFacts` returned them (a superset is fine: `keys` selects). */
  facts: Record<string, unknown>;
  /** The names of the bound facts (`boundFacts(...).keys`); they become `bkeys`. */
  keys: readonly string[];
  /**
   * `bindingHash(org, facts)` when the caller has computed it already (evaluate has, for the
   * evaluation's record); computed here otherwise. It must be the hash of exactly these facts.
   */
  bindingHash?: string;
  policyVersion: number;
  /** Ids of the approvals this permit consumed. */
  approvals?: readonly string[];
  nowMs: number;
  /** Clamped to [1, MAX_PERMIT_LIFETIME_SECONDS]. */
  lifetimeSeconds: number;
}

/** Throws (ZodError, BindingFactError, RangeError) rather than build a permit no gate accepts. */
export function buildPermitClaims(input: BuildPermitClaimsInput): PermitClaims {
  if (!Number.isFinite(input.nowMs)) throw new RangeError('nowMs must be finite');
  if (!Number.isFinite(input.lifetimeSeconds)) throw new RangeError('lifetimeSeconds must be finite');
  const lifetime = Math.min(MAX_PERMIT_LIFETIME_SECONDS, Math.max(1, Math.floor(input.lifetimeSeconds)));
  const keys = [...new Set(input.keys)].sort();

  const bound: Record<string, unknown> = {};
  for (const name of keys) {
    const value = factOf(input.facts, name);
    if (value === undefined) throw new BindingFactError(name, 'is listed as bound but has no value');
    bound[name] = value;
  }
  const bnd = input.bindingHash ?? bindingHash(input.org, bound);

  // Whole seconds, floored, so that a verifier's clock reads at least iat and nbf the moment the
  // permit exists; the exact millisecond goes to iat_ms, for the replay store's epoch fence.
  const issuedAtMs = Math.floor(input.nowMs);
  const iat = Math.floor(issuedAtMs / 1000);
  const claims: Record<string, unknown> = {
    iss: input.issuer,
    aud: input.audience,
    sub: bound['actor_id'],
    org: input.org,
    jti: input.jti ?? newPermitId(),
    rid: input.requestId,
    act: bound['action_type'],
    bkeys: keys,
    bnd,
    pv: input.policyVersion,
    one: true,
    iat,
    iat_ms: issuedAtMs,
    nbf: iat,
    exp: iat + lifetime,
  };
  if (bound['environment'] !== undefined) claims['env'] = normalizeBoundFact('environment', bound['environment']);
  if (bound['target'] !== undefined) {
    claims['tgt'] = normalizeBoundFact('target', bound['target']) as PermitTarget;
  }
  if (input.approvals && input.approvals.length > 0) claims['apr'] = [...input.approvals];
  return PermitClaims.parse(claims);
}

/**
 * Signs `claims` with an Ed25519 private key: the compact JWS
 * `base64url(header).base64url(claims).base64url(signature)`. A synchronous Ed25519 sign
 * (libsodium where it loads, else node:crypto; shared/permits/ed25519.ts) is used directly: it is
 * the evaluate hot path, and WebCrypto's asynchronous job costs about twice as much per permit.
 * jose verifies the result like any other JWS (the tests check that).
 */
export async function signPermit(claims: PermitClaims, key: PermitSigningKey): Promise<string> {
  // `claims` come from buildPermitClaims, which validated them: parsing them again here cost the
  // evaluate path about 1 % of its CPU.
  if (typeof key.kid !== 'string' || key.kid.length === 0) throw new RangeError('the signing key needs a kid');
  if (!isEd25519PrivateKey(key.privateKey)) throw new TypeError('permits are signed with an Ed25519 private key only');
  const privateKey = keyObjectOf(key.privateKey);
  const header = Buffer.from(JSON.stringify({ alg: PERMIT_ALG, typ: PERMIT_TYP, kid: key.kid })).toString('base64url');
  const signingInput = `${header}.${Buffer.from(JSON.stringify(claims)).toString('base64url')}`;
  return `${signingInput}.${processEd25519().sign(Buffer.from(signingInput), privateKey).toString('base64url')}`;
}

function isEd25519PrivateKey(key: CryptoKey | KeyObject): boolean {
  if (key instanceof KeyObject) return key.type === 'private' && key.asymmetricKeyType === 'ed25519';
  const candidate = key as { type?: unknown; algorithm?: { name?: unknown } };
  return candidate.type === 'private' && candidate.algorithm?.name === 'Ed25519';
}
