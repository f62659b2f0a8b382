/**
 * The audit log's view of the signing keys: a signer for exports and checkpoints, and the
 * public keys (SPKI PEM) that verify them offline.
 */
import { createPublicKey, sign } from 'node:crypto';
import type { AuditKeys } from '../audit/types.js';
import type { SigningKeys } from './keys.js';

export function auditKeysFrom(keys: SigningKeys): AuditKeys {
  return {
    async signer() {
      const { kid, privateKey } = await keys.active('audit');
      return { keyId: kid, sign: async (data) => new Uint8Array(sign(null, data, privateKey)) };
    },
    async publicKeys() {
      return (await keys.published('audit')).map((record) => ({
        key_id: record.kid,
        algorithm: 'Ed25519' as const,
        public_key_pem: createPublicKey({ key: record.publicJwk as never, format: 'jwk' }).export({ type: 'spki', format: 'pem' }).toString(),
        created_at: record.createdAt.toISOString(),
        retired_at: record.retiredAt?.toISOString() ?? null,
      }));
    },
  };
}
