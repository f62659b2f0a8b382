/**
 * Permit claims: the one check both the signer (authority) and the verifier (proxy and
 * verify-permit) hold a permit to. A permit is a JWS compact token, header
 * `{alg: 'EdDSA', typ: 'permit+jwt', kid}`, whose payload passes `parsePermitClaims`.
 *
 * The check is deliberately tighter than what the signer needs, because the verifier runs it on
 * every token whose signature checked out: a permit with a lifetime beyond
 * MAX_PERMIT_LIFETIME_SECONDS, a `bkeys` list that does not bind the action and the actor, or a
 * malformed `jti` is refused even if some signing key produced it.
 *
 * @example
 *   const parsed = parsePermitClaims(JSON.parse(payloadText));
 *   if (!parsed.success) refuse('PERMIT_INVALID');
 *   const jti = newPermitId(); // 'Xc2lH2k1cTUVbqG7Pq0x9A' (22 base64url characters)
 */
import { randomBytes } from 'node:crypto';

export const PERMIT_ALG = 'EdDSA';
export const PERMIT_TYP = 'permit+jwt';
export const DEFAULT_PERMIT_AUDIENCE = 'countersign:gate';
/** Clock skew tolerated between the authority and a gate, on both `nbf` and `exp`. */
export const PERMIT_LEEWAY_SECONDS = 5;
export const DEFAULT_PERMIT_LIFETIME_SECONDS = 60;
export const MAX_PERMIT_LIFETIME_SECONDS = 300;

/** 16 random bytes in base64url without padding: always 22 characters. */
const PERMIT_ID_PATTERN = /^[A-Za-z0-9_-]{22}$/;
/** A SHA-256 digest in base64url without padding: always 43 characters. */
const BINDING_HASH_PATTERN = /^[A-Za-z0-9_-]{43}$/;
/**
 * Braces would break the `{org}` Redis Cluster hash tag of the replay keys (see store-keys.ts);
 * control characters have no business in an identifier.
 */
const ORG_ID_PATTERN = /^[^{}\p{Cc}]+$/u;

/** A 128-bit random permit id (`jti`). */
export function newPermitId(): string {
  return randomBytes(16).toString('base64url');
}

export function isPermitId(value: string): boolean {
  return PERMIT_ID_PATTERN.test(value);
}

/** The target a permit is bound to (`tgt`): only these two keys. */
export interface PermitTarget {
  type: string;
  id: string;
}

/** A permit's claims, as the authority signs them and every verifier holds them. */
export interface PermitClaims {
  iss: string;
  aud: string;
  /** The actor_id. */
  sub: string;
  org: string;
  jti: string;
  /** The evaluation's request_id. */
  rid: string;
  /** The action_type. */
  act: string;
  env?: string;
  tgt?: PermitTarget;
  /** Names of the bound facts; the verifier recomputes `bnd` over exactly these. */
  bkeys: string[];
  bnd: string;
  pv: number;
  one: true;
  apr?: string[];
  /**
   * Carries milliseconds (RFC 7519 NumericDate may be fractional): the replay store's epoch fence
   * compares it with the moment the store's state began, and whole seconds would leave a
   * second-long window in which a permit issued just before a loss passes the fence.
   */
  iat: number;
  nbf: number;
  exp: number;
}

export type PermitClaimsParse =
  | { success: true; data: PermitClaims }
  | { success: false; error: PermitClaimsError };

/** Claims that do not parse; `buildPermitClaims` throws it rather than sign them. */
export class PermitClaimsError extends Error {
  readonly code = 'INVALID_PERMIT_CLAIMS' as const;
  /** The first claim that failed ('' for the payload itself), as `tgt.id` or `apr.0`. */
  readonly path: string;

  constructor(path: string, message: string) {
    super(`permit claims${path === '' ? '' : ` (${path})`}: ${message}`);
    this.name = 'PermitClaimsError';
    this.path = path;
  }
}

/**
 * The one check of a permit's claims, for the signer (before it signs) and every verifier (after
 * the signature held). Hand-written rather than a zod schema: a verifier runs it on every
 * enforced request, and zod's parse cost the proxy about as much as its binding hash. Keys it does
 * not know are dropped from `data`, as a zod object would strip them.
 *
 * @example
 *   const parsed = parsePermitClaims(JSON.parse(payloadText));
 *   if (!parsed.success) refuse('PERMIT_INVALID', parsed.error.path);
 */
export function parsePermitClaims(value: unknown): PermitClaimsParse {
  try {
    return { success: true, data: checkedClaims(value) };
  } catch (error) {
    if (error instanceof PermitClaimsError) return { success: false, error };
    throw error;
  }
}

function checkedClaims(value: unknown): PermitClaims {
  if (!isRecord(value)) throw new PermitClaimsError('', 'must be a JSON object');
  const claims: PermitClaims = {
    iss: text(value, 'iss', 1),
    aud: text(value, 'aud', 1),
    sub: text(value, 'sub', 1, 256),
    org: text(value, 'org', 1, 256),
    jti: text(value, 'jti', 0, Infinity, PERMIT_ID_PATTERN, 'must be 22 base64url characters (128 bits)'),
    rid: text(value, 'rid', 1),
    act: text(value, 'act', 1, 256),
    bkeys: boundKeys(value['bkeys']),
    bnd: text(value, 'bnd', 0, Infinity, BINDING_HASH_PATTERN, 'must be a base64url SHA-256 digest'),
    pv: wholeNumber(value, 'pv'),
    one: literalTrue(value['one']),
    iat: number(value, 'iat', MAX_IAT),
    nbf: wholeNumber(value, 'nbf'),
    exp: wholeNumber(value, 'exp'),
  };
  if (!ORG_ID_PATTERN.test(claims.org)) throw new PermitClaimsError('org', 'must not contain braces or control characters');
  if (value['env'] !== undefined) claims.env = text(value, 'env', 0);
  if (value['tgt'] !== undefined) claims.tgt = target(value['tgt']);
  if (value['apr'] !== undefined) claims.apr = texts(value['apr'], 'apr');
  if (!(claims.exp > claims.nbf && claims.nbf >= Math.floor(claims.iat))) throw new PermitClaimsError('exp', 'a permit must satisfy iat <= nbf < exp');
  if (claims.exp - claims.iat > MAX_PERMIT_LIFETIME_SECONDS) {
    throw new PermitClaimsError('exp', `a permit lives at most ${MAX_PERMIT_LIFETIME_SECONDS} seconds`);
  }
  return claims;
}

/** `iat` in seconds with milliseconds: its milliseconds must stay a safe integer. */
const MAX_IAT = Number.MAX_SAFE_INTEGER / 1000;

function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

function text(claims: Record<string, unknown>, name: string, min: number, max = Infinity, pattern?: RegExp, patternMessage = ''): string {
  const value = claims[name];
  if (typeof value !== 'string') throw new PermitClaimsError(name, 'must be a string');
  if (value.length < min || value.length > max) throw new PermitClaimsError(name, `must be ${min} to ${max} characters long`);
  if (pattern && !pattern.test(value)) throw new PermitClaimsError(name, patternMessage);
  return value;
}

/** A finite number from 0 to `max`. */
function number(claims: Record<string, unknown>, name: string, max: number): number {
  const value = claims[name];
  if (typeof value !== 'number' || !Number.isFinite(value) || value < 0 || value > max) {
    throw new PermitClaimsError(name, `must be a number from 0 to ${max}`);
  }
  return value;
}

/** A safe integer >= 0 (seconds since the epoch, or the policy version). */
function wholeNumber(claims: Record<string, unknown>, name: string): number {
  const value = claims[name];
  if (typeof value !== 'number' || !Number.isSafeInteger(value) || value < 0) throw new PermitClaimsError(name, 'must be a whole number >= 0');
  return value;
}

function literalTrue(value: unknown): true {
  if (value !== true) throw new PermitClaimsError('one', 'must be true: every permit is single use');
  return true;
}

/** A list of non-empty strings. */
function texts(value: unknown, name: string): string[] {
  if (!Array.isArray(value)) throw new PermitClaimsError(name, 'must be an array of strings');
  for (let i = 0; i < value.length; i++) {
    const item: unknown = value[i];
    if (typeof item !== 'string' || item.length === 0) throw new PermitClaimsError(`${name}.${i}`, 'must be a non-empty string');
  }
  return value as string[];
}

function boundKeys(value: unknown): string[] {
  const keys = texts(value, 'bkeys');
  if (new Set(keys).size !== keys.length) throw new PermitClaimsError('bkeys', 'bkeys must not repeat a name');
  if (!keys.includes('action_type') || !keys.includes('actor_id')) throw new PermitClaimsError('bkeys', 'bkeys must bind action_type and actor_id');
  return keys;
}

/** Exactly `{type, id}`, both strings: the binding covers only those two keys. */
function target(value: unknown): PermitTarget {
  if (!isRecord(value)) throw new PermitClaimsError('tgt', 'must be an object {type, id}');
  for (const key of Object.keys(value)) {
    if (key !== 'type' && key !== 'id') throw new PermitClaimsError('tgt', `has a key it may not have: ${key}`);
  }
  const { type, id } = value;
  if (typeof type !== 'string') throw new PermitClaimsError('tgt.type', 'must be a string');
  if (typeof id !== 'string') throw new PermitClaimsError('tgt.id', 'must be a string');
  return { type, id };
}

