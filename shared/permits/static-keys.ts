/**
 * A permit key resolver over a fixed JWKS: a file, a key set already fetched (remote-keys.ts), or
 * the authority's own public keys (authority/permits/key-resolver.ts). Which keys of a set can
 * verify a permit is decided here, once for all of them.
 *
 * @example
 *   const keys = staticKeyResolver(JSON.parse(await readFile('permit-keys.json', 'utf8')));
 *   await keys.resolve('2026-11'); // a KeyObject, or null
 */
import { createPublicKey } from 'node:crypto';
import type { JWK } from 'jose';
import { PERMIT_ALG } from './claims.js';
import type { PermitKeyResolver, PermitVerificationKey } from './verify.js';

/**
 * Keys are imported once, on first use; keys that are not Ed25519 public signing keys, or have no
 * `kid`, are ignored (only the public part `x` is imported, so a JWKS that leaks `d` is still used
 * as public). When two keys share a kid, the first wins.
 */
export function staticKeyResolver(jwks: { keys: readonly JWK[] }): PermitKeyResolver {
  let imported: Map<string, PermitVerificationKey> | undefined;
  return {
    async resolve(kid: string) {
      imported ??= importEd25519Keys(jwks.keys);
      return imported.get(kid) ?? null;
    },
  };
}

function importEd25519Keys(jwks: readonly JWK[]): Map<string, PermitVerificationKey> {
  const keys = new Map<string, PermitVerificationKey>();
  for (const jwk of jwks) {
    if (jwk.kty !== 'OKP' || jwk.crv !== 'Ed25519' || typeof jwk.x !== 'string') continue;
    if (typeof jwk.kid !== 'string' || jwk.kid.length === 0 || keys.has(jwk.kid)) continue;
    if (jwk.use !== undefined && jwk.use !== 'sig') continue;
    if (jwk.alg !== undefined && jwk.alg !== PERMIT_ALG && jwk.alg !== 'Ed25519') continue;
    try {
      keys.set(jwk.kid, createPublicKey({ key: { kty: 'OKP', crv: 'Ed25519', x: jwk.x }, format: 'jwk' }));
    } catch {
      // A malformed key cannot verify anything; the others still can.
    }
  }
  return keys;
}
