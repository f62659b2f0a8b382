/**
 * Webhook signatures, both sides: the authority signs each delivery with these functions and a
 * receiver checks it with `verifyWebhook`, so there is one definition of what is signed.
 *
 *   X-Service-Signature-256  sha256=<hex HMAC-SHA256(secret, timestamp + "." + raw body)>, keyed with
 *                            the whole signing secret (`whsec_…`) as UTF-8, timestamp = the
 *                            X-Service-Timestamp header (ISO 8601 UTC)
 *   webhook-signature        v1,<base64 HMAC-SHA256(key, id + "." + unix seconds + "." + raw body)>
 *                            (Standard Webhooks: key = the base64 after `whsec_`, id = webhook-id)
 *
 * A receiver verifies the raw bytes (before any JSON parsing), in constant time, and refuses a
 * timestamp outside its tolerance window; then drops duplicates by `X-Service-Delivery`.
 *
 * @example
 *   app.post('/hooks', async (req, res) => {
 *     const raw = await readRawBody(req);
 *     try {
 *       const delivery = verifyWebhook({ rawBody: raw, headers: req.headers, secret: process.env.WEBHOOK_SECRET! });
 *       if (!seen.has(delivery.delivery_id)) handle(delivery);
 *       res.statusCode = 204;
 *     } catch { res.statusCode = 401; }
 *     res.end();
 *   });
 */
import { createHmac, timingSafeEqual } from 'node:crypto';
import { WebhookDeliveryBody } from '../wire/webhooks.js';

export const WEBHOOK_HEADERS = {
  event: 'x-service-event',
  delivery: 'x-service-delivery',
  attempt: 'x-service-attempt',
  timestamp: 'x-service-timestamp',
  signature: 'x-service-signature-256',
  standardId: 'webhook-id',
  standardTimestamp: 'webhook-timestamp',
  standardSignature: 'webhook-signature',
} as const;

/** The `X-Service-Signature-256` header value for a timestamp header and raw body. */
export function serviceSignature(secret: string, timestamp: string, rawBody: Uint8Array | string): string {
  return `sha256=${createHmac('sha256', secret).update(`${timestamp}.`, 'utf8').update(rawBody).digest('hex')}`;
}

/** The Standard Webhooks key: the bytes the base64 after `whsec_` encodes. */
function standardKey(secret: string): Buffer {
  return Buffer.from(secret.startsWith('whsec_') ? secret.slice('whsec_'.length) : secret, 'base64');
}

/** The Standard Webhooks `webhook-signature` value (`v1,<base64>`). */
export function standardSignature(secret: string, id: string, unixSeconds: number, rawBody: Uint8Array | string): string {
  const digest = createHmac('sha256', standardKey(secret)).update(`${id}.${unixSeconds}.`, 'utf8').update(rawBody).digest('base64');
  return `v1,${digest}`;
}

/** Why a delivery was refused; answer 401 and do not process it. */
export class WebhookVerificationError extends Error {
  constructor(
    readonly reason: 'missing_header' | 'bad_signature' | 'stale_timestamp' | 'bad_timestamp' | 'bad_body',
    message: string,
  ) {
    super(message);
    this.name = 'WebhookVerificationError';
  }
}

export interface VerifyWebhookOptions {
  /** The request body exactly as received. */
  rawBody: Uint8Array | string;
  /** Request headers (Node's IncomingHttpHeaders, or any lower- or mixed-case record). */
  headers: Record<string, string | string[] | undefined>;
  /** The subscription's signing secret, `whsec_…`. */
  secret: string;
  /** How far the timestamp may be from now, either way; default 300 s. */
  toleranceSeconds?: number;
  /** The receiver's clock in ms; default Date.now(). */
  now?: number;
}

function header(headers: VerifyWebhookOptions['headers'], name: string): string | undefined {
  for (const [key, value] of Object.entries(headers)) {
    if (key.toLowerCase() === name) return Array.isArray(value) ? value[0] : value;
  }
  return undefined;
}

function constantTimeEqual(a: string, b: string): boolean {
  const left = Buffer.from(a, 'utf8');
  const right = Buffer.from(b, 'utf8');
  // Lengths of well-formed digests are public; only equal lengths reach the timed compare.
  return left.length === right.length && timingSafeEqual(left, right);
}

/**
 * Checks a delivery's `X-Service-Signature-256` against its raw body and `X-Service-Timestamp`,
 * refuses a timestamp outside the tolerance window, and returns the parsed body. Throws
 * `WebhookVerificationError` otherwise.
 */
export function verifyWebhook(options: VerifyWebhookOptions): WebhookDeliveryBody {
  const timestamp = header(options.headers, WEBHOOK_HEADERS.timestamp);
  const signature = header(options.headers, WEBHOOK_HEADERS.signature);
  if (timestamp === undefined || signature === undefined) {
    throw new WebhookVerificationError('missing_header', 'X-Service-Timestamp and X-Service-Signature-256 are required');
  }
  // Signature first: nothing about an unauthenticated request is worth interpreting.
  const expected = serviceSignature(options.secret, timestamp, options.rawBody);
  if (!constantTimeEqual(expected, signature.trim().toLowerCase())) {
    throw new WebhookVerificationError('bad_signature', 'the signature does not match the body and timestamp');
  }
  const sentAt = Date.parse(timestamp);
  if (!Number.isFinite(sentAt)) throw new WebhookVerificationError('bad_timestamp', 'X-Service-Timestamp is not an ISO 8601 time');
  const toleranceMs = (options.toleranceSeconds ?? 300) * 1000;
  if (Math.abs((options.now ?? Date.now()) - sentAt) > toleranceMs) {
    throw new WebhookVerificationError('stale_timestamp', 'the delivery timestamp is outside the tolerance window (replayed or clock skew)');
  }
  const text = typeof options.rawBody === 'string' ? options.rawBody : Buffer.from(options.rawBody).toString('utf8');
  let parsed: unknown;
  try {
    parsed = JSON.parse(text);
  } catch {
    throw new WebhookVerificationError('bad_body', 'the body is not JSON');
  }
  const body = WebhookDeliveryBody.safeParse(parsed);
  if (!body.success) throw new WebhookVerificationError('bad_body', 'the body is not a webhook delivery');
  return body.data;
}
