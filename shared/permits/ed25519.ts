/**
 * Ed25519 for permits, on the event loop: libsodium through `sodium-native` (an optional
 * dependency whose npm package ships prebuilt binaries) when it loads, node:crypto otherwise.
 * libsodium checks a permit's signature in about half the CPU node:crypto takes, and signs in
 * about half too: the check is the largest fixed cost of an enforced request, the signature one
 * of the larger ones of an evaluation.
 *
 * `COUNTERSIGN_ED25519=node` keeps node:crypto even where the addon loads; `sodium` insists on
 * libsodium and fails at start-up where it cannot load. The default, `auto`, takes libsodium when
 * it loads. Both accept exactly the same valid signatures; libsodium also refuses non-canonical
 * encodings and small-order keys, which no signer of ours produces. Ed25519 signatures are
 * deterministic, so both engines sign a message with a key to the same bytes.
 *
 * @example
 *   const ed25519 = chooseEd25519();                // from COUNTERSIGN_ED25519
 *   ed25519.verify(signingInput, publicKeyObject, signature); // true or false
 *   ed25519.sign(signingInput, privateKeyObject);   // the 64-byte signature
 *   ed25519.engine;                                 // 'sodium-native' or 'node:crypto'
 */
import { KeyObject, sign as cryptoSign, verify as cryptoVerify, type webcrypto } from 'node:crypto';
import { createRequire } from 'node:module';

export type Ed25519Engine = 'sodium-native' | 'node:crypto';

export interface Ed25519 {
  readonly engine: Ed25519Engine;
  /**
   * Whether `signature` is `key`'s Ed25519 signature of `data`. Callers pass an Ed25519 public key
   * (verify.ts checks first); any other key never verifies: node:crypto answers false, libsodium throws.
   */
  verify(data: Uint8Array, key: KeyObject, signature: Uint8Array): boolean;
  /** `key`'s Ed25519 signature of `data` (64 bytes). Throws for a key that is not an Ed25519 private key. */
  sign(data: Uint8Array, key: KeyObject): Buffer;
}

/** The part of sodium-native this module uses. */
interface Sodium {
  crypto_sign_verify_detached(signature: Uint8Array, message: Uint8Array, publicKey: Uint8Array): boolean;
  crypto_sign_detached(signature: Uint8Array, message: Uint8Array, secretKey: Uint8Array): void;
  sodium_malloc(size: number): Buffer;
  crypto_sign_PUBLICKEYBYTES: number;
  crypto_sign_SECRETKEYBYTES: number;
  crypto_sign_BYTES: number;
}

export const NODE_ED25519: Ed25519 = {
  engine: 'node:crypto',
  verify: (data, key, signature) => cryptoVerify(null, data, key, signature),
  sign: (data, key) => cryptoSign(null, data, key),
};

function ed25519Jwk(key: KeyObject, type: 'public' | 'private'): { x: string; d?: string } {
  if (key.type !== type || key.asymmetricKeyType !== 'ed25519') throw new TypeError(`not an Ed25519 ${type} key`);
  return key.export({ format: 'jwk' }) as { x: string; d?: string };
}

/** libsodium's Ed25519, or null where the addon cannot load (no prebuilt binary for the platform). */
export function sodiumEd25519(): Ed25519 | null {
  let sodium: Sodium;
  try {
    sodium = createRequire(import.meta.url)('sodium-native') as Sodium;
  } catch {
    return null;
  }
  // The raw bytes libsodium takes, once per key object: a public key's 32 bytes, and a private
  // key's 64 (seed, then public key) in memory libsodium guards (sodium_malloc).
  const rawPublic = new WeakMap<KeyObject, Uint8Array>();
  const rawSecret = new WeakMap<KeyObject, Buffer>();
  const publicOf = (key: KeyObject): Uint8Array => {
    let raw = rawPublic.get(key);
    if (raw === undefined) {
      raw = Buffer.from(ed25519Jwk(key, 'public').x, 'base64url');
      if (raw.length !== sodium.crypto_sign_PUBLICKEYBYTES) throw new TypeError('not an Ed25519 public key');
      rawPublic.set(key, raw);
    }
    return raw;
  };
  const secretOf = (key: KeyObject): Buffer => {
    let raw = rawSecret.get(key);
    if (raw === undefined) {
      const jwk = ed25519Jwk(key, 'private');
      const seed = Buffer.from(jwk.d ?? '', 'base64url');
      const pub = Buffer.from(jwk.x, 'base64url');
      raw = sodium.sodium_malloc(sodium.crypto_sign_SECRETKEYBYTES);
      if (seed.length + pub.length !== raw.length) throw new TypeError('not an Ed25519 private key');
      seed.copy(raw, 0);
      pub.copy(raw, seed.length);
      seed.fill(0);
      rawSecret.set(key, raw);
    }
    return raw;
  };
  return {
    engine: 'sodium-native',
    verify: (data, key, signature) => sodium.crypto_sign_verify_detached(signature, data, publicOf(key)),
    sign: (data, key) => {
      const signature = Buffer.alloc(sodium.crypto_sign_BYTES);
      sodium.crypto_sign_detached(signature, data, secretOf(key));
      return signature;
    },
  };
}

/** The Ed25519 `setting` (COUNTERSIGN_ED25519: auto, sodium or node) asks for. */
export function chooseEd25519(setting: string | undefined = process.env['COUNTERSIGN_ED25519']): Ed25519 {
  const wanted = setting === undefined || setting === '' ? 'auto' : setting;
  if (wanted === 'node') return NODE_ED25519;
  if (wanted !== 'sodium' && wanted !== 'auto') throw new Error(`COUNTERSIGN_ED25519=${wanted}: expected auto, sodium or node`);
  const sodium = sodiumEd25519();
  if (sodium === null && wanted === 'sodium') {
    throw new Error('COUNTERSIGN_ED25519=sodium, but sodium-native cannot be loaded here (install the optional dependencies, or unset it)');
  }
  return sodium ?? NODE_ED25519;
}

let chosen: Ed25519 | undefined;

/**
 * This process's Ed25519, chosen from COUNTERSIGN_ED25519 on first use. A process calls it at
 * start-up too, so a setting that cannot be honoured stops the start rather than a request.
 */
export function processEd25519(): Ed25519 {
  return (chosen ??= chooseEd25519());
}

/**
 * A CryptoKey (from jose or WebCrypto) as a KeyObject, the same one every time: node:crypto takes
 * KeyObjects, and the libsodium engine keeps each key's raw bytes per KeyObject.
 */
const keyObjects = new WeakMap<object, KeyObject>();
export function keyObjectOf(key: KeyObject | webcrypto.CryptoKey): KeyObject {
  if (key instanceof KeyObject) return key;
  let converted = keyObjects.get(key);
  if (converted === undefined) {
    converted = KeyObject.from(key);
    keyObjects.set(key, converted);
  }
  return converted;
}
