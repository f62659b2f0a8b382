/**
 * Drains the verification records the gates append to their organizations' streams in the shared
 * store into the audit log: at least once (a record leaves the stream only after the transaction
 * that recorded it has committed) and exactly once in the log (a ledger keyed by the record's
 * stream id skips anything recorded before, whether by a crash between commit and trim or by
 * another replica draining at the same time; keyed as well by the gate's own id for the record,
 * `gate_record_id`, it skips a record the gate appended again because it could not tell whether
 * an earlier append had landed). Records without a gate record id (older gates) are told apart by
 * stream id alone.
 *
 * Per organization and batch, one transaction: ledger rows (ON CONFLICT DO NOTHING), permits of
 * newly recorded `permit.verified` records marked consumed, the cursor moved forward (never back),
 * one audit event per new record, appended last. After the commit the stream is trimmed; a failed
 * trim only leaves records the cursor and the ledger already skip.
 *
 * A record of an MCP `tools/call` names its tool, and so does its event (`details.tool`), so that
 * shadow readiness and audit queries can be read per tool; other records carry none.
 *
 * An `execution.observed` event says whether the upstream `answered` (with its status), was
 * `not_reached` or the result is `unknown`, with the gate's code and reason; a record from a gate
 * that predates the `upstream` field is read from its status (upstreamOutcomeOf).
 *
 * A record that does not parse (an old or broken gate, a hand-written entry) is neither dropped
 * nor allowed to block the stream: it is recorded as a `permit.rejected` event with decision null
 * and details `{ invalid_record: true, claimed_kind, fields, issues }`, no permit is marked, and
 * it is counted as `invalid`.
 *
 * @example
 *   const { recorded, duplicates, invalid } = await drainVerificationRecords({ db, store, clock });
 *   const drain = startVerificationDrain({ db, store, clock }, { intervalMs: 1000, logger });
 *   await drain.stop(); // waits for a run in flight
 */
import { verificationStream } from '../../shared/permits/store-keys.js';
import type { SharedStore, StoredRecord } from '../../shared/store/types.js';
import { upstreamOutcomeOf, VerificationRecord, type ExecutionObservedDetails } from '../../shared/wire/verification-records.js';
import { appendAuditEvents } from '../audit/chain.js';
import type { NewAuditEvent } from '../audit/types.js';
import { markManyConsumed } from '../permits/permits.js';
import { runEvery, type PeriodicTask } from '../periodic.js';
import type { Db, Queryable } from '../store/db.js';
import type { Clock } from '../time.js';

export interface DrainDeps {
  db: Db;
  store: SharedStore;
  clock: Clock;
}

export interface DrainOptions {
  /** Records read per organization and transaction (default 500). */
  batch?: number;
  /** Only these organizations (default: every organization). */
  orgIds?: string[];
  /**
   * Only records appended at least this long ago (default 0): a gate may still withdraw a
   * `permit.verified` whose consume did not count, within its consume timeout (ReadRecordsOptions).
   */
  settledForMs?: number;
}

export interface DrainResult {
  /** Records newly written to the audit log (valid and invalid). */
  recorded: number;
  /** Records read again that the ledger had already recorded. */
  duplicates: number;
  /** Of `recorded`, the records whose fields did not parse. */
  invalid: number;
}

const DEFAULT_BATCH = 500;
/**
 * Batches per organization and run while full ones keep coming: a backlog (the authority was
 * down) drains in one run, yet a flood in one organization cannot keep the others waiting.
 */
const MAX_BATCHES_PER_RUN = 20;
/** Bounds what an invalid record can put into one audit event. */
const MAX_INVALID_FIELDS = 64;
const MAX_INVALID_VALUE_CHARS = 1000;

/**
 * Drains every organization's stream (or those of `orgIds`). Rejects when the shared store cannot
 * be read (at once: every organization would fail the same way) or when an organization's batch
 * could not be committed (after the other organizations have been drained). Nothing is lost
 * either way: unrecorded records stay in the stream after the cursor.
 */
export async function drainVerificationRecords(deps: DrainDeps, options: DrainOptions = {}): Promise<DrainResult> {
  const batch = options.batch ?? DEFAULT_BATCH;
  if (!Number.isInteger(batch) || batch < 1) throw new RangeError('batch must be a positive integer');
  const orgIds = options.orgIds ?? (await deps.db.query<{ id: string }>('SELECT id FROM organizations ORDER BY id')).map((row) => row.id);

  const total: DrainResult = { recorded: 0, duplicates: 0, invalid: 0 };
  const failures: unknown[] = [];
  for (const orgId of orgIds) {
    const stream = verificationStream(orgId);
    for (let round = 0; round < MAX_BATCHES_PER_RUN; round += 1) {
      const cursor = await readCursor(deps.db, orgId);
      const records = await deps.store.readRecords(stream, cursor, batch, { settledForMs: options.settledForMs ?? 0 });
      if (records.length === 0) break;
      let result: DrainResult;
      try {
        result = await recordBatch(deps, orgId, records);
      } catch (error) {
        // One organization's batch that cannot be committed must not hold up the others.
        failures.push(error);
        break;
      }
      total.recorded += result.recorded;
      total.duplicates += result.duplicates;
      total.invalid += result.invalid;
      const lastId = (records[records.length - 1] as StoredRecord).id;
      // Best effort: the cursor has moved past these, and the ledger knows them.
      await deps.store.trimRecords(stream, lastId).catch(() => undefined);
      if (records.length < batch) break;
    }
  }
  if (failures.length === 1) throw failures[0];
  if (failures.length > 1) throw new AggregateError(failures, `${failures.length} organizations' verification records could not be recorded`);
  return total;
}

async function readCursor(db: Queryable, orgId: string): Promise<string> {
  const rows = await db.query<{ last_id: string }>('SELECT last_id FROM verification_stream_cursors WHERE org_id = $1', [orgId]);
  return rows[0]?.last_id ?? '0';
}

// Stream ids compare as (ms, seq) numbers, not as text ('9-0' < '10-0').
const ID_PARTS = (column: string) => `(split_part(${column}, '-', 1)::numeric, split_part(${column}, '-', 2)::numeric)`;
const ADVANCE_CURSOR = `INSERT INTO verification_stream_cursors AS cursor (org_id, last_id) VALUES ($1, $2)
  ON CONFLICT (org_id) DO UPDATE SET last_id = EXCLUDED.last_id
  WHERE ${ID_PARTS('cursor.last_id')} < ${ID_PARTS('EXCLUDED.last_id')}`;

interface Parsed {
  stored: StoredRecord;
  record: VerificationRecord | null;
  issues: string[];
}

async function recordBatch(deps: DrainDeps, orgId: string, records: StoredRecord[]): Promise<DrainResult> {
  const now = new Date(deps.clock.now());
  const parsed: Parsed[] = records.map((stored) => {
    const result = VerificationRecord.safeParse(stored.fields);
    return result.success
      ? { stored, record: result.data, issues: [] }
      : { stored, record: null, issues: result.error.issues.map((issue) => `${issue.path.join('.') || '(record)'}: ${issue.message}`) };
  });

  return deps.db.transaction(async (tx) => {
    // Ascending id order in one statement: two replicas inserting overlapping batches meet at the
    // same first row, so the later one waits for the earlier's commit instead of deadlocking.
    // No conflict target: a row is skipped when its stream id OR its gate record id was recorded
    // before (in an earlier batch, or earlier in this one: the first copy of a retried append wins).
    const inserted = await tx.query<{ record_id: string }>(
      `INSERT INTO verification_records (org_id, record_id, gate_record_id, drained_at)
       SELECT $1, id, gate_record_id, $3 FROM unnest($2::text[], $4::text[]) WITH ORDINALITY AS batch(id, gate_record_id, position) ORDER BY position
       ON CONFLICT DO NOTHING RETURNING record_id`,
      [orgId, records.map((record) => record.id), now, parsed.map((entry) => entry.record?.gate_record_id ?? null)],
    );
    const fresh = new Set(inserted.map((row) => row.record_id));
    const toRecord = parsed.filter((entry) => fresh.has(entry.stored.id));

    // A permit the authority does not know, or no longer issued, stays as it is: the event still
    // records what the gate saw.
    const consumed = toRecord.flatMap(({ record }) =>
      record?.kind === 'permit.verified' && record.permit_id !== '' ? [{ id: record.permit_id, at: new Date(record.at) }] : [],
    );
    await markManyConsumed(tx, orgId, consumed);
    await tx.query(ADVANCE_CURSOR, [orgId, (records[records.length - 1] as StoredRecord).id]);

    const events = toRecord.map((entry) => auditEventOf(orgId, entry, now));
    const appended = await appendAuditEvents(tx, events, now);
    if (appended.length > 0) {
      // After the append, which holds the chain lock to commit: one statement on rows this
      // transaction already holds, to link each ledger row to its event.
      await tx.query(
        `UPDATE verification_records AS ledger SET audit_event_id = linked.event_id
         FROM unnest($2::text[], $3::uuid[]) AS linked(record_id, event_id)
         WHERE ledger.org_id = $1 AND ledger.record_id = linked.record_id`,
        [orgId, toRecord.map((entry) => entry.stored.id), appended.map((event) => event.id)],
      );
    }
    const invalid = toRecord.filter((entry) => entry.record === null).length;
    return { recorded: toRecord.length, duplicates: records.length - toRecord.length, invalid };
  });
}

/** Mirrors the details the authority's own verify route writes, plus where the record came from. */
function auditEventOf(orgId: string, { stored, record, issues }: Parsed, now: Date): NewAuditEvent {
  if (!record) return invalidEvent(orgId, stored, issues, now);
  const text = (value: string) => (value === '' ? null : clean(value));
  // `tool` only where the gate named one (an MCP tools/call): HTTP routes' events stay as they were.
  const source = { gate: clean(record.gate), mode: record.mode, record_id: stored.id, ...(record.tool !== undefined ? { tool: clean(record.tool) } : {}) };
  // Spreads come after the literal members: see test/unit/leading-spread.test.ts.
  const event = (decision: NewAuditEvent['decision'], details: NewAuditEvent['details']): NewAuditEvent => ({
    orgId,
    type: record.kind,
    actorId: text(record.actor_id),
    decision,
    resourceType: 'permit',
    resourceId: text(record.permit_id),
    requestId: text(record.request_id),
    credential: `gate:${clean(record.gate)}`,
    occurredAt: new Date(record.at),
    details,
  });
  switch (record.kind) {
    case 'permit.verified':
      return event('allow', { verify_error_code: null, reason: 'verified', consumed: true, action_type: text(record.action_type), ...source });
    case 'permit.rejected':
      return event('deny', { verify_error_code: text(record.code), reason: text(record.reason), consumed: false, action_type: text(record.action_type), ...source });
    case 'execution.observed':
      return event(null, {
        upstream: upstreamOutcomeOf(record),
        upstream_status: numberOrText(record.upstream_status),
        code: text(record.code),
        reason: text(record.reason),
        duration_ms: numberOrText(record.duration_ms),
        action_type: text(record.action_type),
        ...source,
      } satisfies ExecutionObservedDetails);
  }
}

function invalidEvent(orgId: string, stored: StoredRecord, issues: string[], now: Date): NewAuditEvent {
  const entries = Object.entries(stored.fields);
  const fields: Record<string, string> = {};
  let truncated = entries.length > MAX_INVALID_FIELDS;
  for (const [key, value] of entries.slice(0, MAX_INVALID_FIELDS)) {
    const text = String(value);
    if (key.length > 100 || text.length > MAX_INVALID_VALUE_CHARS) truncated = true;
    fields[clean(key).slice(0, 100)] = clean(text).slice(0, MAX_INVALID_VALUE_CHARS);
  }
  const field = (name: string, max: number) => {
    const value = stored.fields[name];
    return typeof value === 'string' && value !== '' ? clean(value).slice(0, max) : null;
  };
  const at = field('at', 100);
  const atMs = at === null ? Number.NaN : Date.parse(at);
  return {
    orgId,
    type: 'permit.rejected',
    // Not a verdict anyone could read from the record.
    decision: null,
    actorId: field('actor_id', 256),
    resourceType: 'permit',
    resourceId: field('permit_id', 64),
    requestId: field('request_id', 200),
    credential: `gate:${field('gate', 200) ?? 'unknown'}`,
    occurredAt: Number.isFinite(atMs) ? new Date(atMs) : now,
    details: {
      invalid_record: true,
      record_id: stored.id,
      claimed_kind: field('kind', 64),
      fields,
      fields_truncated: truncated,
      issues: issues.slice(0, 20).map((issue) => clean(issue).slice(0, 300)),
    },
  };
}

/**
 * NUL and lone surrogates cannot be stored or hashed (AuditPayloadError): a record carrying them
 * would fail its batch on every run and block the stream, so they become U+FFFD.
 */
function clean(value: string): string {
  return value.replace(/\u0000|[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/g, '\uFFFD');
}

/** `'200'` → 200, `''` → null; anything else is kept as text rather than lost. */
function numberOrText(value: string): number | string | null {
  if (value === '') return null;
  const number = Number(value);
  return /^\d+(?:\.\d+)?$/.test(value) && Number.isFinite(number) ? number : clean(value);
}

export interface DrainLogger {
  error(obj: unknown, msg: string): void;
}

/** Stops the timer and resolves once a run in flight has finished. */
export type RunningDrain = PeriodicTask;

/**
 * Runs the drain every `intervalMs` (see runEvery), logging failures: the next tick retries, and
 * the records wait in the stream meanwhile.
 */
export function startVerificationDrain(
  deps: DrainDeps,
  options: { intervalMs: number; logger: DrainLogger; batch?: number; settledForMs?: number },
): RunningDrain {
  const drainOptions: DrainOptions = { batch: options.batch, settledForMs: options.settledForMs };
  return runEvery(options.intervalMs, () =>
    drainVerificationRecords(deps, drainOptions).then(
      (result) => {
        if (result.invalid > 0) options.logger.error({ invalid: result.invalid }, 'verification records that did not parse were recorded as invalid');
      },
      (error: unknown) => options.logger.error({ err: error }, 'draining verification records failed; retrying on the next tick'),
    ),
  );
}
