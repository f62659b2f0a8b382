/**
 * A set of audit public keys to verify bundles and checkpoints with, each picked by the `kid`
 * that signed (`signing_key_id`): after a rotation the authority publishes the new key first, and
 * a bundle signed before it must still be checked with the old one.
 *
 * Accepted forms: the answer of `GET /v1/audit/keys` (`{keys: [{key_id, public_key_pem, …}]}`),
 * a JWKS (`{keys: [{kty: "OKP", crv: "Ed25519", x, kid}]}`), or either list on its own. Only
 * Ed25519 keys. A key's kid is its RFC 7638 thumbprint, as the authority computes it, so a
 * single PEM (`--key`) can be told apart from the key a bundle names.
 *
 * @example
 *   const set = parseAuditKeySet(JSON.parse(await readFile('keys.json', 'utf8')));
 *   const picked = pickAuditKey(set, bundle.signing_key_id);
 *   if ('pem' in picked) verifyAuditBundle(bundle, picked.pem);
 *   else console.error(picked.problem); // no key with kid … in the key set (kids: …)
 */
import { createHash, createPublicKey, type JsonWebKey } from 'node:crypto';

export interface AuditKeySetEntry {
  kid: string;
  publicKeyPem: string;
}

export interface AuditKeySet {
  keys: AuditKeySetEntry[];
}

export class AuditKeySetError extends Error {
  readonly code = 'AUDIT_KEY_SET_INVALID';
}

/** The RFC 7638 thumbprint (SHA-256, base64url) of an Ed25519 public key: the authority's kid. */
export function ed25519Kid(publicKeyPem: string): string | null {
  try {
    const key = createPublicKey(publicKeyPem);
    if (key.asymmetricKeyType !== 'ed25519') return null;
    const { crv, kty, x } = key.export({ format: 'jwk' });
    return createHash('sha256').update(JSON.stringify({ crv, kty, x })).digest('base64url');
  } catch {
    return null;
  }
}

const isObject = (value: unknown): value is Record<string, unknown> => typeof value === 'object' && value !== null && !Array.isArray(value);

function entryOf(raw: unknown, index: number): AuditKeySetEntry {
  const where = `keys[${index}]`;
  if (!isObject(raw)) throw new AuditKeySetError(`${where} is not an object`);
  if (typeof raw['public_key_pem'] === 'string') {
    const pem = raw['public_key_pem'];
    const thumbprint = ed25519Kid(pem);
    if (thumbprint === null) throw new AuditKeySetError(`${where}.public_key_pem is not an Ed25519 public key`);
    return { kid: typeof raw['key_id'] === 'string' ? raw['key_id'] : thumbprint, publicKeyPem: pem };
  }
  if (raw['kty'] !== undefined) {
    if (raw['kty'] !== 'OKP' || raw['crv'] !== 'Ed25519' || typeof raw['x'] !== 'string') {
      throw new AuditKeySetError(`${where} is not an Ed25519 JWK (kty OKP, crv Ed25519): only Ed25519 keys sign audit bundles`);
    }
    let pem: string;
    try {
      const jwk: JsonWebKey = { kty: 'OKP', crv: 'Ed25519', x: raw['x'] };
      pem = createPublicKey({ key: jwk, format: 'jwk' }).export({ type: 'spki', format: 'pem' }).toString();
    } catch (error) {
      throw new AuditKeySetError(`${where} is not a valid Ed25519 JWK: ${(error as Error).message}`);
    }
    return { kid: typeof raw['kid'] === 'string' ? raw['kid'] : (ed25519Kid(pem) as string), publicKeyPem: pem };
  }
  throw new AuditKeySetError(`${where} has neither public_key_pem (GET /v1/audit/keys) nor kty (a JWK)`);
}

/** Reads a key set from parsed JSON; throws AuditKeySetError naming the entry that is wrong. */
export function parseAuditKeySet(value: unknown): AuditKeySet {
  const list = Array.isArray(value) ? value : isObject(value) && Array.isArray(value['keys']) ? value['keys'] : null;
  if (list === null) throw new AuditKeySetError('a key set is {"keys": [...]} (the answer of GET /v1/audit/keys, or a JWKS)');
  return { keys: list.map(entryOf) };
}

/** The key whose kid is `kid`, or why there is none. */
export function pickAuditKey(set: AuditKeySet, kid: string): { pem: string } | { problem: string } {
  const found = set.keys.find((entry) => entry.kid === kid);
  if (found) return { pem: found.publicKeyPem };
  const kids = set.keys.map((entry) => entry.kid).join(', ') || 'none';
  return { problem: `no key with kid ${kid} in the key set (kids: ${kids})` };
}
