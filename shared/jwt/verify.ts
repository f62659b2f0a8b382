/**
 * Bearer JWTs from an issuer, verified: signature from the issuer's JWKS (URL or local file),
 * `iss`, `aud`, `exp`/`nbf` with a small leeway, and only asymmetric algorithms (a shared-secret
 * HS* or `none` token is never accepted). The authority verifies its users' tokens with it
 * (authority/auth/jwt.ts) and the MCP gate its callers' OAuth tokens (proxy/mcp/caller-identity.ts);
 * each reads its own claims from the verified payload.
 *
 * The configuration fields are shared too (`JWT_ISSUER_FIELDS`, `ONE_KEY_SOURCE`), so both files
 * accept the same keys with the same defaults and messages.
 *
 * @example
 *   const verify = await createTokenVerifier({ issuer: 'https://idp.example/', audience: 'https://gate.example/mcp',
 *     jwks_url: 'https://idp.example/.well-known/jwks.json', algorithms: ['RS256'], clock_tolerance_seconds: 5 });
 *   const payload = await verify(token); // throws JwtRejectedError (401) or JwksUnavailableError (503)
 */
import { readFile } from 'node:fs/promises';
import { createLocalJWKSet, createRemoteJWKSet, errors, jwtVerify, type JWTPayload, type JWTVerifyGetKey } from 'jose';
import { z } from 'zod';

/** Asymmetric algorithms only. */
export const JWT_ALGORITHMS = ['RS256', 'RS384', 'RS512', 'PS256', 'PS384', 'PS512', 'ES256', 'ES384', 'EdDSA'] as const;

/** The fields naming an issuer and how to check its tokens, for a zod object of a configuration file. */
export const JWT_ISSUER_FIELDS = {
  issuer: z.string().min(1),
  audience: z.string().min(1),
  jwks_url: z.url().optional(),
  jwks_file: z.string().min(1).optional(),
  clock_tolerance_seconds: z.number().int().min(0).max(300).default(5),
  /** Asymmetric algorithms only: a shared-secret (HS*) or `none` token is never accepted. */
  algorithms: z.array(z.enum(JWT_ALGORITHMS)).min(1).default(['RS256', 'ES256', 'EdDSA']),
};

/** The refinement every issuer configuration carries: its keys come from exactly one place. */
export const ONE_KEY_SOURCE = {
  check: (jwt: { jwks_url?: string | undefined; jwks_file?: string | undefined }) => (jwt.jwks_url === undefined) !== (jwt.jwks_file === undefined),
  message: 'give exactly one of jwks_url and jwks_file',
} as const;

export interface JwtIssuer {
  issuer: string;
  audience: string;
  jwks_url?: string | undefined;
  jwks_file?: string | undefined;
  clock_tolerance_seconds: number;
  algorithms: ReadonlyArray<(typeof JWT_ALGORITHMS)[number]>;
}

/** The token is not acceptable (bad signature, expired, wrong issuer or audience…): a 401. */
export class JwtRejectedError extends Error {
  readonly code = 'JWT_REJECTED';
}

/** The issuer's keys could not be fetched: we cannot decide, so a 503, never an allow. */
export class JwksUnavailableError extends Error {
  readonly code = 'JWKS_UNAVAILABLE';
}

const JWT_SHAPE = /^[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+$/;

export function looksLikeJwt(token: string): boolean {
  return JWT_SHAPE.test(token);
}

async function keySetFor(config: JwtIssuer): Promise<JWTVerifyGetKey> {
  if (config.jwks_url !== undefined) {
    return createRemoteJWKSet(new URL(config.jwks_url), {
      timeoutDuration: 5_000,
      cooldownDuration: 30_000,
      cacheMaxAge: 10 * 60_000,
    });
  }
  const text = await readFile(config.jwks_file as string, 'utf8');
  return createLocalJWKSet(JSON.parse(text));
}

/**
 * A verifier of `config`'s tokens, which resolves to the verified payload (`exp` required). A
 * `jwks_file` is read here, once: a file that cannot be read or parsed throws.
 */
export async function createTokenVerifier(config: JwtIssuer): Promise<(token: string) => Promise<JWTPayload>> {
  const keys = await keySetFor(config);
  return async (token) => {
    try {
      const { payload } = await jwtVerify(token, keys, {
        issuer: config.issuer,
        audience: config.audience,
        algorithms: [...config.algorithms],
        clockTolerance: config.clock_tolerance_seconds,
        requiredClaims: ['exp'],
      });
      return payload;
    } catch (error) {
      if (error instanceof errors.JWKSTimeout || error instanceof errors.JWKSInvalid || !(error instanceof errors.JOSEError)) {
        throw new JwksUnavailableError(`the issuer's keys could not be loaded: ${(error as Error).message}`);
      }
      throw new JwtRejectedError(describeJoseError(error));
    }
  };
}

function describeJoseError(error: errors.JOSEError): string {
  if (error instanceof errors.JWTExpired) return 'token expired';
  if (error instanceof errors.JWTClaimValidationFailed) return `token claim "${error.claim}" is not acceptable`;
  if (error instanceof errors.JOSEAlgNotAllowed) return 'token algorithm is not allowed';
  if (error instanceof errors.JWKSNoMatchingKey) return 'token is not signed by a key of the configured issuer';
  if (error instanceof errors.JWSSignatureVerificationFailed) return 'token signature is invalid';
  return 'token is malformed';
}
