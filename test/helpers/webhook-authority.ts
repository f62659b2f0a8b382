/**
 * The webhook tests' authority, receiver and worker (test/integration/webhooks*.test.ts): the
 * webhooks API as an organization's admin, an authority with a real receiver on loopback, a
 * worker run by hand on the authority's ManualClock, and the receiver's check of both signatures
 * from the raw bytes.
 *
 * @example
 *   withReceiver(t, backend, async ({ authority, hooks, receiver }) => {
 *     const subscription = await hooks.create({ name: 'ops', url: receiver.url });
 *     await hooks.evaluate();
 *     await testWorker(authority).runOnce();
 *     t.ok(signedWith(subscription.signing_secret, receiver.received[0]!));
 *   });
 */
import { createHmac } from 'node:crypto';
import type { Test } from 'tap';
import { readBootstrapPolicy } from '../../authority/orgs/bootstrap.js';
import { parseAuthorityConfig, type AuthorityConfigInput } from '../../authority/config.js';
import { deliveryAgent } from '../../authority/webhooks/targets.js';
import { startWebhookWorker, type WebhookWorker } from '../../authority/webhooks/worker.js';
import { createLogger } from '../../shared/logging.js';
import type { WebhookDeliveryWire } from '../../shared/wire/webhooks.js';
import { withTestAuthority, type TestAuthority } from './authority.js';
import type { AppBackend } from './backends.js';
import { startReceiver, type ReceivedRequest, type Receiver } from './webhook-receiver.js';

/** Deliveries to the receiver on loopback are allowed (the default refuses private targets). */
export const LOOPBACK: AuthorityConfigInput = { webhooks: { allow_private_targets: true } };
/** The example policy's demo action, which evaluates to allow with a permit. */
export const DEMO_ACTION = { action_type: 'demo.echo', actor_id: 'demo-agent', context: { environment: 'dev', target: { type: 'demo', id: 'hooks' } } };

/** The webhooks API (`POST /v1-webhooks` actions) and the calls that make events, as acme's admin. */
export function webhookApi(authority: TestAuthority) {
  const headers = { ...authority.bearer(authority.acmeAdmin), 'content-type': 'application/json' };
  const raw = (body: unknown, token?: string) =>
    authority.app.inject({ method: 'POST', url: '/v1-webhooks', headers: token ? { ...headers, authorization: `Bearer ${token}` } : headers, payload: JSON.stringify(body) });
  const ok = async (body: unknown) => {
    const response = await raw(body);
    if (response.statusCode !== 200) throw new Error(`${JSON.stringify(body)} answered ${response.statusCode}: ${response.body}`);
    return response.json();
  };
  return {
    raw,
    ok,
    create: async (fields: Record<string, unknown>) => (await ok({ action: 'create', ...fields })).subscription,
    deliveries: async (subscriptionId?: string): Promise<WebhookDeliveryWire[]> =>
      (await ok({ action: 'list_deliveries', ...(subscriptionId ? { subscription_id: subscriptionId } : {}) })).deliveries,
    evaluate: () => authority.app.inject({ method: 'POST', url: '/v1/evaluate', headers, payload: DEMO_ACTION }),
    putPolicy: async () => authority.app.inject({ method: 'PUT', url: '/v1/policies', headers, payload: { source: (await readBootstrapPolicy(undefined)).source, format: 'yaml' } }),
  };
}

/** An authority (LOOPBACK unless `config` says otherwise) with a real receiver on loopback, closed when `t` ends. */
export function withReceiver(
  t: Test,
  backend: AppBackend,
  fn: (context: { authority: TestAuthority; hooks: ReturnType<typeof webhookApi>; receiver: Receiver }) => Promise<void>,
  config: AuthorityConfigInput = LOOPBACK,
): Promise<void> {
  return withTestAuthority(
    t,
    backend,
    async (authority) => {
      const receiver = await startReceiver();
      t.teardown(() => receiver.close());
      await fn({ authority, hooks: webhookApi(authority), receiver });
    },
    config,
  );
}

/** A webhook worker on the authority's database and clock, run by hand (`runOnce`): no timer. */
export function testWorker(authority: TestAuthority, config: AuthorityConfigInput = LOOPBACK, extra: { resolve?: Parameters<typeof deliveryAgent>[0]['resolve'] } = {}): WebhookWorker {
  const webhooks = parseAuthorityConfig(config).webhooks;
  const dispatcher = extra.resolve ? deliveryAgent({ allowPrivate: webhooks.allow_private_targets, resolve: extra.resolve }) : undefined;
  return startWebhookWorker(
    { db: authority.backend.db, box: authority.secrets, clock: authority.clock, metrics: authority.metrics, config: webhooks, logger: createLogger({ name: 'webhooks', level: 'silent' }), ...(dispatcher ? { dispatcher } : {}) },
    { timer: false },
  );
}

const hmacHex = (secret: string, timestamp: string, raw: Buffer) => createHmac('sha256', secret).update(`${timestamp}.`).update(raw).digest('hex');

/** Recomputes both signatures from the raw bytes, as a receiver would. */
export function signedWith(secret: string, request: ReceivedRequest): boolean {
  const timestamp = request.headers['x-service-timestamp'] as string;
  const service = request.headers['x-service-signature-256'] === `sha256=${hmacHex(secret, timestamp, request.raw)}`;
  const id = request.headers['webhook-id'] as string;
  const unix = request.headers['webhook-timestamp'] as string;
  const key = Buffer.from(secret.slice('whsec_'.length), 'base64');
  const standard = request.headers['webhook-signature'] === `v1,${createHmac('sha256', key).update(`${id}.${unix}.`).update(request.raw).digest('base64')}`;
  return service && standard;
}
