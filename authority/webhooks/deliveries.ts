/**
 * The delivery outbox's state machine (migration 0010), in SQL. A worker pass is claim → send →
 * record:
 *
 *   claim   due rows (`pending`/`failed`, next_attempt_at <= now, subscription active) are locked
 *           with FOR UPDATE SKIP LOCKED; each gets its next attempt number, an `in_flight` attempt
 *           row, and a lease (next_attempt_at = now + timeout + margin) so no other worker takes
 *           it meanwhile. Committed before anything is sent: two workers never send one attempt.
 *   record  the attempt's outcome; the delivery becomes `delivered`, `failed` (due again after
 *           the retry delay) or `dead_lettered` (this round's attempts used up). Only when the
 *           delivery is still at that attempt: a late report never overwrites a newer attempt.
 *
 * A worker that dies between claim and record leaves its lease to run out; the next claim marks
 * that attempt `abandoned` and sends the next one with the same delivery id (at least once). If
 * the abandoned attempt was the round's last, the delivery is dead-lettered instead (replay
 * sends it again).
 *
 * @example
 *   const claimed = await claimDueDeliveries(db, { now, limit: 50, leaseMarginMs: 30_000 });
 *   await recordAttempt(db, { claimed: claimed.attempts[0], ok: true, statusCode: 204, durationMs: 12, error: null, finishedAt, retryDelayMs: 5_000 });
 */
import { CountersignError } from '../../shared/errors.js';
import type { DeliveryStatus, WebhookDeliveryWire } from '../../shared/wire/webhooks.js';
import { decodePageCursor, encodePageCursor } from '../http/page-cursor.js';
import type { Db, Queryable } from '../store/db.js';

/** One attempt a worker has claimed and must now send. */
export interface ClaimedAttempt {
  deliveryId: string;
  orgId: string;
  subscriptionId: string;
  eventType: string;
  payload: Record<string, unknown>;
  /** X-Service-Attempt: 1, 2, … over the delivery's life (replays continue the count). */
  attempt: number;
  /** This attempt's position in the current round (1 … maxAttempts): picks the retry delay. */
  round: number;
  maxAttempts: number;
  url: string;
  timeoutSeconds: number;
  secretSealed: string;
}

interface DueRow {
  id: string;
  org_id: string;
  subscription_id: string;
  event_type: string;
  payload: Record<string, unknown>;
  attempts: number;
  replay_base: number;
  url: string;
  timeout_seconds: number;
  secret_sealed: string;
  max_attempts: number;
}

export const ABANDONED_ERROR = 'the worker sending this attempt stopped before reporting its outcome; it may or may not have arrived';

/**
 * Claims up to `limit` due deliveries in one transaction (see the module comment). Returns the
 * attempts to send and how many deliveries were dead-lettered because their last attempt was
 * abandoned.
 */
export async function claimDueDeliveries(db: Db, options: { now: Date; limit: number; leaseMarginMs: number }): Promise<{ attempts: ClaimedAttempt[]; deadLettered: number }> {
  return db.transaction(async (tx) => {
    const { now } = options;
    const due = await tx.query<DueRow>(
      `SELECT d.id, d.org_id, d.subscription_id, d.event_type, d.payload, d.attempts, d.replay_base,
              s.url, s.timeout_seconds, s.secret_sealed, s.max_attempts
       FROM webhook_deliveries d JOIN webhook_subscriptions s ON s.id = d.subscription_id
       WHERE d.status IN ('pending', 'failed') AND d.next_attempt_at <= $1 AND s.is_active
       ORDER BY d.next_attempt_at, d.event_sequence, d.id
       LIMIT $2
       FOR UPDATE OF d SKIP LOCKED`,
      [now, options.limit],
    );
    if (due.length === 0) return { attempts: [], deadLettered: 0 };
    // A lease that ran out: its worker never reported. Say so in the history.
    await tx.query(
      `UPDATE webhook_attempts SET outcome = 'abandoned', finished_at = $2, error = $3
       WHERE delivery_id = ANY ($1::uuid[]) AND outcome = 'in_flight'`,
      [due.map((row) => row.id), now, ABANDONED_ERROR],
    );
    const exhausted = due.filter((row) => row.attempts - row.replay_base >= row.max_attempts);
    const sendable = due.filter((row) => row.attempts - row.replay_base < row.max_attempts);
    if (exhausted.length > 0) {
      await tx.query(
        `UPDATE webhook_deliveries SET status = 'dead_lettered', dead_lettered_at = $2, last_error = $3, updated_at = $2
         WHERE id = ANY ($1::uuid[])`,
        [exhausted.map((row) => row.id), now, ABANDONED_ERROR],
      );
    }
    if (sendable.length > 0) {
      const leases = sendable.map((row) => new Date(now.getTime() + row.timeout_seconds * 1000 + options.leaseMarginMs).toISOString());
      await tx.query(
        `UPDATE webhook_deliveries AS d SET attempts = d.attempts + 1, next_attempt_at = lease.until, updated_at = $3
         FROM unnest($1::uuid[], $2::timestamptz[]) AS lease(id, until) WHERE d.id = lease.id`,
        [sendable.map((row) => row.id), leases, now],
      );
      await tx.query(
        `INSERT INTO webhook_attempts (delivery_id, attempt, outcome, started_at)
         SELECT id, attempt, 'in_flight', $3 FROM unnest($1::uuid[], $2::int[]) AS claimed(id, attempt)`,
        [sendable.map((row) => row.id), sendable.map((row) => row.attempts + 1), now],
      );
    }
    return {
      deadLettered: exhausted.length,
      attempts: sendable.map((row) => ({
        deliveryId: row.id,
        orgId: row.org_id,
        subscriptionId: row.subscription_id,
        eventType: row.event_type,
        payload: row.payload,
        attempt: row.attempts + 1,
        round: row.attempts + 1 - row.replay_base,
        maxAttempts: row.max_attempts,
        url: row.url,
        timeoutSeconds: row.timeout_seconds,
        secretSealed: row.secret_sealed,
      })),
    };
  });
}

export interface AttemptResult {
  claimed: ClaimedAttempt;
  ok: boolean;
  statusCode: number | null;
  durationMs: number;
  error: string | null;
  finishedAt: Date;
  /** When the attempt failed and the round has attempts left: how long until the next one. */
  retryDelayMs: number;
}

/**
 * Records an attempt's outcome. Returns the delivery's new status, or `superseded` when the
 * delivery has moved on (the lease ran out and another attempt was claimed, or it was deleted).
 */
export async function recordAttempt(db: Db, result: AttemptResult): Promise<DeliveryStatus | 'superseded'> {
  const { claimed } = result;
  const status: DeliveryStatus = result.ok ? 'delivered' : claimed.round >= claimed.maxAttempts ? 'dead_lettered' : 'failed';
  const at = result.finishedAt;
  return db.transaction(async (tx) => {
    // The attempt's truth is kept even when it is late (an `abandoned` attempt that did finish).
    await tx.query(
      `UPDATE webhook_attempts SET outcome = $3, finished_at = $4, status_code = $5, duration_ms = $6, error = $7
       WHERE delivery_id = $1 AND attempt = $2`,
      [claimed.deliveryId, claimed.attempt, result.ok ? 'succeeded' : 'failed', at, result.statusCode, result.durationMs, result.error],
    );
    const rows = await tx.query(
      `UPDATE webhook_deliveries SET status = $3, last_status_code = $4, last_error = $5, updated_at = $6,
              next_attempt_at = CASE WHEN $3 = 'failed' THEN $7::timestamptz ELSE next_attempt_at END,
              delivered_at = CASE WHEN $3 = 'delivered' THEN $6 ELSE delivered_at END,
              dead_lettered_at = CASE WHEN $3 = 'dead_lettered' THEN $6 ELSE dead_lettered_at END
       WHERE id = $1 AND attempts = $2 AND status IN ('pending', 'failed') RETURNING id`,
      [claimed.deliveryId, claimed.attempt, status, result.statusCode, result.error, at, new Date(at.getTime() + result.retryDelayMs)],
    );
    return rows.length === 0 ? 'superseded' : status;
  });
}

interface DeliveryRow {
  id: string;
  org_id: string;
  subscription_id: string;
  event_id: string | null;
  event_type: string;
  status: DeliveryStatus;
  attempts: number;
  next_attempt_at: Date;
  last_status_code: number | null;
  last_error: string | null;
  delivered_at: Date | null;
  dead_lettered_at: Date | null;
  created_at: Date;
  updated_at: Date;
}

interface AttemptRow {
  delivery_id: string;
  attempt: number;
  outcome: 'in_flight' | 'succeeded' | 'failed' | 'abandoned';
  started_at: Date;
  finished_at: Date | null;
  status_code: number | null;
  duration_ms: number | null;
  error: string | null;
}

const iso = (date: Date | null): string | null => (date === null ? null : date.toISOString());

function deliveryToWire(row: DeliveryRow, attempts: AttemptRow[]): WebhookDeliveryWire {
  const open = row.status === 'pending' || row.status === 'failed';
  return {
    id: row.id,
    subscription_id: row.subscription_id,
    event_type: row.event_type,
    event_id: row.event_id,
    status: row.status,
    attempts: row.attempts,
    next_attempt_at: open ? row.next_attempt_at.toISOString() : null,
    last_status_code: row.last_status_code,
    last_error: row.last_error,
    delivered_at: iso(row.delivered_at),
    dead_lettered_at: iso(row.dead_lettered_at),
    created_at: row.created_at.toISOString(),
    updated_at: row.updated_at.toISOString(),
    history: attempts.map((a) => ({
      attempt: a.attempt,
      outcome: a.outcome,
      status_code: a.status_code,
      duration_ms: a.duration_ms,
      error: a.error,
      started_at: a.started_at.toISOString(),
      finished_at: iso(a.finished_at),
    })),
  };
}

async function withHistory(db: Queryable, rows: DeliveryRow[]): Promise<WebhookDeliveryWire[]> {
  if (rows.length === 0) return [];
  const attempts = await db.query<AttemptRow>('SELECT * FROM webhook_attempts WHERE delivery_id = ANY ($1::uuid[]) ORDER BY attempt', [rows.map((row) => row.id)]);
  return rows.map((row) => deliveryToWire(row, attempts.filter((attempt) => attempt.delivery_id === row.id)));
}

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

/** An organization's deliveries, newest first, each with its attempts; `next_cursor` when more exist. */
export async function listDeliveries(
  db: Queryable,
  orgId: string,
  filters: { subscriptionId?: string | undefined; status?: DeliveryStatus | undefined; limit?: number | undefined; cursor?: string | undefined },
): Promise<{ deliveries: WebhookDeliveryWire[]; next_cursor: string | null }> {
  const limit = filters.limit ?? 50;
  const conditions = ['org_id = $1'];
  const params: unknown[] = [orgId];
  const add = (condition: (n: number) => string, value: unknown) => {
    params.push(value);
    conditions.push(condition(params.length));
  };
  if (filters.subscriptionId !== undefined) add((n) => `subscription_id = $${n}`, filters.subscriptionId);
  if (filters.status !== undefined) add((n) => `status = $${n}`, filters.status);
  if (filters.cursor !== undefined) {
    const { at, id } = decodePageCursor(filters.cursor);
    if (!UUID.test(id) || at.getUTCFullYear() < 1 || at.getUTCFullYear() > 9999) {
      throw new CountersignError('invalid_request', 'cursor is not one this API returned', { details: [{ path: 'cursor', message: 'invalid cursor' }] });
    }
    params.push(at, id);
    conditions.push(`(created_at, id) < ($${params.length - 1}, $${params.length}::uuid)`);
  }
  params.push(limit + 1);
  const rows = await db.query<DeliveryRow>(
    `SELECT * FROM webhook_deliveries WHERE ${conditions.join(' AND ')} ORDER BY created_at DESC, id DESC LIMIT $${params.length}`,
    params,
  );
  const page = rows.slice(0, limit);
  const last = page.at(-1);
  return { deliveries: await withHistory(db, page), next_cursor: rows.length > limit && last ? encodePageCursor(last.created_at, last.id) : null };
}

/**
 * Resets a `failed` or `dead_lettered` delivery: `pending`, due now, with a fresh round of the
 * subscription's `max_attempts` (attempt numbers continue). 404 for another organization's or an
 * unknown delivery; 409 for one that is delivered, pending, or has an attempt in flight.
 */
export async function replayDelivery(db: Db, orgId: string, deliveryId: string, now: Date): Promise<WebhookDeliveryWire> {
  return db.transaction(async (tx) => {
    const [row] = await tx.query<DeliveryRow>('SELECT * FROM webhook_deliveries WHERE org_id = $1 AND id = $2 FOR UPDATE', [orgId, deliveryId]);
    if (!row) throw new CountersignError('not_found', 'no such webhook delivery in this organization');
    if (row.status !== 'failed' && row.status !== 'dead_lettered') {
      throw new CountersignError('conflict', `the delivery is ${row.status}; only a failed or dead-lettered delivery can be replayed`);
    }
    if (row.status === 'failed' && row.next_attempt_at.getTime() > now.getTime()) {
      const [inFlight] = await tx.query("SELECT 1 FROM webhook_attempts WHERE delivery_id = $1 AND outcome = 'in_flight'", [deliveryId]);
      if (inFlight) throw new CountersignError('conflict', 'an attempt of this delivery is in flight; replay it once that attempt has finished');
    }
    const [updated] = await tx.query<DeliveryRow>(
      `UPDATE webhook_deliveries SET status = 'pending', replay_base = attempts, next_attempt_at = $2, dead_lettered_at = NULL, updated_at = $2
       WHERE id = $1 RETURNING *`,
      [deliveryId, now],
    );
    const [wire] = await withHistory(tx, [updated as DeliveryRow]);
    return wire as WebhookDeliveryWire;
  });
}
