/**
 * The first half of every permit check: a compact JWS parsed with bounded input, its header
 * (EdDSA, `permit+jwt`, a kid), its Ed25519 signature under the published key for that kid, its
 * claims, issuer, audience and organization. verifyPermit (verify.ts) continues from here to the
 * records, time, binding and the consume; the authority's permit routes stop here, to learn which
 * permit a token presented in their path names without ever trusting an unsigned `jti`.
 *
 * Never throws for a bad token; a key resolver that fails is `unavailable` (fail closed).
 *
 * @example
 *   const signed = await signedPermitClaims(token, { keys, issuer, audience, orgId, onPool: () => false });
 *   if (signed.ok) signed.claims.jti; // the permit id
 *   else signed.refusal.code; // 'PERMIT_INVALID', 'ORG_MISMATCH' or 'INTERNAL_ERROR'
 */
import { KeyObject, verify as cryptoVerify } from 'node:crypto';
import type { CryptoKey } from 'jose';
import { keyObjectOf, processEd25519, type Ed25519Engine } from './ed25519.js';
import { PERMIT_ALG, PERMIT_TYP, PermitClaims } from './claims.js';
import type { VerifyErrorCode } from './verify-codes.js';

export type PermitVerificationKey = CryptoKey | KeyObject | Uint8Array;

/**
 * Finds the public key for a `kid`. On an unknown kid the resolver refreshes its key set itself
 * (with a cooldown, so forged kids cannot hammer the authority); null means still unknown. A
 * rejection means the keys could not be obtained at all and fails closed as INTERNAL_ERROR.
 */
export interface PermitKeyResolver {
  resolve(kid: string): Promise<PermitVerificationKey | null>;
}

/** Far above any real permit; refuses oversized input before any decoding. */
export const MAX_TOKEN_LENGTH = 16 * 1024;
const MAX_KID_LENGTH = 256;
const BASE64URL = /^[A-Za-z0-9_-]+$/;
/** Three base64url parts: the shape of a compact JWS, whatever it holds. */
const COMPACT_JWS = /^[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+$/;
const ED25519_SIGNATURE_BYTES = 64;

/** Whether `value` has the shape of a compact JWS (three base64url parts) within MAX_TOKEN_LENGTH. */
export function looksLikeCompactJws(value: string): boolean {
  return value.length <= MAX_TOKEN_LENGTH && COMPACT_JWS.test(value);
}

export interface SignedClaimsOptions {
  keys: PermitKeyResolver;
  /** The authority's issuer (`iss`). */
  issuer: string;
  /** The gate audience (`aud`). */
  audience: string;
  /** The organization the permit must belong to. */
  orgId: string;
  /** Whether this signature check goes to libuv's thread pool (verify.ts decides). */
  onPool: (engine: Ed25519Engine) => boolean;
}

export interface SignedClaimsRefusal {
  code: VerifyErrorCode;
  reason: string;
  /** Set once the signature was verified and the claims parsed. */
  claims: PermitClaims | null;
  /** The keys could not be obtained: fail closed. */
  unavailable?: true;
}

export type SignedClaims = { ok: true; claims: PermitClaims } | { ok: false; refusal: SignedClaimsRefusal };

export async function signedPermitClaims(token: unknown, options: SignedClaimsOptions): Promise<SignedClaims> {
  // Parse: exactly three base64url parts and a JSON object header.
  if (typeof token !== 'string') return refuse('PERMIT_INVALID', 'the permit is not a string', null);
  if (token.length > MAX_TOKEN_LENGTH) return refuse('PERMIT_INVALID', 'the permit is too long', null);
  const parts = token.split('.');
  if (parts.length !== 3 || !parts.every((part) => BASE64URL.test(part))) {
    return refuse('PERMIT_INVALID', 'the permit is not a compact JWS', null);
  }
  const header = decodeJsonObject(parts[0]!);
  if (!header) return refuse('PERMIT_INVALID', 'the permit header cannot be decoded', null);

  // Algorithm and type: only EdDSA permits, never `none`, HMAC or another token type.
  if (header['alg'] !== PERMIT_ALG) return refuse('PERMIT_INVALID', 'the permit is not signed with EdDSA', null);
  if (header['typ'] !== PERMIT_TYP) return refuse('PERMIT_INVALID', 'the token is not a permit', null);
  if ('crit' in header) return refuse('PERMIT_INVALID', 'the permit header has critical extensions', null);
  const kid = header['kid'];
  if (typeof kid !== 'string' || kid.length === 0 || kid.length > MAX_KID_LENGTH) {
    return refuse('PERMIT_INVALID', 'the permit header names no key', null);
  }

  let key: PermitVerificationKey | null;
  try {
    key = await options.keys.resolve(kid);
  } catch {
    return { ok: false, refusal: { code: 'INTERNAL_ERROR', reason: 'the permit signing keys could not be obtained', claims: null, unavailable: true } };
  }
  if (key === null) return refuse('PERMIT_INVALID', 'the permit was signed with an unknown key', null);
  if (!isEd25519PublicKey(key)) return refuse('PERMIT_INVALID', 'the key for this permit is not an Ed25519 public key', null);

  // Ed25519 over the signing input with libsodium or node:crypto (ed25519.ts), not WebCrypto,
  // which would decode the header a second time per permit (alg, typ and crit are checked above).
  const signature = Buffer.from(parts[2]!, 'base64url');
  const signingInput = Buffer.from(token.slice(0, parts[0]!.length + 1 + parts[1]!.length), 'latin1');
  let signed = false;
  if (signature.length === ED25519_SIGNATURE_BYTES) {
    const ed25519 = processEd25519();
    try {
      // Inline, no await: a plain boolean would still cost an async hop per permit.
      signed = options.onPool(ed25519.engine)
        ? await ed25519VerifyOnPool(signingInput, keyObjectOf(key), signature)
        : ed25519.verify(signingInput, keyObjectOf(key), signature);
    } catch {
      signed = false;
    }
  }
  if (!signed) return refuse('PERMIT_INVALID', 'the permit signature is invalid', null);

  const parsed = PermitClaims.safeParse(decodeJson(Buffer.from(parts[1]!, 'base64url')));
  if (!parsed.success) {
    const issue = parsed.error.issues[0];
    const where = issue && issue.path.length > 0 ? ` (${issue.path.join('.')})` : '';
    return refuse('PERMIT_INVALID', `the permit claims are invalid${where}`, null);
  }
  const claims = parsed.data;

  if (claims.iss !== options.issuer) return refuse('PERMIT_INVALID', 'the permit was issued by another issuer', claims);
  if (claims.aud !== options.audience) return refuse('PERMIT_INVALID', 'the permit is meant for another audience', claims);
  if (claims.org !== options.orgId) return refuse('ORG_MISMATCH', 'the permit belongs to another organization', claims);
  return { ok: true, claims };
}

function refuse(code: VerifyErrorCode, reason: string, claims: PermitClaims | null): SignedClaims {
  return { ok: false, refusal: { code, reason, claims } };
}

/** node:crypto's Ed25519 verify as a job on libuv's thread pool. */
function ed25519VerifyOnPool(data: Buffer, key: KeyObject, signature: Buffer): Promise<boolean> {
  return new Promise((resolve, reject) => {
    cryptoVerify(null, data, key, signature, (error, valid) => (error ? reject(error) : resolve(valid)));
  });
}

function isEd25519PublicKey(key: PermitVerificationKey): key is KeyObject | CryptoKey {
  if (key instanceof KeyObject) return key.type === 'public' && key.asymmetricKeyType === 'ed25519';
  if (key instanceof Uint8Array) return false;
  const candidate = key as { type?: unknown; algorithm?: { name?: unknown } };
  return candidate.type === 'public' && candidate.algorithm?.name === 'Ed25519';
}

function decodeJsonObject(part: string): Record<string, unknown> | null {
  const value = decodeJson(Buffer.from(part, 'base64url'));
  return typeof value === 'object' && value !== null && !Array.isArray(value) ? (value as Record<string, unknown>) : null;
}

/** Strict: invalid UTF-8 throws rather than turning into U+FFFD. Stateless, so one serves every call. */
const UTF8 = new TextDecoder('utf-8', { fatal: true });

/** undefined when the bytes are not UTF-8 JSON. */
function decodeJson(bytes: Uint8Array): unknown {
  try {
    return JSON.parse(UTF8.decode(bytes)) as unknown;
  } catch {
    return undefined;
  }
}
