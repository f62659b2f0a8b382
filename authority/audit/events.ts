/**
 * Reading an organization's audit chain: filtered listing in sequence order with opaque cursors,
 * and the wire form of an event.
 *
 * @example
 *   const page = await listAuditEvents(db, org.id, { types: ['permit.issued'], limit: 50 });
 *   const next = page.nextCursor === null ? null : parseAuditCursor(page.nextCursor); // → afterSequence
 */
import { CountersignError } from '../../shared/errors.js';
import type { AuditEventWire } from '../../shared/wire/audit.js';
import type { Queryable } from '../store/db.js';
import type { AuditEvent, AuditPayload } from './types.js';

export interface AuditEventFilters {
  types?: readonly string[] | undefined;
  /** Events of a type with a given decision (the SDK's `evaluate.allow`, say), besides `types`. */
  typedDecisions?: ReadonlyArray<{ type: string; decision: string }> | undefined;
  actorId?: string | undefined;
  requestId?: string | undefined;
  resourceId?: string | undefined;
  /** occurred_at ≥ from. */
  from?: Date | undefined;
  /** occurred_at < to, so consecutive windows never list an event twice. */
  to?: Date | undefined;
  /** Only events after this sequence: the decoded cursor. */
  afterSequence?: number | undefined;
  limit: number;
}

export interface AuditEventPage {
  events: AuditEvent[];
  /** null on the last page. */
  nextCursor: string | null;
  /** Events matching the filters, regardless of the cursor. */
  total: number;
}

export interface AuditEventRow {
  id: string;
  org_id: string;
  sequence: number;
  type: AuditEvent['type'];
  decision: string | null;
  actor_id: string | null;
  resource_type: string | null;
  resource_id: string | null;
  payload: AuditPayload;
  hash: string;
  previous_hash: string;
  occurred_at: Date;
  created_at: Date;
}

export const AUDIT_EVENT_COLUMNS =
  'id, org_id, sequence, type, decision, actor_id, resource_type, resource_id, payload, hash, previous_hash, occurred_at, created_at';

export function auditEventFromRow(row: AuditEventRow): AuditEvent {
  return {
    id: row.id,
    orgId: row.org_id,
    sequence: row.sequence,
    type: row.type,
    decision: row.decision,
    actorId: row.actor_id,
    resourceType: row.resource_type,
    resourceId: row.resource_id,
    payload: row.payload,
    hash: row.hash,
    previousHash: row.previous_hash,
    occurredAt: row.occurred_at,
    createdAt: row.created_at,
  };
}

/**
 * The wire form. Its key order is fixed here because export bundles are signed over
 * JSON.stringify of these objects: a verifier re-serialises them in the order it received them.
 */
export function auditEventToWire(event: AuditEvent): AuditEventWire {
  return {
    id: event.id,
    organization_id: event.orgId,
    sequence: event.sequence,
    type: event.type,
    decision: event.decision,
    actor_id: event.actorId,
    resource_type: event.resourceType,
    resource_id: event.resourceId,
    request_id: event.payload.request_id,
    // AuditPayload is an interface, so TypeScript does not see it as the loose record it is.
    payload: event.payload as AuditEventWire['payload'],
    hash: event.hash,
    previous_hash: event.previousHash,
    occurred_at: event.occurredAt.toISOString(),
    created_at: event.createdAt.toISOString(),
  };
}

/** The cursor after `sequence`: opaque to clients, base64url of the decimal sequence. */
export function auditCursor(sequence: number): string {
  return Buffer.from(String(sequence), 'utf8').toString('base64url');
}

/** The sequence a cursor stands for; a cursor this server did not issue is a 400. */
export function parseAuditCursor(cursor: string): number {
  const text = /^[A-Za-z0-9_-]{1,24}$/.test(cursor) ? Buffer.from(cursor, 'base64url').toString('utf8') : '';
  const sequence = /^[1-9][0-9]{0,15}$/.test(text) ? Number(text) : Number.NaN;
  // Re-encoding must give the same text, so that one position has exactly one cursor.
  if (!Number.isSafeInteger(sequence) || auditCursor(sequence) !== cursor) {
    throw new CountersignError('invalid_request', 'cursor is not a next_cursor this server returned', {
      details: [{ path: 'query.cursor', message: 'invalid cursor' }],
    });
  }
  return sequence;
}

function hasFilters(filters: AuditEventFilters): boolean {
  return (
    (filters.types?.length ?? 0) + (filters.typedDecisions?.length ?? 0) > 0 ||
    filters.actorId !== undefined ||
    filters.requestId !== undefined ||
    filters.resourceId !== undefined ||
    filters.from !== undefined ||
    filters.to !== undefined
  );
}

/** The filters as a WHERE clause (without the cursor) and its parameters, `$1` being the organization. */
function whereClause(orgId: string, filters: AuditEventFilters): { conditions: string[]; params: unknown[] } {
  const conditions = ['org_id = $1'];
  const params: unknown[] = [orgId];
  const add = (sql: (placeholder: string) => string, value: unknown): void => {
    params.push(value);
    conditions.push(sql(`$${params.length}`));
  };
  const types = filters.types ?? [];
  const typedDecisions = filters.typedDecisions ?? [];
  if (types.length + typedDecisions.length > 0) {
    params.push([...types], typedDecisions.map(({ type, decision }) => `${type} ${decision}`));
    // Either list may be empty; a type never holds a space, so the pair cannot be confused.
    conditions.push(`(type = ANY($${params.length - 1}::text[]) OR type || ' ' || coalesce(decision, '') = ANY($${params.length}::text[]))`);
  }
  if (filters.actorId !== undefined) add((p) => `actor_id = ${p}`, filters.actorId);
  if (filters.requestId !== undefined) add((p) => `request_id = ${p}`, filters.requestId);
  if (filters.resourceId !== undefined) add((p) => `resource_id = ${p}`, filters.resourceId);
  if (filters.from !== undefined) add((p) => `occurred_at >= ${p}`, filters.from);
  if (filters.to !== undefined) add((p) => `occurred_at < ${p}`, filters.to);
  return { conditions, params };
}

async function countMatching(db: Queryable, orgId: string, filters: AuditEventFilters): Promise<number> {
  if (!hasFilters(filters)) {
    // Sequences are gap-free from 1, so the head's sequence is the number of events.
    const [head] = await db.query<{ sequence: number }>('SELECT sequence FROM audit_chain_heads WHERE org_id = $1', [orgId]);
    return head?.sequence ?? 0;
  }
  const { conditions, params } = whereClause(orgId, filters);
  const [row] = await db.query<{ n: number }>(`SELECT count(*)::int8 AS n FROM audit_events WHERE ${conditions.join(' AND ')}`, params);
  return row?.n ?? 0;
}

/** The first and last sequence of the events matching `filters` (no `limit`), or null when none does. */
export async function matchingSequenceRange(db: Queryable, orgId: string, filters: Omit<AuditEventFilters, 'limit' | 'afterSequence'>): Promise<{ first: number; last: number } | null> {
  const { conditions, params } = whereClause(orgId, Object.assign({ limit: 0 }, filters));
  const [row] = await db.query<{ first: number | null; last: number | null }>(
    `SELECT min(sequence)::int8 AS first, max(sequence)::int8 AS last FROM audit_events WHERE ${conditions.join(' AND ')}`,
    params,
  );
  return row?.first == null || row.last == null ? null : { first: Number(row.first), last: Number(row.last) };
}

/** One page of an organization's events matching `filters`, in sequence order. */
export async function listAuditEvents(db: Queryable, orgId: string, filters: AuditEventFilters): Promise<AuditEventPage> {
  const { conditions, params } = whereClause(orgId, filters);
  if (filters.afterSequence !== undefined) {
    params.push(filters.afterSequence);
    conditions.push(`sequence > $${params.length}`);
  }
  params.push(filters.limit + 1);
  const sql = `SELECT ${AUDIT_EVENT_COLUMNS} FROM audit_events WHERE ${conditions.join(' AND ')} ORDER BY sequence LIMIT $${params.length}`;
  const [rows, total] = await Promise.all([db.query<AuditEventRow>(sql, params), countMatching(db, orgId, filters)]);
  // One row beyond the page tells whether another page exists without a second query.
  const more = rows.length > filters.limit;
  const events = rows.slice(0, filters.limit).map(auditEventFromRow);
  const last = events.at(-1);
  return { events, nextCursor: more && last ? auditCursor(last.sequence) : null, total };
}
