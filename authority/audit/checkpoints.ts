/**
 * Signed checkpoints of the chain heads: "organization X's chain had head hash H at sequence N",
 * signed with the audit key. Kept (or copied) outside the database, a checkpoint proves that
 * events up to N existed with exactly that history, so a chain later cut back below N, or
 * rewritten up to N, is detected (`verifyAuditBundle(bundle, pem, { checkpoint })`).
 *
 *   signature = base64url(Ed25519(canonicalJSON({org_id, sequence, head_hash, signed_at})))
 *
 * The authority writes them on a timer; several replicas may run it at once (a checkpoint of the
 * same head is written once).
 *
 * @example
 *   const written = await writeCheckpoints(db, await auditKeys.signer(), clock); // 0 when nothing moved
 *   const checkpoint = await latestCheckpoint(db, org.id);
 */
import type { AuditCheckpointWire } from '../../shared/wire/audit.js';
import type { Queryable } from '../store/db.js';
import type { AuditSigner } from './types.js';
import { checkpointSigningText } from './verify-bundle.js';

export type AuditCheckpoint = AuditCheckpointWire;

interface CheckpointRow {
  org_id: string;
  sequence: number;
  head_hash: string;
  signed_at: Date;
  signature: string;
  signing_key_id: string;
}

const fromRow = (row: CheckpointRow): AuditCheckpoint => ({
  org_id: row.org_id,
  sequence: row.sequence,
  head_hash: row.head_hash,
  // Millisecond ISO, the same text that was signed: it was stored from a JS Date.
  signed_at: row.signed_at.toISOString(),
  signature: row.signature,
  signing_key_id: row.signing_key_id,
});

/**
 * Signs and stores a checkpoint for every organization whose head moved past its latest
 * checkpoint. Returns how many were written.
 */
export async function writeCheckpoints(db: Queryable, signer: AuditSigner, clock: { now(): number }): Promise<number> {
  const due = await db.query<{ org_id: string; sequence: number; head_hash: string }>(
    `SELECT h.org_id, h.sequence, h.head_hash
       FROM audit_chain_heads h
      WHERE h.sequence > COALESCE((SELECT max(c.sequence) FROM audit_checkpoints c WHERE c.org_id = h.org_id), 0)
      ORDER BY h.org_id`,
  );
  const signedAt = new Date(clock.now());
  let written = 0;
  for (const head of due) {
    const unsigned = { org_id: head.org_id, sequence: head.sequence, head_hash: head.head_hash, signed_at: signedAt.toISOString() };
    const signature = Buffer.from(await signer.sign(Buffer.from(checkpointSigningText(unsigned), 'utf8'))).toString('base64url');
    const inserted = await db.query(
      `INSERT INTO audit_checkpoints (org_id, sequence, head_hash, signed_at, signature, signing_key_id)
       VALUES ($1, $2, $3, $4, $5, $6)
       ON CONFLICT (org_id, sequence) DO NOTHING
       RETURNING 1 AS written`,
      [head.org_id, head.sequence, head.head_hash, signedAt, signature, signer.keyId],
    );
    written += inserted.length;
  }
  return written;
}

/** The organization's most recent checkpoint, or null before its first. */
export async function latestCheckpoint(db: Queryable, orgId: string): Promise<AuditCheckpoint | null> {
  const [row] = await db.query<CheckpointRow>(
    `SELECT org_id, sequence, head_hash, signed_at, signature, signing_key_id
       FROM audit_checkpoints WHERE org_id = $1 ORDER BY sequence DESC LIMIT 1`,
    [orgId],
  );
  return row ? fromRow(row) : null;
}
