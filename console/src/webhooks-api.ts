/**
 * The webhook calls the policies page makes: one endpoint, `POST /v1/webhooks`, the operation
 * named by `action` (shared/wire/webhooks.ts), scope webhooks:write for all of them. All go
 * through `json`, so the CSRF header goes along and a refusal carries the server's message.
 *
 *   list             the subscriptions (never a signing secret)
 *   list_deliveries  one subscription's deliveries, newest first, with every attempt; by status
 *   replay           a failed or dead-lettered delivery back to pending, due now
 */
import type { DeliveryStatus, WebhookDeliveryWire, WebhookSubscriptionWire } from '../../shared/wire/webhooks.js';
import { json } from './api';

export type { DeliveryStatus, WebhookDeliveryWire, WebhookSubscriptionWire };

const WEBHOOKS = '/v1/webhooks';

/** How many deliveries one page of the list shows. */
export const DELIVERY_PAGE = 20;

export async function listSubscriptions(signal?: AbortSignal): Promise<WebhookSubscriptionWire[]> {
  return (await json<{ subscriptions: WebhookSubscriptionWire[] }>(WEBHOOKS, { method: 'POST', body: { action: 'list' }, signal })).body.subscriptions;
}

export async function listDeliveries(
  subscriptionId: string,
  options: { status?: DeliveryStatus | undefined; cursor?: string | undefined; signal?: AbortSignal | undefined } = {},
): Promise<{ deliveries: WebhookDeliveryWire[]; nextCursor: string | null }> {
  const body = {
    action: 'list_deliveries',
    subscription_id: subscriptionId,
    limit: DELIVERY_PAGE,
    ...(options.status !== undefined ? { status: options.status } : {}),
    ...(options.cursor !== undefined ? { cursor: options.cursor } : {}),
  };
  const answer = (await json<{ deliveries: WebhookDeliveryWire[]; next_cursor: string | null }>(WEBHOOKS, { method: 'POST', body, signal: options.signal })).body;
  return { deliveries: answer.deliveries, nextCursor: answer.next_cursor };
}

export async function replayDelivery(deliveryId: string): Promise<WebhookDeliveryWire> {
  return (await json<{ delivery: WebhookDeliveryWire }>(WEBHOOKS, { method: 'POST', body: { action: 'replay', delivery_id: deliveryId } })).body.delivery;
}
