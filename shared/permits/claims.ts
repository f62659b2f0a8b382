/**
 * Permit claims: the one schema both the signer (authority) and the verifier (proxy and
 * verify-permit) hold a permit to. A permit is a JWS compact token, header
 * `{alg: 'EdDSA', typ: 'permit+jwt', kid}`, whose payload parses with `PermitClaims`.
 *
 * The schema is deliberately tighter than what the signer needs, because the verifier runs it on
 * every token whose signature checked out: a permit with a lifetime beyond
 * MAX_PERMIT_LIFETIME_SECONDS, a `bkeys` list that does not bind the action and the actor, or a
 * malformed `jti` is refused even if some signing key produced it.
 *
 * @example
 *   const parsed = PermitClaims.safeParse(JSON.parse(payloadText));
 *   if (!parsed.success) refuse('PERMIT_INVALID');
 *   const jti = newPermitId(); // 'Xc2lH2k1cTUVbqG7Pq0x9A' (22 base64url characters)
 */
import { randomFillSync } from 'node:crypto';
import { z } from 'zod';

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

const PERMIT_ID_BYTES = 16;
/**
 * Random bytes for permit ids, drawn from the CSPRNG 4 KiB at a time (as node's randomUUID
 * buffers its own): one `randomBytes(16)` call costs about 2 µs, a slice of this about 0.1 µs.
 * Every byte is used once.
 */
const idEntropy = Buffer.alloc(4096);
let idEntropyOffset = idEntropy.length;

/** A 128-bit random permit id (`jti`). */
export function newPermitId(): string {
  if (idEntropyOffset + PERMIT_ID_BYTES > idEntropy.length) {
    randomFillSync(idEntropy);
    idEntropyOffset = 0;
  }
  const id = idEntropy.toString('base64url', idEntropyOffset, idEntropyOffset + PERMIT_ID_BYTES);
  idEntropyOffset += PERMIT_ID_BYTES;
  return id;
}

export function isPermitId(value: string): boolean {
  return PERMIT_ID_PATTERN.test(value);
}

/**
 * `iat`, `nbf` and `exp` are whole-second NumericDates: standard JWT libraries compare them with a
 * whole-second clock, and a fractional `iat` looked to them like a permit from the future for up
 * to a second after it was issued. A fractional `iat` (what authorities before whole seconds
 * signed) is refused rather than read two ways: the authority is upgraded before the gates, and
 * such a permit lives at most MAX_PERMIT_LIFETIME_SECONDS, so refusing it (the caller evaluates
 * again and gets one of this form) costs at most minutes of refusals during an upgrade, while
 * accepting it would keep a second shape of permit alive for good.
 */
const seconds = z.number().int().nonnegative().max(Number.MAX_SAFE_INTEGER);
/**
 * `iat_ms`: the moment of issue in integer milliseconds, for the replay store's epoch fence, which
 * compares it with the moment the store's state began; whole seconds would leave a second-long
 * window in which a permit issued just before a loss passes the fence. It lies within `iat`'s
 * second (`iat` is its floor). Optional: a permit without it is fenced by `iat` alone (see
 * `issuedAtMs`).
 */
const milliseconds = z.number().int().nonnegative().max(Number.MAX_SAFE_INTEGER);

export const PermitTarget = z.strictObject({ type: z.string(), id: z.string() });

export const PermitClaims = z
  .object({
    iss: z.string().min(1),
    aud: z.string().min(1),
    /** The actor_id. */
    sub: z.string().min(1).max(256),
    org: z.string().min(1).max(256).regex(ORG_ID_PATTERN, 'org must not contain braces or control characters'),
    jti: z.string().regex(PERMIT_ID_PATTERN, 'jti must be 22 base64url characters (128 bits)'),
    /** The evaluation's request_id. */
    rid: z.string().min(1),
    /** The action_type. */
    act: z.string().min(1).max(256),
    env: z.string().optional(),
    tgt: PermitTarget.optional(),
    /** Names of the bound facts; the verifier recomputes `bnd` over exactly these. */
    bkeys: z
      .array(z.string().min(1))
      .refine((keys) => new Set(keys).size === keys.length, 'bkeys must not repeat a name')
      .refine(
        (keys) => keys.includes('action_type') && keys.includes('actor_id'),
        'bkeys must bind action_type and actor_id',
      ),
    bnd: z.string().regex(BINDING_HASH_PATTERN, 'bnd must be a base64url SHA-256 digest'),
    pv: z.number().int().nonnegative(),
    one: z.literal(true),
    apr: z.array(z.string().min(1)).optional(),
    iat: seconds,
    iat_ms: milliseconds.optional(),
    nbf: seconds,
    exp: seconds,
  })
  .refine((c) => c.iat_ms === undefined || Math.floor(c.iat_ms / 1000) === c.iat, {
    message: 'iat_ms must fall within the second iat names',
    path: ['iat_ms'],
  })
  .refine((c) => c.exp > c.nbf && c.nbf >= c.iat, {
    message: 'a permit must satisfy iat <= nbf < exp',
    path: ['exp'],
  })
  .refine((c) => c.exp - c.iat <= MAX_PERMIT_LIFETIME_SECONDS, {
    message: `a permit lives at most ${MAX_PERMIT_LIFETIME_SECONDS} seconds`,
    path: ['exp'],
  });

export type PermitClaims = z.infer<typeof PermitClaims>;

/**
 * The moment of issue the epoch fence compares with the store's epoch: `iat_ms`, or, for a permit
 * without it, the start of `iat`'s second. That start is never later than the true moment (`iat`
 * is floored), so the fence then refuses a permit issued in the epoch's own second even if it came
 * after the epoch: it errs towards refusing (the caller evaluates again), never towards accepting.
 */
export function issuedAtMs(claims: Pick<PermitClaims, 'iat' | 'iat_ms'>): number {
  return claims.iat_ms ?? claims.iat * 1000;
}
export type PermitTarget = z.infer<typeof PermitTarget>;
