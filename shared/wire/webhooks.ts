/**
 * `POST /v1-webhooks` (also `/functions/v1/v1-webhooks`) on the wire: one endpoint, the operation
 * chosen by `action`, and the delivery a receiver gets. Scope `webhooks:write`.
 *
 * Every action answers 200. The bodies of the other actions:
 *   list            {subscriptions: [subscription, …]}          (no signing_secret)
 *   update          {subscription}                              (no signing_secret)
 *   delete          {deleted: true, id}
 *   rotate_secret   {subscription}                              (with the new signing_secret)
 *   list_deliveries {deliveries: [delivery with its attempts], next_cursor}
 *   replay          {delivery}                                  (status pending, due now)
 *
 * @example
 *   WebhookRequest.parse({ action: 'create', name: 'ops', url: 'https://hooks.example.com/cs' });
 *   WebhookDeliveryBody.parse(JSON.parse(rawBody));
 */
import { z } from 'zod';
import { EventType } from './events.js';

export const WEBHOOK_DEFAULTS = { max_attempts: 8, timeout_seconds: 15 } as const;
export const MAX_ATTEMPTS_RANGE = { min: 1, max: 20 } as const;
export const TIMEOUT_SECONDS_RANGE = { min: 1, max: 60 } as const;

/** Delivery statuses (docs/webhooks.md, "Retries and dead letters"): `failed` will be retried, `dead_lettered` will not. */
export const DELIVERY_STATUSES = ['pending', 'delivered', 'failed', 'dead_lettered'] as const;
export type DeliveryStatus = (typeof DELIVERY_STATUSES)[number];

/** An attempt is `in_flight` until its worker reports; `abandoned` when it never did (it stopped). */
export const ATTEMPT_OUTCOMES = ['in_flight', 'succeeded', 'failed', 'abandoned'] as const;

export const SIGNING_SECRET_PATTERN = /^whsec_[A-Za-z0-9+/]{43}=$/;

/** Postgres text cannot hold NUL; refusing it here keeps it a 400, never a database error. */
const noNul = (value: string): boolean => !value.includes('\u0000');
const Name = z.string().trim().min(1).max(200).refine(noNul, { message: 'must not contain NUL' });
const Url = z
  .string()
  .max(2048)
  .refine(noNul, { message: 'must not contain NUL' })
  .refine((value) => /^https?:\/\//i.test(value), { message: 'the url must begin with http:// or https://' })
  .refine((value) => URL.canParse(value), { message: 'not a valid URL' });
const EventTypes = z
  .array(EventType)
  .min(1)
  .max(EventType.options.length)
  .refine((types) => new Set(types).size === types.length, { message: 'event types must not repeat' })
  .nullable();
const MaxAttempts = z.number().int().min(MAX_ATTEMPTS_RANGE.min).max(MAX_ATTEMPTS_RANGE.max);
const TimeoutSeconds = z.number().int().min(TIMEOUT_SECONDS_RANGE.min).max(TIMEOUT_SECONDS_RANGE.max);
const Id = z.uuid({ message: 'not a webhook id' });

export const CreateWebhook = z
  .object({
    action: z.literal('create'),
    name: Name,
    url: Url,
    event_types: EventTypes.optional(),
    max_attempts: MaxAttempts.optional(),
    timeout_seconds: TimeoutSeconds.optional(),
    is_active: z.boolean().optional(),
  })
  .strict();

export const WebhookPatch = z
  .object({
    name: Name.optional(),
    url: Url.optional(),
    event_types: EventTypes.optional(),
    is_active: z.boolean().optional(),
    max_attempts: MaxAttempts.optional(),
    timeout_seconds: TimeoutSeconds.optional(),
  })
  .strict();
export type WebhookPatch = z.infer<typeof WebhookPatch>;

export const WebhookRequest = z.discriminatedUnion('action', [
  CreateWebhook,
  z.object({ action: z.literal('list') }).strict(),
  z.object({ action: z.literal('update'), id: Id, patch: WebhookPatch }).strict(),
  z.object({ action: z.literal('delete'), id: Id }).strict(),
  z.object({ action: z.literal('rotate_secret'), id: Id }).strict(),
  z.object({ action: z.literal('test'), id: Id }).strict(),
  z
    .object({
      action: z.literal('list_deliveries'),
      subscription_id: Id.optional(),
      status: z.enum(DELIVERY_STATUSES).optional(),
      limit: z.number().int().min(1).max(500).optional(),
      cursor: z.string().max(200).optional(),
    })
    .strict(),
  z.object({ action: z.literal('replay'), delivery_id: Id }).strict(),
]);
export type WebhookRequest = z.infer<typeof WebhookRequest>;

export const WebhookSubscriptionWire = z.object({
  id: z.string(),
  name: z.string(),
  url: z.string(),
  event_types: z.array(z.string()).nullable(),
  is_active: z.boolean(),
  max_attempts: z.number().int(),
  timeout_seconds: z.number().int(),
  /** Only in the answers to `create` and `rotate_secret`. */
  signing_secret: z.string().regex(SIGNING_SECRET_PATTERN).optional(),
  created_at: z.string(),
  updated_at: z.string(),
});
export type WebhookSubscriptionWire = z.infer<typeof WebhookSubscriptionWire>;

export const WebhookAttemptWire = z.object({
  attempt: z.number().int(),
  outcome: z.enum(ATTEMPT_OUTCOMES),
  status_code: z.number().int().nullable(),
  duration_ms: z.number().int().nullable(),
  error: z.string().nullable(),
  started_at: z.string(),
  finished_at: z.string().nullable(),
});

export const WebhookDeliveryWire = z.object({
  id: z.string(),
  subscription_id: z.string(),
  event_type: z.string(),
  /** The audit event delivered; null for a test delivery. */
  event_id: z.string().nullable(),
  status: z.enum(DELIVERY_STATUSES),
  attempts: z.number().int(),
  next_attempt_at: z.string().nullable(),
  last_status_code: z.number().int().nullable(),
  last_error: z.string().nullable(),
  delivered_at: z.string().nullable(),
  dead_lettered_at: z.string().nullable(),
  created_at: z.string(),
  updated_at: z.string(),
  /** Every attempt, first first. */
  history: z.array(WebhookAttemptWire),
});
export type WebhookDeliveryWire = z.infer<typeof WebhookDeliveryWire>;

export const WebhookResponse = z.union([
  z.object({ subscription: WebhookSubscriptionWire }),
  z.object({ subscriptions: z.array(WebhookSubscriptionWire) }),
  z.object({ deleted: z.literal(true), id: z.string() }),
  z.object({ queued: z.literal(true), delivery_id: z.string() }),
  z.object({ deliveries: z.array(WebhookDeliveryWire), next_cursor: z.string().nullable() }),
  z.object({ delivery: WebhookDeliveryWire }),
]);

/** The JSON body of a delivery (docs/webhooks.md). `payload` is the audit event's payload. */
export const WebhookDeliveryBody = z.object({
  event_type: z.string(),
  delivery_id: z.string(),
  organization_id: z.string(),
  subscription_id: z.string(),
  attempt: z.number().int().min(1),
  timestamp: z.string(),
  payload: z.record(z.string(), z.unknown()),
});
export type WebhookDeliveryBody = z.infer<typeof WebhookDeliveryBody>;
