/**
 * Appending to an organization's audit chain, inside the caller's transaction, so the event
 * commits together with the state change it records or not at all: a change that cannot be
 * audited does not happen (docs/architecture.md, "The audit hash chain").
 *
 * Per append: lock the organizations' head rows (one round trip; two more only the first time an
 * organization appends), then insert the events and move the heads in one statement. Appends of
 * one organization queue on its head row, which is what makes sequences gap-free; a rolled-back
 * transaction releases the lock without having moved the head. The transaction must run at READ
 * COMMITTED (Db.transaction's default): the head row is re-read after waiting for its lock.
 * Append last, just before commit: the lock is held until the transaction ends, so whatever runs
 * after the append is serialised per organization too.
 *
 * @example
 *   await db.transaction(async (tx) => {
 *     await tx.query('INSERT INTO permits …');
 *     await appendAuditEvents(tx, [decidedEvent, issuedEvent], new Date(clock.now()));
 *   });
 */
import { createHash, randomUUID } from 'node:crypto';
import { canonicalJson } from '../../shared/canonical-json.js';
import type { Queryable } from '../store/db.js';
import { enqueueWebhookEvents } from '../webhooks/outbox.js';
import { GENESIS_HASH, type AuditEvent, type AuditPayload, type NewAuditEvent } from './types.js';

/**
 * hex(SHA-256(previous_hash_hex + canonicalJSON(payload))): the one definition, shared by the
 * append and the offline verifier.
 */
export function computeEventHash(previousHash: string, payload: unknown): string {
  return hashCanonical(previousHash, canonicalJson(payload));
}

function hashCanonical(previousHash: string, canonicalPayload: string): string {
  return createHash('sha256').update(previousHash, 'utf8').update(canonicalPayload, 'utf8').digest('hex');
}

/**
 * Thrown, before anything is written, for details the chain cannot hold: values without a JSON
 * form (NaN, BigInt, lone surrogates) and the NUL character, which Postgres text cannot store.
 * Lets a caller tell "this input cannot be recorded" (its 400) from "the log is down" (503).
 */
export class AuditPayloadError extends Error {
  readonly code = 'AUDIT_PAYLOAD_INVALID';
}

// An escaped NUL in JSON text: \u0000 preceded by an even number of backslashes.
const ESCAPED_NUL = /(?<!\\)(?:\\\\)*\\u0000/;

function canonicalPayload(payload: AuditPayload): string {
  let text: string;
  try {
    text = canonicalJson(payload);
  } catch (error) {
    throw new AuditPayloadError(`audit event details have no canonical JSON form: ${(error as Error).message}`, { cause: error });
  }
  if (text.includes('\\u0000') && ESCAPED_NUL.test(text)) {
    throw new AuditPayloadError('audit event details contain a NUL character, which cannot be stored');
  }
  return text;
}

interface HeadRow {
  org_id: string;
  sequence: number;
  head_hash: string;
}

// ORDER BY makes every writer lock heads in the same order, so two transactions appending to the
// same organizations wait for each other instead of deadlocking.
const LOCK_HEADS = 'SELECT org_id, sequence, head_hash FROM audit_chain_heads WHERE org_id = ANY($1::uuid[]) ORDER BY org_id FOR UPDATE';

async function lockHeads(tx: Queryable, orgIds: string[]): Promise<Map<string, HeadRow>> {
  let heads = await tx.query<HeadRow>(LOCK_HEADS, [orgIds]);
  if (heads.length < orgIds.length) {
    // First events of an organization. Two first appends can race here: ON CONFLICT makes the
    // loser wait for the winner's row instead of failing, and the next statement's fresh
    // snapshot (READ COMMITTED) then sees and locks it.
    await tx.query(
      'INSERT INTO audit_chain_heads (org_id, sequence, head_hash) SELECT id, 0, $2 FROM unnest($1::uuid[]) AS id ON CONFLICT (org_id) DO NOTHING',
      [orgIds, GENESIS_HASH],
    );
    heads = await tx.query<HeadRow>(LOCK_HEADS, [orgIds]);
  }
  const byOrg = new Map(heads.map((head) => [head.org_id, head]));
  for (const orgId of orgIds) {
    if (!byOrg.has(orgId)) throw new Error(`audit chain head of organization ${orgId} could not be created`);
  }
  return byOrg;
}

/** Insert statements stay well below Postgres's 65,535 bind parameters. */
const ROWS_PER_INSERT = 500;
const COLUMNS_PER_ROW = 14;

function insertSql(rows: number, headUpdate: boolean): string {
  const values: string[] = [];
  for (let row = 0; row < rows; row += 1) {
    const p = (column: number): string => `$${row * COLUMNS_PER_ROW + column}`;
    values.push(
      `(${p(1)}, ${p(2)}, ${p(3)}, ${p(4)}, ${p(5)}, ${p(6)}, ${p(7)}, ${p(8)}, ${p(9)}, ${p(10)}::jsonb, ${p(11)}, ${p(12)}, ${p(13)}, ${p(14)})`,
    );
  }
  const insert =
    'INSERT INTO audit_events (id, org_id, sequence, type, decision, actor_id, resource_type, resource_id, request_id, ' +
    `payload, hash, previous_hash, occurred_at, created_at) VALUES ${values.join(', ')}`;
  if (!headUpdate) return insert;
  // One statement for the last rows and every head: a writable CTE runs even when unreferenced.
  const base = rows * COLUMNS_PER_ROW;
  return `WITH appended AS (${insert} RETURNING 1)
    UPDATE audit_chain_heads AS head SET sequence = moved.sequence, head_hash = moved.head_hash
    FROM unnest($${base + 1}::uuid[], $${base + 2}::bigint[], $${base + 3}::text[]) AS moved(org_id, sequence, head_hash)
    WHERE head.org_id = moved.org_id`;
}

function toPayload(event: NewAuditEvent, id: string, sequence: number, recordedAt: string): AuditPayload {
  return {
    id,
    org_id: event.orgId,
    sequence,
    type: event.type,
    actor_id: event.actorId,
    decision: event.decision,
    resource_type: event.resourceType,
    resource_id: event.resourceId,
    request_id: event.requestId,
    credential: event.credential,
    occurred_at: event.occurredAt.toISOString(),
    recorded_at: recordedAt,
    details: event.details,
  };
}

/** An event ready for a chain append done in SQL (migration 0009): its canonical payload split around the sequence. */
export interface SplitPayload {
  /** The canonical payload up to and including `"sequence":`. */
  before: string;
  /** The rest, from the comma after the sequence number. */
  after: string;
}

/**
 * The event's canonical payload with the sequence left open, for an append that learns the
 * sequence only under the head lock in the database: `before + String(sequence) + after` is
 * exactly the text appendAuditEvents would hash. `sequence` sorts second to last among the
 * payload's keys (only `type`, a plain string, follows), so its last occurrence is the top-level one.
 */
export function splitPayload(event: NewAuditEvent, id: string, recordedIso: string): SplitPayload {
  const text = canonicalPayload(toPayload(event, id, 0, recordedIso));
  const marker = ',"sequence":0,"type":';
  const at = text.lastIndexOf(marker);
  if (at < 0) throw new Error('the canonical payload has no top-level sequence');
  return { before: text.slice(0, at + ',"sequence":'.length), after: text.slice(at + ',"sequence":0'.length) };
}

/**
 * Appends `events` to their organizations' chains: each organization's events take consecutive
 * sequences in the order given, under one lock of its head (group commit passes the events of
 * many organizations at once). Call it inside the transaction of the change the events record:
 * if it throws, that transaction must fail too (its caller answers 503 audit_unavailable). The
 * events' webhook deliveries are written here too (webhooks/outbox.ts), in the same transaction,
 * so no change can append an event without them.
 */
export async function appendAuditEvents(tx: Queryable, events: readonly NewAuditEvent[], recordedAt: Date): Promise<AuditEvent[]> {
  if (events.length === 0) return [];
  const recordedIso = recordedAt.toISOString();
  const orgIds = [...new Set(events.map((event) => event.orgId))].sort();
  const heads = await lockHeads(tx, orgIds);

  const appended: AuditEvent[] = [];
  const params: unknown[][] = [];
  for (const event of events) {
    const head = heads.get(event.orgId) as HeadRow;
    const previousHash = head.head_hash;
    const sequence = head.sequence + 1;
    const id = randomUUID();
    const payload = toPayload(event, id, sequence, recordedIso);
    // Stored as the very text that was hashed, so what the database holds is what was chained.
    const text = canonicalPayload(payload);
    const hash = hashCanonical(previousHash, text);
    params.push([
      id,
      event.orgId,
      sequence,
      event.type,
      event.decision,
      event.actorId,
      event.resourceType,
      event.resourceId,
      event.requestId,
      text,
      hash,
      previousHash,
      event.occurredAt,
      recordedAt,
    ]);
    appended.push({
      id,
      orgId: event.orgId,
      sequence,
      type: event.type,
      decision: event.decision,
      actorId: event.actorId,
      resourceType: event.resourceType,
      resourceId: event.resourceId,
      // What was hashed and stored, not the caller's objects (a Date or an undefined in details
      // has already become its JSON form): webhooks and responses carry exactly the chained facts.
      payload: JSON.parse(text) as AuditPayload,
      hash,
      previousHash,
      occurredAt: event.occurredAt,
      createdAt: recordedAt,
    });
    heads.set(event.orgId, { org_id: event.orgId, sequence, head_hash: hash });
  }

  const moved = orgIds.map((orgId) => heads.get(orgId) as HeadRow);
  for (let start = 0; start < params.length; start += ROWS_PER_INSERT) {
    const chunk = params.slice(start, start + ROWS_PER_INSERT);
    const last = start + ROWS_PER_INSERT >= params.length;
    const values = chunk.flat();
    if (last) values.push(orgIds, moved.map((head) => head.sequence), moved.map((head) => head.head_hash));
    await tx.query(insertSql(chunk.length, last), values);
  }
  await enqueueWebhookEvents(tx, appended);
  return appended;
}

/** Appends one event; see `appendAuditEvents`. */
export async function appendAuditEvent(tx: Queryable, event: NewAuditEvent, recordedAt: Date): Promise<AuditEvent> {
  const [appended] = await appendAuditEvents(tx, [event], recordedAt);
  return appended as AuditEvent;
}
