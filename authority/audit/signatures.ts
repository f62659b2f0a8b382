/**
 * Ed25519 signature checks of audit bundles and checkpoints, with the key given as one PEM or
 * picked from a key set by the `signing_key_id` that signed.
 *
 * @example
 *   signatureProblem(text, bundle.signature, publicKeyPem); // null when it verifies
 *   signedByProblem(text, bundle.signature, keySet, bundle.signing_key_id); // {message, noKey} or null
 */
import { createPublicKey, verify, type KeyObject } from 'node:crypto';
import { ed25519Kid, pickAuditKey, type AuditKeySet } from './key-set.js';

const ED25519_SIGNATURE = /^[A-Za-z0-9_-]{86}$/;

function ed25519Key(pem: string): KeyObject | string {
  let key: KeyObject;
  try {
    key = createPublicKey(pem);
  } catch {
    return 'the public key is not a PEM public key';
  }
  return key.asymmetricKeyType === 'ed25519' ? key : `the public key is ${key.asymmetricKeyType ?? 'not'} an Ed25519 key`;
}

/** A key to verify with: one PEM, or a key set to pick from by signing_key_id. */
export type VerificationKey = string | AuditKeySet;

/**
 * null when `signature` verifies under the key `kid` names (from a set) or under the one PEM
 * given, else why not; a PEM whose kid is not `kid` is named, so the message says which key to use.
 */
export function signedByProblem(text: string, signature: unknown, key: VerificationKey, kid: string): { message: string; noKey: boolean } | null {
  if (typeof key !== 'string') {
    const picked = pickAuditKey(key, kid);
    if ('problem' in picked) return { message: picked.problem, noKey: true };
    const problem = signatureProblem(text, signature, picked.pem);
    return problem === null ? null : { message: problem, noKey: false };
  }
  const problem = signatureProblem(text, signature, key);
  if (problem === null) return null;
  const given = ed25519Kid(key);
  if (given === null || given === kid) return { message: problem, noKey: false };
  return { message: `it was signed by the key with kid ${kid}, and the given key is ${given}: verify with the key whose kid is ${kid}, from GET /v1/audit/keys`, noKey: true };
}

/** null when `signature` (base64url) is a valid Ed25519 signature of `text`, else why not. */
export function signatureProblem(text: string, signature: unknown, publicKeyPem: string): string | null {
  const key = ed25519Key(publicKeyPem);
  if (typeof key === 'string') return key;
  if (typeof signature !== 'string' || !ED25519_SIGNATURE.test(signature)) return 'the signature is not a base64url Ed25519 signature';
  return verify(null, Buffer.from(text, 'utf8'), key, Buffer.from(signature, 'base64url')) ? null : 'the signature does not verify';
}

