/**
 * The Ed25519 signature check of permits, on the event loop: libsodium through `sodium-native`
 * (an optional dependency whose npm package ships prebuilt binaries) when it loads, node:crypto
 * otherwise. libsodium checks a permit's signature in about half the CPU node:crypto takes, and
 * that check is the largest fixed cost of an enforced request.
 *
 * `COUNTERSIGN_ED25519=node` keeps node:crypto even where the addon loads; `sodium` insists on
 * libsodium and fails at start-up where it cannot load. The default, `auto`, takes libsodium when
 * it loads. Both accept exactly the same valid signatures; libsodium also refuses non-canonical
 * encodings and small-order keys, which no signer of ours produces.
 *
 * @example
 *   const verifier = ed25519Verifier();             // from COUNTERSIGN_ED25519
 *   verifier.verify(signingInput, publicKeyObject, signature); // true or false
 *   verifier.engine;                                // 'sodium-native' or 'node:crypto'
 */
import { KeyObject, verify as cryptoVerify } from 'node:crypto';
import { createRequire } from 'node:module';

export type Ed25519Engine = 'sodium-native' | 'node:crypto';

export interface Ed25519Verifier {
  readonly engine: Ed25519Engine;
  /**
   * Whether `signature` is `key`'s Ed25519 signature of `data`. Callers pass an Ed25519 public key
   * (verify.ts checks first); any other key never verifies: node:crypto answers false, libsodium throws.
   */
  verify(data: Uint8Array, key: KeyObject, signature: Uint8Array): boolean;
}

/** The part of sodium-native this module uses. */
interface Sodium {
  crypto_sign_verify_detached(signature: Uint8Array, message: Uint8Array, publicKey: Uint8Array): boolean;
  crypto_sign_PUBLICKEYBYTES: number;
}

export const NODE_ED25519: Ed25519Verifier = {
  engine: 'node:crypto',
  verify: (data, key, signature) => cryptoVerify(null, data, key, signature),
};

/** libsodium's verifier, or null where the addon cannot load (no prebuilt binary for the platform). */
export function sodiumEd25519(): Ed25519Verifier | null {
  let sodium: Sodium;
  try {
    sodium = createRequire(import.meta.url)('sodium-native') as Sodium;
  } catch {
    return null;
  }
  // The raw 32 bytes libsodium takes, once per key object.
  const rawKeys = new WeakMap<KeyObject, Uint8Array>();
  const rawOf = (key: KeyObject): Uint8Array => {
    let raw = rawKeys.get(key);
    if (raw === undefined) {
      if (key.type !== 'public' || key.asymmetricKeyType !== 'ed25519') throw new TypeError('not an Ed25519 public key');
      raw = Buffer.from(key.export({ format: 'jwk' }).x as string, 'base64url');
      if (raw.length !== sodium.crypto_sign_PUBLICKEYBYTES) throw new TypeError('not an Ed25519 public key');
      rawKeys.set(key, raw);
    }
    return raw;
  };
  return { engine: 'sodium-native', verify: (data, key, signature) => sodium.crypto_sign_verify_detached(signature, data, rawOf(key)) };
}

/** The verifier `setting` (COUNTERSIGN_ED25519: auto, sodium or node) asks for. */
export function ed25519Verifier(setting: string | undefined = process.env['COUNTERSIGN_ED25519']): Ed25519Verifier {
  const wanted = setting === undefined || setting === '' ? 'auto' : setting;
  if (wanted === 'node') return NODE_ED25519;
  if (wanted !== 'sodium' && wanted !== 'auto') throw new Error(`COUNTERSIGN_ED25519=${wanted}: expected auto, sodium or node`);
  const sodium = sodiumEd25519();
  if (sodium === null && wanted === 'sodium') {
    throw new Error('COUNTERSIGN_ED25519=sodium, but sodium-native cannot be loaded here (install the optional dependencies, or unset it)');
  }
  return sodium ?? NODE_ED25519;
}
