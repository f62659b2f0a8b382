/**
 * The audit log's contract: one hash chain per organization, appended in the same transaction as
 * the state change it records. See docs/security-model.md, "The audit log is tamper-evident".
 *
 *   payload       = every fact of the event (see AuditPayload), so the chain covers all of it
 *   hash          = hex(SHA-256(previous_hash_hex + canonicalJSON(payload)))
 *   previous_hash = the organization's previous event's hash; 64 zeros for its first event
 *   sequence      = 1, 2, 3, … per organization, gap-free
 */
import type { EventType } from '../../shared/wire/events.js';

export const GENESIS_HASH = '0'.repeat(64);

/** What a caller records. The chain fields (sequence, hashes) are the append's business. */
export interface NewAuditEvent {
  orgId: string;
  type: Exclude<EventType, 'webhook.test'>;
  /** Who acted: the action's actor for evaluations, the credential's subject otherwise. */
  actorId: string | null;
  /** `allow`/`deny`/`hold`/`escalate`, or a verification outcome, when the event has one. */
  decision: string | null;
  resourceType: string | null;
  resourceId: string | null;
  requestId: string | null;
  /** The verified identity behind the event: `api_key:<id>`, `user:<id>`, `system`. */
  credential: string | null;
  occurredAt: Date;
  /** Event-specific facts; JSON values only (no undefined, no Date: use ISO strings). */
  details: Record<string, unknown>;
}

/** The JSON the hash covers, stored as the row's `payload`. Keys are snake_case on purpose: it is also what exports and webhooks carry. */
export interface AuditPayload {
  id: string;
  org_id: string;
  sequence: number;
  type: NewAuditEvent['type'];
  actor_id: string | null;
  decision: string | null;
  resource_type: string | null;
  resource_id: string | null;
  request_id: string | null;
  credential: string | null;
  occurred_at: string;
  recorded_at: string;
  details: Record<string, unknown>;
}

export interface AuditEvent {
  id: string;
  orgId: string;
  sequence: number;
  type: NewAuditEvent['type'];
  decision: string | null;
  actorId: string | null;
  resourceType: string | null;
  resourceId: string | null;
  payload: AuditPayload;
  hash: string;
  previousHash: string;
  occurredAt: Date;
  createdAt: Date;
}

/** Signs exports and checkpoints with the active audit key (Ed25519). */
export interface AuditSigner {
  keyId: string;
  sign(data: Uint8Array): Promise<Uint8Array>;
}

/** Public audit keys, for `GET /v1/audit/keys` and offline verification. */
export interface AuditPublicKey {
  key_id: string;
  algorithm: 'Ed25519';
  public_key_pem: string;
  created_at: string;
  retired_at: string | null;
}

export interface AuditKeys {
  /** The key that signs now. */
  signer(): Promise<AuditSigner>;
  /** Every audit key that ever signed, newest first. */
  publicKeys(): Promise<AuditPublicKey[]>;
}
