/**
 * User JWTs, validated on every request against the configured issuer: signature from the
 * issuer's JWKS (URL or local file), `iss`, `aud`, `exp`/`nbf` with a small leeway, and only the
 * configured asymmetric algorithms (shared/jwt/verify.ts), then the user, organization, role and
 * email claims read as configured.
 *
 * @example
 *   const verifier = await createJwtVerifier(config.auth.jwt);
 *   const claims = await verifier.verify(token); // { userId, organizationId, role, email, expiresAt }
 */
import { createTokenVerifier, JwtRejectedError } from '../../shared/jwt/verify.js';
import { ROLES, type Role } from '../../shared/wire/session.js';
import type { JwtConfig } from '../config.js';

export { JwksUnavailableError, JwtRejectedError, looksLikeJwt } from '../../shared/jwt/verify.js';

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

export async function createJwtVerifier(config: JwtConfig): Promise<JwtVerifier> {
  const verifyToken = await createTokenVerifier(config);
  const { claims } = config;
  return {
    async verify(token) {
      const payload: Record<string, unknown> = await verifyToken(token);
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
