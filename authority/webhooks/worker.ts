/**
 * The delivery worker: each pass claims due deliveries (deliveries.ts), POSTs each attempt to its
 * subscriber with the X-Service-* and the Standard Webhooks headers, and records the outcome. Only a
 * 2xx answer delivers; a 3xx (redirects are not followed), any other status, a network error or
 * the subscription's timeout is a failed attempt, retried on the configured schedule with jitter
 * until the round's `max_attempts` is used, then dead-lettered. Response bodies are read only up
 * to a small cap. Any number of workers, in any number of processes, may run on one database.
 *
 * @example
 *   const worker = startWebhookWorker({ db, box, clock, metrics, config: config.webhooks, logger });
 *   await worker.stop(); // waits for the pass in flight, then closes the HTTP agent
 */
import { performance } from 'node:perf_hooks';
import type { Logger } from 'pino';
import { request, type Dispatcher } from 'undici';
import { serviceSignature, standardSignature } from '../../shared/client/webhooks.js';
import { ATTR, SPAN, type SpanAttributes } from '../../shared/telemetry/attributes.js';
import { tracing, type Tracing } from '../../shared/telemetry/index.js';
import type { WebhooksConfig } from '../config.js';
import type { AuthorityMetrics } from '../metrics.js';
import { runEvery, type PeriodicTask } from '../periodic.js';
import type { SecretBox } from '../signing/secret-box.js';
import type { Db } from '../store/db.js';
import type { Clock } from '../time.js';
import { claimDueDeliveries, recordAttempt, type ClaimedAttempt } from './deliveries.js';
import { openSecret } from './subscriptions.js';
import { deliveryAgent, literalTargetProblem } from './targets.js';

export interface WebhookWorkerDeps {
  db: Db;
  box: SecretBox;
  clock: Clock;
  metrics: Pick<AuthorityMetrics, 'webhookDeliveries' | 'webhookDeadLetters'>;
  config: WebhooksConfig;
  /** The HTTP agent; default: deliveryAgent() for the configuration. */
  dispatcher?: Dispatcher;
  /** [0, 1) for the jitter; default Math.random. */
  random?: () => number;
}

/** How much of a response body is read (for the error message); the rest is discarded. */
export const RESPONSE_BODY_CAP_BYTES = 1024;

/**
 * The wait before the attempt after attempt `round` of a round: the schedule's entry (its last
 * entry when the round is longer), ±`jitter` (0.2 = ±20 %).
 */
export function retryDelayMs(config: Pick<WebhooksConfig, 'retry_schedule_ms' | 'jitter'>, round: number, random: () => number = Math.random): number {
  const schedule = config.retry_schedule_ms;
  const base = schedule[Math.min(round, schedule.length) - 1] ?? schedule[0] ?? 0;
  return Math.max(0, Math.round(base * (1 + config.jitter * (2 * random() - 1))));
}

export interface SendOutcome {
  ok: boolean;
  statusCode: number | null;
  durationMs: number;
  error: string | null;
}

/** The exact bytes and headers of one attempt, signed at `sentAt`. */
export function buildAttemptRequest(claimed: ClaimedAttempt, secret: string, sentAt: Date): { body: string; headers: Record<string, string> } {
  const timestamp = sentAt.toISOString();
  const body = JSON.stringify({
    event_type: claimed.eventType,
    delivery_id: claimed.deliveryId,
    organization_id: claimed.orgId,
    subscription_id: claimed.subscriptionId,
    attempt: claimed.attempt,
    timestamp,
    payload: claimed.payload,
  });
  // Standard Webhooks: a message id that is the same on every attempt of a delivery.
  const unixSeconds = Math.floor(sentAt.getTime() / 1000);
  return {
    body,
    headers: {
      'content-type': 'application/json',
      'user-agent': 'Countersign-Webhooks/1',
      'x-service-event': claimed.eventType,
      'x-service-delivery': claimed.deliveryId,
      'x-service-attempt': String(claimed.attempt),
      'x-service-timestamp': timestamp,
      'x-service-signature-256': serviceSignature(secret, timestamp, body),
      'webhook-id': claimed.deliveryId,
      'webhook-timestamp': String(unixSeconds),
      'webhook-signature': standardSignature(secret, claimed.deliveryId, unixSeconds, body),
    },
  };
}

/** Reads at most the cap, then drops the connection's remaining body. */
async function readCapped(body: Dispatcher.ResponseData['body']): Promise<string> {
  const chunks: Buffer[] = [];
  let size = 0;
  try {
    for await (const chunk of body) {
      const buffer = Buffer.from(chunk as Uint8Array);
      chunks.push(buffer.subarray(0, RESPONSE_BODY_CAP_BYTES - size));
      size += buffer.length;
      if (size >= RESPONSE_BODY_CAP_BYTES) break;
    }
  } catch {
    // A body that fails midway changes nothing: the status code decided the attempt.
  } finally {
    if (!body.destroyed) body.destroy();
  }
  return Buffer.concat(chunks).toString('utf8');
}

/** Printable, short: what list_deliveries shows of a receiver's answer or a network error. */
const tidy = (text: string): string => text.replace(/[\u0000-\u001f\u007f]+/g, ' ').trim().slice(0, 300);

function describe(error: unknown, timeoutSeconds: number): string {
  const err = error as { name?: string; code?: string; message?: string; cause?: { code?: string; message?: string } };
  if (err.name === 'TimeoutError' || err.name === 'AbortError' || err.code === 'UND_ERR_HEADERS_TIMEOUT' || err.code === 'UND_ERR_BODY_TIMEOUT') {
    return `no answer within the timeout of ${timeoutSeconds} s`;
  }
  const code = err.code ?? err.cause?.code;
  return tidy(`${code ? `${code}: ` : ''}${err.message ?? err.cause?.message ?? String(error)}`);
}

/**
 * Sends one claimed attempt. Never throws: every failure is an outcome to record. With tracing on,
 * in a CLIENT span of its own trace (the worker runs apart from the request that caused the
 * event), whose context the receiver gets as `traceparent`. The span names the receiver's host and
 * port only: a webhook URL's path or query often holds a secret.
 */
export function sendAttempt(deps: Pick<WebhookWorkerDeps, 'box' | 'clock' | 'config'>, dispatcher: Dispatcher, claimed: ClaimedAttempt): Promise<SendOutcome> {
  const traced = tracing;
  if (traced === null) return send(deps, dispatcher, claimed, undefined);
  return traced.inSpan(SPAN.webhookDelivery, () => send(deps, dispatcher, claimed, traced), {
    root: true,
    kind: 'client',
    attributes: {
      [ATTR.httpMethod]: 'POST',
      ...receiverOf(claimed.url),
      [ATTR.webhookDeliveryId]: claimed.deliveryId,
      [ATTR.webhookEventType]: claimed.eventType,
      [ATTR.webhookAttempt]: claimed.attempt,
    },
    after: (outcome) => ({ [ATTR.httpStatus]: outcome.statusCode ?? undefined, [ATTR.webhookResult]: outcome.ok ? 'delivered' : 'failed' }),
    failure: (outcome) => (outcome.ok ? undefined : outcome.statusCode !== null ? String(outcome.statusCode) : 'WEBHOOK_NOT_DELIVERED'),
  });
}

/** server.address and server.port of a receiver's URL; nothing when it does not parse. */
function receiverOf(url: string): SpanAttributes {
  try {
    const parsed = new URL(url);
    return { [ATTR.serverAddress]: parsed.hostname.replace(/^\[|\]$/g, ''), [ATTR.serverPort]: Number(parsed.port || (parsed.protocol === 'https:' ? 443 : 80)) };
  } catch {
    return {};
  }
}

async function send(deps: Pick<WebhookWorkerDeps, 'box' | 'clock' | 'config'>, dispatcher: Dispatcher, claimed: ClaimedAttempt, traced: Tracing | undefined): Promise<SendOutcome> {
  const started = performance.now();
  const elapsed = () => Math.round(performance.now() - started);
  const refused = literalTargetProblem(claimed.url, deps.config.allow_private_targets);
  if (refused) return { ok: false, statusCode: null, durationMs: 0, error: refused };
  const timeoutMs = claimed.timeoutSeconds * 1000;
  try {
    const { body, headers } = buildAttemptRequest(claimed, openSecret(deps.box, claimed), new Date(deps.clock.now()));
    // Outside the signed bytes (the signatures cover the body), so adding it changes no signature.
    traced?.inject(headers);
    const response = await request(claimed.url, {
      method: 'POST',
      headers,
      body,
      dispatcher,
      headersTimeout: timeoutMs,
      bodyTimeout: timeoutMs,
      signal: AbortSignal.timeout(timeoutMs),
    });
    const excerpt = await readCapped(response.body);
    const ok = response.statusCode >= 200 && response.statusCode < 300;
    const error = ok ? null : tidy(`the receiver answered ${response.statusCode}${excerpt ? `: ${excerpt}` : ''}`);
    return { ok, statusCode: response.statusCode, durationMs: elapsed(), error };
  } catch (error) {
    return { ok: false, statusCode: null, durationMs: elapsed(), error: describe(error, claimed.timeoutSeconds) };
  }
}

export interface PassResult {
  sent: number;
  delivered: number;
  failed: number;
  deadLettered: number;
}

/** One pass: claim what is due, send it all concurrently, record every outcome. */
export async function deliverDueWebhooks(deps: WebhookWorkerDeps, dispatcher: Dispatcher): Promise<PassResult> {
  const claimed = await claimDueDeliveries(deps.db, {
    now: new Date(deps.clock.now()),
    limit: deps.config.batch_size,
    leaseMarginMs: deps.config.lease_margin_ms,
  });
  const result: PassResult = { sent: claimed.attempts.length, delivered: 0, failed: 0, deadLettered: claimed.deadLettered };
  deps.metrics.webhookDeadLetters.inc(claimed.deadLettered);
  await Promise.all(
    claimed.attempts.map(async (attempt) => {
      const outcome = await sendAttempt(deps, dispatcher, attempt);
      const status = await recordAttempt(deps.db, {
        claimed: attempt,
        ...outcome,
        finishedAt: new Date(deps.clock.now()),
        retryDelayMs: retryDelayMs(deps.config, attempt.round, deps.random),
      });
      deps.metrics.webhookDeliveries.inc({ result: outcome.ok ? 'delivered' : 'failed' });
      if (outcome.ok) result.delivered += 1;
      else result.failed += 1;
      if (status === 'dead_lettered') {
        result.deadLettered += 1;
        deps.metrics.webhookDeadLetters.inc();
      }
    }),
  );
  return result;
}

/** A running worker: `runOnce` for a pass on demand (tests), `stop` ends it and closes its agent. */
export interface WebhookWorker extends PeriodicTask {
  runOnce(): Promise<PassResult>;
}

/** Runs a pass every `worker_interval_ms` (see runEvery), logging failures: the next tick retries. */
export function startWebhookWorker(deps: WebhookWorkerDeps & { logger: Pick<Logger, 'error'> }, options: { timer?: boolean } = {}): WebhookWorker {
  const owned = deps.dispatcher === undefined ? deliveryAgent({ allowPrivate: deps.config.allow_private_targets }) : null;
  const dispatcher = deps.dispatcher ?? (owned as Dispatcher);
  const runOnce = () => deliverDueWebhooks(deps, dispatcher);
  const task =
    options.timer === false
      ? null
      : runEvery(deps.config.worker_interval_ms, () =>
          runOnce().then(
            () => undefined,
            (error: unknown) => deps.logger.error({ err: error }, 'webhook delivery pass failed; retrying on the next tick'),
          ),
        );
  return {
    runOnce,
    async stop() {
      await task?.stop();
      await owned?.close();
    },
  };
}
