/**
 * The webhook outbox: the seam through which every appended audit event will reach the
 * organization's webhook subscribers. Callers invoke it with the events they just appended,
 * inside the same transaction, so a delivery exists exactly when its event does.
 *
 * Today it does nothing. Issue 6 (webhooks) fills it: for each event it writes one delivery row
 * per matching active subscription (`event_types` null or containing the event's type) in the
 * caller's transaction (DESIGN.md "webhooks": deliveries are written in the same transaction as
 * the event), and workers claim them later with `FOR UPDATE SKIP LOCKED`. The payload of a
 * delivery is the event's `payload`.
 *
 * @example
 *   await db.transaction(async (tx) => {
 *     const appended = await appendAuditEvents(tx, events, now);
 *     await enqueueWebhookEvents(tx, appended);
 *   });
 */
import type { AuditEvent } from '../audit/types.js';
import type { Queryable } from '../store/db.js';

export async function enqueueWebhookEvents(_tx: Queryable, _events: AuditEvent[]): Promise<void> {
  // Intentionally empty until issue 6: no subscriptions exist yet, so there is nothing to deliver.
}
