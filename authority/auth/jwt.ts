/**
 * User JWTs, validated on every request against the configured issuer: signature from the
 * issuer's JWKS (URL or local file), `iss`, `aud`, `exp`/`nbf` with a small leeway, and only the
 * configured asymmetric algorithms.
 *
 * @example
 *   const verifier = await createJwtVerifier(config.auth.jwt);
 *   const claims = await verifier.verify(token); // { userId, organizationId, role, email, expiresAt }
 */
import { readFile } from 'node:fs/promises';
import { createLocalJWKSet, createRemoteJWKSet, errors, jwtVerify, type JWTVerifyGetKey } from 'jose';
import { ROLES, type Role } from '../../shared/wire/session.js';
import type { JwtConfig } from '../config.js';

export interface UserClaims {
  userId: string;
  organizationId: string;
  role: Role | null;
  email: string | null;
  expiresAt: Date;
}

export interface JwtVerifier {
  verify(token: string): Promise<UserClaims>;
}

/** The token is not acceptable (bad signature, expired, wrong issuer…): a 401. */
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

async function keySetFor(config: JwtConfig): Promise<JWTVerifyGetKey> {
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

export async function createJwtVerifier(config: JwtConfig): Promise<JwtVerifier> {
  const keys = await keySetFor(config);
  const { claims } = config;
  return {
    async verify(token) {
      let payload: Record<string, unknown>;
      try {
        ({ payload } = await jwtVerify(token, keys, {
          issuer: config.issuer,
          audience: config.audience,
          algorithms: config.algorithms,
          clockTolerance: config.clock_tolerance_seconds,
          requiredClaims: ['exp'],
        }));
      } catch (error) {
        if (error instanceof errors.JWKSTimeout || error instanceof errors.JWKSInvalid || !(error instanceof errors.JOSEError)) {
          throw new JwksUnavailableError(`the issuer's keys could not be loaded: ${(error as Error).message}`);
        }
        throw new JwtRejectedError(describeJoseError(error));
      }
      const userId = payload[claims.user];
      const organizationId = payload[claims.organization];
      if (typeof userId !== 'string' || userId === '') throw new JwtRejectedError(`token has no "${claims.user}" claim`);
      if (typeof organizationId !== 'string' || organizationId === '') {
        throw new JwtRejectedError(`token has no "${claims.organization}" claim`);
      }
      const roleClaim = payload[claims.role];
      const role = typeof roleClaim === 'string' && (ROLES as readonly string[]).includes(roleClaim) ? (roleClaim as Role) : null;
      const email = payload[claims.email];
      return {
        userId,
        organizationId,
        role,
        email: typeof email === 'string' ? email : null,
        expiresAt: new Date((payload.exp as number) * 1000),
      };
    },
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
