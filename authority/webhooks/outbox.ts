/**
 * The webhook outbox: the seam through which every appended audit event reaches the
 * organization's webhook subscribers. appendAuditEvents (audit/chain.ts) calls it with the events
 * it just appended, inside the same transaction, so a delivery exists exactly when its event does
 * (docs/webhooks.md, "Retries and dead letters"). For each event it writes one `pending` delivery per matching active subscription
 * (`event_types` null, or containing the event's type), due at once; workers claim them later
 * with `FOR UPDATE SKIP LOCKED` (deliveries.ts). A delivery's payload is the event's payload.
 *
 * Evaluations append their events in SQL (countersign_store_evaluations), which writes their
 * deliveries itself with the same rule (migration 0010).
 *
 * @example
 *   // inside appendAuditEvents, after the events' insert:
 *   await enqueueWebhookEvents(tx, appended);
 */
import { randomUUID } from 'node:crypto';
import type { AuditEvent } from '../audit/types.js';
import type { Queryable } from '../store/db.js';

/** One statement whatever the number of events; nothing is written when no subscription matches. */
export async function enqueueWebhookEvents(tx: Queryable, events: AuditEvent[]): Promise<void> {
  if (events.length === 0) return;
  const rows = events.map((event) => ({
    id: event.id,
    org_id: event.orgId,
    sequence: event.sequence,
    type: event.type,
    payload: event.payload,
    at: event.createdAt.toISOString(),
  }));
  await tx.query(
    `INSERT INTO webhook_deliveries (id, org_id, subscription_id, event_id, event_sequence, event_type, payload, status,
                                     attempts, replay_base, next_attempt_at, created_at, updated_at)
     SELECT gen_random_uuid(), e.org_id, sub.id, e.id, e.sequence, e.type, e.payload, 'pending', 0, 0, e.at, e.at, e.at
     FROM jsonb_to_recordset($1::jsonb) AS e(id uuid, org_id uuid, sequence bigint, type text, payload jsonb, at timestamptz)
     JOIN webhook_subscriptions sub
       ON sub.org_id = e.org_id AND sub.is_active AND (sub.event_types IS NULL OR e.type = ANY (sub.event_types))`,
    [JSON.stringify(rows)],
  );
}

/**
 * Queues a `webhook.test` delivery for one subscription, whatever its `event_types` filter, and
 * returns its id. It records no audit event: it changes nothing but the outbox.
 */
export async function enqueueTestDelivery(tx: Queryable, subscription: { id: string; orgId: string }, now: Date, requestedBy: string): Promise<string> {
  const id = randomUUID();
  const payload = {
    type: 'webhook.test',
    org_id: subscription.orgId,
    subscription_id: subscription.id,
    requested_by: requestedBy,
    occurred_at: now.toISOString(),
    details: { message: 'This is a test delivery from Countersign. It authorizes nothing.' },
  };
  await tx.query(
    `INSERT INTO webhook_deliveries (id, org_id, subscription_id, event_id, event_sequence, event_type, payload, status,
                                     attempts, replay_base, next_attempt_at, created_at, updated_at)
     VALUES ($1, $2, $3, NULL, NULL, 'webhook.test', $4::jsonb, 'pending', 0, 0, $5, $5, $5)`,
    [id, subscription.orgId, subscription.id, JSON.stringify(payload), now],
  );
  return id;
}
