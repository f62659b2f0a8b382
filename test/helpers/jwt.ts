/**
 * A throwaway identity provider for tests: an Ed25519 key pair, its JWKS written to a file, and
 * a function to sign user tokens with any claims, issuer, audience or lifetime.
 *
 * @example
 *   const idp = await createTestIdp();
 *   const token = await idp.sign({ sub: 'u1', org_id: orgId, role: 'admin' });
 */
import { mkdtemp, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { exportJWK, generateKeyPair, SignJWT, type JWTPayload } from 'jose';

export const TEST_ISSUER = 'https://idp.test/';
export const TEST_AUDIENCE = 'countersign';

export interface TestIdp {
  jwksFile: string;
  sign(claims: JWTPayload, options?: { issuer?: string; audience?: string; expiresIn?: string | number; kid?: string }): Promise<string>;
}

export async function createTestIdp(): Promise<TestIdp> {
  const { publicKey, privateKey } = await generateKeyPair('EdDSA', { crv: 'Ed25519', extractable: true });
  const jwk = { ...(await exportJWK(publicKey)), kid: 'test-key', alg: 'EdDSA', use: 'sig' };
  const dir = await mkdtemp(join(tmpdir(), 'countersign-idp-'));
  const jwksFile = join(dir, 'jwks.json');
  await writeFile(jwksFile, JSON.stringify({ keys: [jwk] }));
  return {
    jwksFile,
    async sign(claims, options = {}) {
      return new SignJWT(claims)
        .setProtectedHeader({ alg: 'EdDSA', kid: options.kid ?? 'test-key' })
        .setIssuer(options.issuer ?? TEST_ISSUER)
        .setAudience(options.audience ?? TEST_AUDIENCE)
        .setIssuedAt()
        .setExpirationTime(options.expiresIn ?? '10m')
        .sign(privateKey);
    },
  };
}
