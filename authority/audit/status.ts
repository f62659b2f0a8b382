/**
 * The audit chain's status for one organization: its head, its last signed checkpoint, and a
 * verification of a range, by the very check an auditor runs offline (verify-bundle.ts) over a
 * bundle exported from the stored events. A modified, removed, reordered or inserted stored
 * event shows as a problem here as it would in `countersign audit verify`.
 *
 * @example
 *   const status = await auditStatus(db, org.id, keys, {}, clock);
 *   status.verification.ok; // true, with checkpoint 'matched' when the range reaches it
 */
import type { AuditStatusResponse } from '../../shared/wire/audit.js';
import type { Queryable } from '../store/db.js';
import { latestCheckpoint } from './checkpoints.js';
import { exportAuditBundle, MAX_EXPORT_EVENTS, type ExportRange } from './export.js';
import type { AuditKeys } from './types.js';
import { verifyAuditBundle } from './verify-bundle.js';

/** The most problems one answer lists; the count of events checked says the rest. */
const MAX_PROBLEMS = 20;

export async function auditStatus(
  db: Queryable,
  orgId: string,
  keys: AuditKeys,
  range: ExportRange,
  clock: { now(): number },
): Promise<AuditStatusResponse> {
  const [heads, checkpoint, publicKeys] = await Promise.all([
    db.query<{ sequence: number; hash: string; occurred_at: Date }>(
      `SELECT e.sequence, e.hash, e.occurred_at FROM audit_chain_heads h
         JOIN audit_events e ON e.org_id = h.org_id AND e.sequence = h.sequence
        WHERE h.org_id = $1`,
      [orgId],
    ),
    latestCheckpoint(db, orgId),
    keys.publicKeys(),
  ]);
  const head = heads[0] ? { sequence: Number(heads[0].sequence), hash: heads[0].hash, occurred_at: heads[0].occurred_at.toISOString() } : null;
  if (head === null) {
    return { head, last_checkpoint: checkpoint, verification: { ok: true, from_sequence: null, to_sequence: null, events: 0, checkpoint: 'none', problems: [] } };
  }
  const to = range.toSequence ?? head.sequence;
  const from = range.fromSequence ?? Math.max(1, to - MAX_EXPORT_EVENTS + 1);
  const bundle = await exportAuditBundle(db, orgId, await keys.signer(), { fromSequence: from, toSequence: to }, clock);
  const keySet = { keys: publicKeys.map((key) => ({ kid: key.key_id, publicKeyPem: key.public_key_pem })) };
  // A range asked to end before the checkpoint says nothing about it. Up to the head (the default)
  // it always faces the checkpoint, so a truncated tail fails rather than passing unnoticed.
  const facesCheckpoint = checkpoint !== null && (range.toSequence === undefined || range.toSequence >= checkpoint.sequence);
  const report = verifyAuditBundle(JSON.parse(JSON.stringify(bundle)), keySet, facesCheckpoint ? { checkpoint } : {});
  return {
    head,
    last_checkpoint: checkpoint,
    verification: {
      ok: report.ok,
      from_sequence: report.checked.first_sequence,
      to_sequence: report.checked.last_sequence,
      events: report.checked.events,
      checkpoint: checkpoint !== null && !facesCheckpoint ? 'not_covered' : report.checked.checkpoint,
      problems: report.problems.slice(0, MAX_PROBLEMS),
    },
  };
}
