/**
 * Signed export bundles (docs/security-model.md, "The audit log is tamper-evident"): a range of an organization's chain, signed with the
 * audit key so that it can be verified offline, away from the database that produced it.
 *
 *   {export_id, org_id, chain_head_hash, event_count, signed_at, events, signature, signing_key_id}
 *   signature = base64url(Ed25519(UTF-8(JSON.stringify({export_id, org_id, chain_head_hash,
 *                                                       event_count, signed_at, events}))))
 *
 * A bundle holds at most MAX_EXPORT_EVENTS events; a longer chain is exported in sequence ranges,
 * each verifiable on its own (the first event of a range links to the last of the previous one).
 *
 * @example
 *   const bundle = await exportAuditBundle(db, org.id, await keys.signer(), { fromSequence: 1 }, clock);
 *   reply.type('application/json').send(JSON.stringify(bundle)); // byte-exact: see auditBundleJson
 */
import { randomUUID } from 'node:crypto';
import { CountersignError } from '../../shared/errors.js';
import type { AuditBundle } from '../../shared/wire/audit.js';
import type { Queryable } from '../store/db.js';
import { AUDIT_EVENT_COLUMNS, auditEventFromRow, auditEventToWire, type AuditEventRow } from './events.js';
import { GENESIS_HASH, type AuditSigner } from './types.js';
import { bundleSigningText } from './verify-bundle.js';

/** The most events in one bundle: keeps an export's memory and response size bounded. */
export const MAX_EXPORT_EVENTS = 10_000;

export interface ExportRange {
  /** First sequence, inclusive; default 1. */
  fromSequence?: number | undefined;
  /** Last sequence, inclusive; default the head. */
  toSequence?: number | undefined;
}

function invalid(message: string, path: string): CountersignError {
  return new CountersignError('invalid_request', message, { details: [{ path, message }] });
}

/**
 * Reads the range in one statement (one consistent snapshot) and signs it. Refuses with 400 when
 * the range holds more than MAX_EXPORT_EVENTS events, naming the range to ask for instead.
 */
export async function exportAuditBundle(
  db: Queryable,
  orgId: string,
  signer: AuditSigner,
  range: ExportRange,
  clock: { now(): number },
): Promise<AuditBundle> {
  const from = range.fromSequence ?? 1;
  const to = range.toSequence;
  if (!Number.isSafeInteger(from) || from < 1) throw invalid('from_sequence must be a positive integer', 'from_sequence');
  if (to !== undefined && (!Number.isSafeInteger(to) || to < from)) {
    throw invalid('to_sequence must be an integer not below from_sequence', 'to_sequence');
  }
  const params: unknown[] = [orgId, from];
  if (to !== undefined) params.push(to);
  params.push(MAX_EXPORT_EVENTS + 1);
  const rows = await db.query<AuditEventRow>(
    `SELECT ${AUDIT_EVENT_COLUMNS} FROM audit_events
     WHERE org_id = $1 AND sequence >= $2 ${to === undefined ? '' : 'AND sequence <= $3'}
     ORDER BY sequence LIMIT $${params.length}`,
    params,
  );
  if (rows.length > MAX_EXPORT_EVENTS) {
    const end = from + MAX_EXPORT_EVENTS - 1;
    throw invalid(
      `an export holds at most ${MAX_EXPORT_EVENTS} events and this range holds more; export it in parts by sequence: ` +
        `from_sequence ${from} to_sequence ${end}, then from_sequence ${end + 1}, and so on`,
      to === undefined ? 'to_sequence' : 'from_sequence',
    );
  }
  const events = rows.map((row) => auditEventToWire(auditEventFromRow(row)));
  const signed = {
    export_id: randomUUID(),
    org_id: orgId,
    chain_head_hash: events.at(-1)?.hash ?? GENESIS_HASH,
    event_count: events.length,
    signed_at: new Date(clock.now()).toISOString(),
    events,
  };
  const signature = await signer.sign(Buffer.from(bundleSigningText(signed), 'utf8'));
  return { ...signed, signature: Buffer.from(signature).toString('base64url'), signing_key_id: signer.keyId };
}

/**
 * The bundle as response text. The signature covers JSON.stringify of these very objects, so the
 * bundle is sent as this text rather than through a schema serializer that might reorder keys.
 */
export function auditBundleJson(bundle: AuditBundle): string {
  return JSON.stringify(bundle);
}
