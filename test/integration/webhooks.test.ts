/**
 * Webhooks through the real app and a real receiver on loopback: subscriptions (validation,
 * secrets sealed at rest), the outbox (same transaction as the event, the event filter, test
 * deliveries), signatures recomputed from the raw bytes, retries on the configured schedule,
 * dead letters and replay, crash safety, two workers, secret rotation and the private-address
 * refusal. The clock is a ManualClock; nothing sleeps. Runs on PGlite + the in-process store, and
 * on Postgres + Redis when they are available.
 */
import { createHmac } from 'node:crypto';
import t, { type Test } from 'tap';
import { readBootstrapPolicy } from '../../authority/orgs/bootstrap.js';
import { parseAuthorityConfig, type AuthorityConfigInput } from '../../authority/config.js';
import { drainVerificationRecords } from '../../authority/verifications/drain.js';
import { claimDueDeliveries } from '../../authority/webhooks/deliveries.js';
import { deliveryAgent } from '../../authority/webhooks/targets.js';
import { sendAttempt, startWebhookWorker, type WebhookWorker } from '../../authority/webhooks/worker.js';
import { verifyWebhook } from '../../shared/client/webhooks.js';
import { createLogger } from '../../shared/logging.js';
import { ErrorEnvelope } from '../../shared/wire/envelope.js';
import { verificationStream } from '../../shared/permits/store-keys.js';
import { verificationRecordFields, type VerificationRecord } from '../../shared/wire/verification-records.js';
import { WebhookDeliveryBody, type WebhookDeliveryWire } from '../../shared/wire/webhooks.js';
import { withTestAuthority, type TestAuthority } from '../helpers/authority.js';
import { appBackends, realServersMissing, type AppBackend } from '../helpers/backends.js';
import { deadUrl } from '../helpers/loopback.js';
import { startReceiver, type ReceivedRequest, type Receiver } from '../helpers/webhook-receiver.js';

const LOOPBACK: AuthorityConfigInput = { webhooks: { allow_private_targets: true } };
const demo = { action_type: 'demo.echo', actor_id: 'demo-agent', context: { environment: 'dev', target: { type: 'demo', id: 'hooks' } } };

function api(authority: TestAuthority) {
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
    evaluate: () => authority.app.inject({ method: 'POST', url: '/v1/evaluate', headers, payload: demo }),
    putPolicy: async () => authority.app.inject({ method: 'PUT', url: '/v1/policies', headers, payload: { source: (await readBootstrapPolicy(undefined)).source, format: 'yaml' } }),
  };
}

/** An authority (LOOPBACK unless `config` says otherwise) with a real receiver on loopback, closed when `t` ends. */
function withReceiver(
  t: Test,
  backend: AppBackend,
  fn: (context: { authority: TestAuthority; hooks: ReturnType<typeof api>; receiver: Receiver }) => Promise<void>,
  config: AuthorityConfigInput = LOOPBACK,
): Promise<void> {
  return withTestAuthority(
    t,
    backend,
    async (authority) => {
      const receiver = await startReceiver();
      t.teardown(() => receiver.close());
      await fn({ authority, hooks: api(authority), receiver });
    },
    config,
  );
}

function worker(authority: TestAuthority, config: AuthorityConfigInput = LOOPBACK, extra: { resolve?: Parameters<typeof deliveryAgent>[0]['resolve'] } = {}): WebhookWorker {
  const webhooks = parseAuthorityConfig(config).webhooks;
  const dispatcher = extra.resolve ? deliveryAgent({ allowPrivate: webhooks.allow_private_targets, resolve: extra.resolve }) : undefined;
  return startWebhookWorker(
    { db: authority.backend.db, box: authority.secrets, clock: authority.clock, metrics: authority.metrics, config: webhooks, logger: createLogger({ name: 'webhooks', level: 'silent' }), ...(dispatcher ? { dispatcher } : {}) },
    { timer: false },
  );
}

const hmacHex = (secret: string, timestamp: string, raw: Buffer) => createHmac('sha256', secret).update(`${timestamp}.`).update(raw).digest('hex');

/** Recomputes both signatures from the raw bytes, as a receiver would. */
function signedWith(secret: string, request: ReceivedRequest): boolean {
  const timestamp = request.headers['x-service-timestamp'] as string;
  const spec = request.headers['x-service-signature-256'] === `sha256=${hmacHex(secret, timestamp, request.raw)}`;
  const id = request.headers['webhook-id'] as string;
  const unix = request.headers['webhook-timestamp'] as string;
  const key = Buffer.from(secret.slice('whsec_'.length), 'base64');
  const standard = request.headers['webhook-signature'] === `v1,${createHmac('sha256', key).update(`${id}.${unix}.`).update(request.raw).digest('base64')}`;
  return spec && standard;
}

for (const backend of appBackends()) {
  t.test(`subscriptions: create, validate, list, update, rotate, delete on ${backend.name}`, (t) =>
    withTestAuthority(
      t,
      backend,
      async (authority) => {
        const hooks = api(authority);
        const created = await hooks.create({ name: 'ops', url: 'https://hooks.example.com/cs' });
        t.match(created, { name: 'ops', url: 'https://hooks.example.com/cs', event_types: null, is_active: true, max_attempts: 8, timeout_seconds: 15 }, 'defaults as applied');
        t.match(created.signing_secret, /^whsec_[A-Za-z0-9+/]{43}=$/, 'create returns the signing secret');
        const [stored] = await authority.backend.db.query<{ secret_sealed: string }>('SELECT secret_sealed FROM webhook_subscriptions WHERE id = $1', [created.id]);
        t.notOk(stored?.secret_sealed.includes(created.signing_secret.slice(6)), 'the secret is not stored in the clear');
        t.equal(authority.secrets.open(stored?.secret_sealed as string).toString(), created.signing_secret, 'it is sealed with the secret box');

        const bad = async (body: Record<string, unknown>, status: number, code: string, label: string) => {
          const response = await hooks.raw(body);
          t.equal(response.statusCode, status, label);
          t.equal(ErrorEnvelope.parse(response.json()).error, code, `${label}: code`);
        };
        await bad({ action: 'create', name: 'ops', url: 'https://other.example.com/' }, 409, 'conflict', 'a duplicate name is 409');
        await bad({ action: 'create', name: 'ftp', url: 'ftp://hooks.example.com/' }, 400, 'invalid_request', 'a URL without http(s) is 400');
        await bad({ action: 'create', url: 'https://hooks.example.com/' }, 400, 'invalid_request', 'name is required');
        await bad({ action: 'create', name: 'x', url: 'https://a.example.com/', max_attempts: 0 }, 400, 'invalid_request', 'max_attempts below 1');
        await bad({ action: 'create', name: 'x', url: 'https://a.example.com/', timeout_seconds: 61 }, 400, 'invalid_request', 'timeout_seconds above 60');
        await bad({ action: 'create', name: 'x', url: 'https://a.example.com/', event_types: ['no.such'] }, 400, 'invalid_request', 'unknown event types');
        await bad({ action: 'create', name: 'x', url: 'http://127.0.0.1:9/' }, 400, 'invalid_request', 'a loopback target is refused by default');
        await bad({ action: 'create', name: 'x', url: 'http://169.254.169.254/latest' }, 400, 'invalid_request', 'a link-local target is refused by default');
        await bad({ action: 'create', name: 'x', url: 'http://localhost.:8080/' }, 400, 'invalid_request', 'localhost is refused by default');
        await bad({ action: 'create', name: 'x', url: 'http://[::ffff:10.0.0.1]/' }, 400, 'invalid_request', 'a mapped private IPv4 is refused');
        await bad({ action: 'frobnicate' }, 400, 'invalid_request', 'an unknown action is 400');
        await bad({ action: 'update', id: created.id, patch: { url: 'http://10.1.2.3/' } }, 400, 'invalid_request', 'updating to a private target is refused');
        await bad({ action: 'delete', id: '00000000-0000-4000-8000-000000000000' }, 404, 'not_found', 'an unknown subscription is 404');
        const foreign = await api(authority).raw({ action: 'rotate_secret', id: created.id }, authority.globexAdmin);
        t.equal(foreign.statusCode, 404, "another organization's subscription is 404");
        const scopeless = await hooks.raw({ action: 'list' }, await authority.key(['audit:read']));
        t.equal(scopeless.statusCode, 403, 'webhooks:write is required');

        authority.clock.advance(1); // lists are ordered by creation time
        const second = await hooks.create({ name: 'audit', url: 'https://b.example.com/', event_types: ['policy.updated'], max_attempts: 3, timeout_seconds: 5, is_active: false });
        t.match(second, { event_types: ['policy.updated'], max_attempts: 3, timeout_seconds: 5, is_active: false });
        const listed = (await hooks.ok({ action: 'list' })).subscriptions;
        t.same(listed.map((s: { name: string }) => s.name), ['ops', 'audit']);
        t.ok(listed.every((s: Record<string, unknown>) => s.signing_secret === undefined), 'list never shows a secret');
        await bad({ action: 'update', id: second.id, patch: { name: 'ops' } }, 409, 'conflict', 'renaming onto an existing name is 409');
        const updated = (await hooks.ok({ action: 'update', id: second.id, patch: { event_types: null, is_active: true } })).subscription;
        t.match(updated, { name: 'audit', event_types: null, is_active: true, max_attempts: 3 }, 'update changes only what the patch names');
        t.equal(updated.signing_secret, undefined, 'update shows no secret');
        const rotated = (await hooks.ok({ action: 'rotate_secret', id: created.id })).subscription;
        t.not(rotated.signing_secret, created.signing_secret, 'rotate_secret issues a new secret');
        t.same(await hooks.ok({ action: 'delete', id: second.id }), { deleted: true, id: second.id });
        t.same((await hooks.ok({ action: 'list' })).subscriptions.map((s: { id: string }) => s.id), [created.id]);
        const functionStyle = await authority.app.inject({ method: 'POST', url: '/functions/v1/v1-webhooks', headers: { ...authority.bearer(authority.acmeAdmin), 'content-type': 'application/json' }, payload: { action: 'list' } });
        t.equal(functionStyle.statusCode, 200, 'also served at /functions/v1/v1-webhooks');
      },
      {},
    ),
  );

  t.test(`signed deliveries reach a real receiver, filtered by event type, on ${backend.name}`, (t) =>
    withReceiver(t, backend, async ({ authority, hooks, receiver }) => {
      const all = await hooks.create({ name: 'all', url: `${receiver.url}?to=all` });
      const policyOnly = await hooks.create({ name: 'policy', url: `${receiver.url}?to=policy`, event_types: ['policy.updated'] });
      await hooks.create({ name: 'paused', url: `${receiver.url}?to=paused`, is_active: false });
      const run = worker(authority);
      t.teardown(() => run.stop());

      t.equal((await hooks.evaluate()).json().decision, 'allow');
      t.equal((await hooks.putPolicy()).statusCode, 200);
      const sentAt = new Date(authority.clock.now()).toISOString();
      const pass = await run.runOnce();
      t.equal(pass.delivered, 4, 'evaluation.decided + permit.issued + policy.updated to "all", policy.updated to "policy"');
      const to = (name: string) => receiver.received.filter((request) => String(request.json.subscription_id) === (name === 'all' ? all.id : policyOnly.id));
      t.same(to('all').map((r) => r.json.event_type).sort(), ['evaluation.decided', 'permit.issued', 'policy.updated']);
      t.same(to('policy').map((r) => r.json.event_type), ['policy.updated'], 'the filter holds');
      t.notOk(receiver.received.some((r) => String(r.json.subscription_id) === '' || r.headers['x-service-event'] === undefined), 'every request carries its event header');

      for (const request of receiver.received) {
        const secret = request.json.subscription_id === all.id ? all.signing_secret : policyOnly.signing_secret;
        t.ok(signedWith(secret, request), `${request.json.event_type}: both signatures recompute from the raw bytes`);
        const body = WebhookDeliveryBody.parse(request.json);
        t.equal(request.headers['x-service-event'], body.event_type);
        t.equal(request.headers['x-service-delivery'], body.delivery_id);
        t.equal(request.headers['webhook-id'], body.delivery_id);
        t.equal(request.headers['x-service-attempt'], '1');
        t.equal(body.attempt, 1);
        t.equal(request.headers['x-service-timestamp'], sentAt, 'the timestamp is the send time');
        t.equal(body.timestamp, sentAt);
        t.equal(request.headers['webhook-timestamp'], String(Math.floor(Date.parse(sentAt) / 1000)));
        t.equal(body.organization_id, authority.acme.id);
        t.match(body.payload, { type: body.event_type, org_id: authority.acme.id }, 'the payload is the audit event payload');
        t.same(verifyWebhook({ rawBody: request.raw, headers: request.headers as Record<string, string>, secret, now: authority.clock.now() }), body, 'the client helper accepts it');
      }
      const [event] = await authority.backend.db.query<{ payload: unknown }>("SELECT payload FROM audit_events WHERE org_id = $1 AND type = 'policy.updated' ORDER BY sequence DESC LIMIT 1", [authority.acme.id]);
      t.same(to('policy')[0]?.json.payload, event?.payload, 'byte-for-byte the chained payload');

      const sample = to('all')[0] as ReceivedRequest;
      const reject = (options: Partial<Parameters<typeof verifyWebhook>[0]>, reason: string) =>
        t.throws(() => verifyWebhook({ rawBody: sample.raw, headers: sample.headers as Record<string, string>, secret: all.signing_secret, now: authority.clock.now(), ...options }), { name: 'WebhookVerificationError', reason }, reason);
      reject({ now: authority.clock.now() + 301_000 }, 'stale_timestamp');
      reject({ rawBody: Buffer.concat([sample.raw, Buffer.from(' ')]) }, 'bad_signature');
      reject({ secret: policyOnly.signing_secret }, 'bad_signature');
      reject({ headers: { ...sample.headers, 'x-service-signature-256': undefined } }, 'missing_header');

      // test ignores the filter, and is signed like a real delivery.
      receiver.received.length = 0;
      authority.clock.advance(1); // list_deliveries is newest first
      const queued = await hooks.ok({ action: 'test', id: policyOnly.id });
      t.match(queued, { queued: true, delivery_id: /^[0-9a-f-]{36}$/ });
      await run.runOnce();
      t.equal(receiver.received.length, 1);
      t.equal(receiver.received[0]?.json.event_type, 'webhook.test');
      t.equal(receiver.received[0]?.headers['x-service-delivery'], queued.delivery_id);
      t.ok(signedWith(policyOnly.signing_secret, receiver.received[0] as ReceivedRequest));
      t.notOk(receiver.received.some((r) => String(r.raw).includes('paused')), 'an inactive subscription gets nothing');
      t.equal((await authority.metrics.registry.getSingleMetricAsString('countersign_webhook_deliveries_total')).includes('result="delivered"} 5'), true, 'deliveries are counted');

      const listed = await hooks.deliveries(policyOnly.id);
      t.same(listed.map((d) => [d.event_type, d.status, d.attempts]), [['webhook.test', 'delivered', 1], ['policy.updated', 'delivered', 1]], 'list_deliveries, newest first');
      t.match(listed[0]?.history, [{ attempt: 1, outcome: 'succeeded', status_code: 204, error: null }]);
    }),
  );

  t.test(`failures retry on the schedule, dead-letter, and replay delivers on ${backend.name}`, (t) =>
    withReceiver(t, backend, async ({ authority, hooks, receiver }) => {
      const config = { webhooks: { allow_private_targets: true, retry_schedule_ms: [10_000, 60_000], jitter: 0.2 } };
      const hook = await hooks.create({ name: 'flaky', url: receiver.url, max_attempts: 3, timeout_seconds: 1 });
      const run = worker(authority, config);
      t.teardown(() => run.stop());
      const { delivery_id: id } = await hooks.ok({ action: 'test', id: hook.id });
      const delivery = async () => (await hooks.deliveries()).find((d) => d.id === id) as WebhookDeliveryWire;
      const dueIn = async () => Date.parse((await delivery()).next_attempt_at as string) - authority.clock.now();

      receiver.mode = 'fail';
      t.match(await run.runOnce(), { sent: 1, failed: 1 }, 'attempt 1: the receiver answers 500');
      t.match(await delivery(), { status: 'failed', attempts: 1, last_status_code: 500 });
      const first = await dueIn();
      t.ok(first >= 8_000 && first <= 12_000, `retry after 10 s ± 20 % (${first} ms)`);
      t.match(await run.runOnce(), { sent: 0 }, 'nothing is sent before it is due');

      receiver.mode = 'hang';
      authority.clock.advance(first);
      const hung = receiver.next();
      t.match(await run.runOnce(), { sent: 1, failed: 1 }, 'attempt 2: the receiver never answers within the 1 s timeout');
      t.equal((await hung).headers['x-service-attempt'], '2');
      const second = await dueIn();
      t.ok(second >= 48_000 && second <= 72_000, `retry after 60 s ± 20 % (${second} ms)`);

      await hooks.ok({ action: 'update', id: hook.id, patch: { url: await deadUrl() } });
      authority.clock.advance(second);
      t.match(await run.runOnce(), { sent: 1, failed: 1, deadLettered: 1 }, 'attempt 3: connection refused, the last of max_attempts');
      const dead = await delivery();
      t.match(dead, { status: 'dead_lettered', attempts: 3, next_attempt_at: null });
      t.same(dead.history.map((a) => [a.attempt, a.outcome, a.status_code]), [[1, 'failed', 500], [2, 'failed', null], [3, 'failed', null]], 'each attempt is in the history');
      t.match(dead.history[0]?.error, /^the receiver answered 500: receiver is down x+$/);
      t.ok((dead.history[0]?.error as string).length <= 300, 'a response body is read only up to a cap');
      t.match(dead.history[1]?.error, /timeout of 1 s/);
      t.match(dead.history[2]?.error, /ECONNREFUSED/);
      t.ok(dead.history.every((a) => typeof a.duration_ms === 'number' && a.started_at && a.finished_at));
      authority.clock.advance(10 * 3_600_000);
      t.match(await run.runOnce(), { sent: 0 }, 'a dead letter is not retried automatically');
      t.match(await authority.metrics.registry.getSingleMetricAsString('countersign_webhook_dead_letters_total'), /countersign_webhook_dead_letters_total 1/);

      const again = await hooks.raw({ action: 'replay', delivery_id: '00000000-0000-4000-8000-000000000000' });
      t.equal(again.statusCode, 404, 'replay of an unknown delivery is 404');
      await hooks.ok({ action: 'update', id: hook.id, patch: { url: receiver.url } });
      receiver.mode = 'ok';
      const replayed = (await hooks.ok({ action: 'replay', delivery_id: id })).delivery;
      t.match(replayed, { status: 'pending', attempts: 3, dead_lettered_at: null });
      t.match(await run.runOnce(), { delivered: 1 }, 'replay: the next run sends it again');
      t.match(await delivery(), { status: 'delivered', attempts: 4, last_status_code: 204 });
      t.equal(receiver.received.at(-1)?.headers['x-service-attempt'], '4', 'attempt numbers continue after a replay');
      t.equal(receiver.received.at(-1)?.headers['x-service-delivery'], id);
      const conflict = await hooks.raw({ action: 'replay', delivery_id: id });
      t.equal(conflict.statusCode, 409, 'a delivered delivery cannot be replayed');

      // A redirect is not followed: it is a failed attempt.
      receiver.mode = 'redirect';
      const { delivery_id: redirected } = await hooks.ok({ action: 'test', id: hook.id });
      await run.runOnce();
      t.equal(receiver.received.filter((r) => r.json.delivery_id === redirected).length, 1, 'the redirect target is never asked');
      t.match((await hooks.deliveries()).find((d) => d.id === redirected), { status: 'failed', last_status_code: 302 });
    }),
  );

  t.test(`a worker that stops mid-delivery: sent again after its lease, same delivery id, on ${backend.name}`, (t) =>
    withReceiver(t, backend, async ({ authority, hooks, receiver }) => {
      const hook = await hooks.create({ name: 'crash', url: receiver.url, timeout_seconds: 5 });
      const { delivery_id: id } = await hooks.ok({ action: 'test', id: hook.id });
      const webhooks = parseAuthorityConfig(LOOPBACK).webhooks;

      // The first worker claims the attempt and sends it, then dies before recording anything.
      const claimed = await claimDueDeliveries(authority.backend.db, { now: new Date(authority.clock.now()), limit: 10, leaseMarginMs: webhooks.lease_margin_ms });
      t.equal(claimed.attempts.length, 1);
      const agent = deliveryAgent({ allowPrivate: true });
      await sendAttempt({ box: authority.secrets, clock: authority.clock, config: webhooks }, agent, claimed.attempts[0]!);
      await agent.close();
      t.equal(receiver.received.length, 1, 'the receiver got attempt 1; its outcome was never recorded');

      const restarted = worker(authority);
      t.teardown(() => restarted.stop());
      t.match(await restarted.runOnce(), { sent: 0 }, 'within the lease, the claimed attempt is not sent again');
      authority.clock.advance(5_000 + webhooks.lease_margin_ms);
      t.match(await restarted.runOnce(), { sent: 1, delivered: 1 }, 'after the lease, the restarted worker sends it');
      t.equal(receiver.received.length, 2, 'at least once: a duplicate arrived');
      t.same(receiver.received.map((r) => r.headers['x-service-delivery']), [id, id], 'the duplicate carries the same X-Service-Delivery');
      t.same(receiver.received.map((r) => r.headers['x-service-attempt']), ['1', '2']);
      const [delivery] = await hooks.deliveries();
      t.same(delivery?.history.map((a) => a.outcome), ['abandoned', 'succeeded'], 'the lost attempt is recorded as abandoned');
      t.equal(delivery?.status, 'delivered');
    }),
  );

  t.test(`two workers on one database never send the same attempt twice on ${backend.name}`, (t) =>
    withReceiver(t, backend, async ({ authority, hooks, receiver }) => {
      const hook = await hooks.create({ name: 'busy', url: receiver.url });
      const ids = new Set<string>();
      for (let i = 0; i < 24; i++) ids.add((await hooks.ok({ action: 'test', id: hook.id })).delivery_id);
      const config = { webhooks: { allow_private_targets: true, batch_size: 5 } };
      const [a, b] = [worker(authority, config), worker(authority, config)];
      t.teardown(async () => {
        await a.stop();
        await b.stop();
      });
      for (let round = 0; round < 6; round++) await Promise.all([a.runOnce(), b.runOnce(), a.runOnce(), b.runOnce()]);
      const sent = receiver.received.map((r) => `${r.headers['x-service-delivery']}#${r.headers['x-service-attempt']}`);
      t.equal(new Set(sent).size, sent.length, 'no attempt was sent twice');
      t.same(new Set(receiver.received.map((r) => r.json.delivery_id)), ids, 'every delivery went out');
      t.ok((await hooks.deliveries()).every((d) => d.status === 'delivered' && d.attempts === 1));
    }),
  );

  t.test(`after rotate_secret, deliveries verify with the new secret only on ${backend.name}`, (t) =>
    withReceiver(t, backend, async ({ authority, hooks, receiver }) => {
      const hook = await hooks.create({ name: 'rotating', url: receiver.url });
      const run = worker(authority);
      t.teardown(() => run.stop());
      receiver.mode = 'fail';
      await hooks.ok({ action: 'test', id: hook.id });
      await run.runOnce();
      t.ok(signedWith(hook.signing_secret, receiver.received[0] as ReceivedRequest), 'before: the old secret');
      const rotated = (await hooks.ok({ action: 'rotate_secret', id: hook.id })).subscription;
      receiver.mode = 'ok';
      authority.clock.advance(10_000);
      await hooks.ok({ action: 'test', id: hook.id });
      await run.runOnce();
      t.equal(receiver.received.length, 3, 'the retry and the new test delivery');
      for (const request of receiver.received.slice(1)) {
        t.ok(signedWith(rotated.signing_secret, request), 'signed with the new secret (a retry of an older delivery too)');
        t.notOk(signedWith(hook.signing_secret, request), 'not with the old one');
        t.throws(() => verifyWebhook({ rawBody: request.raw, headers: request.headers as Record<string, string>, secret: hook.signing_secret, now: authority.clock.now() }));
      }
    }),
  );

  t.test(`private targets are refused at connect time in the default configuration on ${backend.name}`, (t) =>
    withReceiver(
      t,
      backend,
      async ({ authority, hooks, receiver }) => {
        const port = new URL(receiver.url).port;
        // A public-looking name that resolves to loopback: the URL passes, the connection must not.
        const resolve: Parameters<typeof deliveryAgent>[0]['resolve'] = (_host, _options, callback) => callback(null, [{ address: '127.0.0.1', family: 4 }]);
        const hook = await hooks.create({ name: 'sneaky', url: `http://hooks.example.com:${port}/hooks` });
        await hooks.ok({ action: 'test', id: hook.id });
        const strict = worker(authority, {}, { resolve });
        t.teardown(() => strict.stop());
        t.match(await strict.runOnce(), { sent: 1, failed: 1 });
        t.equal(receiver.received.length, 0, 'nothing reached the loopback receiver');
        t.match((await hooks.deliveries())[0]?.history[0]?.error, /private, loopback or link-local/);

        // The same name with private targets allowed does connect: the refusal was the address.
        const lenient = worker(authority, LOOPBACK, { resolve });
        t.teardown(() => lenient.stop());
        authority.clock.advance(10_000);
        t.match(await lenient.runOnce(), { delivered: 1 });
        t.equal(receiver.received.length, 1);
      },
      {}, // the default configuration: private targets refused
    ),
  );

  t.test(`every state change writes its deliveries in its own transaction on ${backend.name}`, (t) =>
    withTestAuthority(
      t,
      backend,
      async (authority) => {
        const hooks = api(authority);
        await hooks.create({ name: 'all', url: 'https://hooks.example.com/all' });
        const headers = { ...authority.bearer(authority.acmeAdmin), 'content-type': 'application/json' };
        const decided = (await hooks.evaluate()).json();
        await authority.app.inject({ method: 'POST', url: '/v1-verify-permit', headers, payload: { permit_token: decided.permit_token, ...demo } });
        await authority.app.inject({ method: 'POST', url: '/v1/effects', headers, payload: { permit_id: decided.permit_id, status: 'succeeded' } });
        const other = (await hooks.evaluate()).json();
        await authority.app.inject({ method: 'POST', url: `/v1/permits/${other.permit_id}/revoke`, headers, payload: {} });
        await hooks.putPolicy();
        await authority.app.inject({ method: 'POST', url: '/v1/escalations', headers: { ...headers, authorization: `Bearer ${await authority.key(['evaluate:write'])}` }, payload: { agentId: 'bot', escalationReason: 'why' } });
        // A hold opens an approval request; resolving it is another event.
        const held = await authority.app.inject({
          method: 'POST', url: '/v1/evaluate', headers,
          payload: { action_type: 'payments.wire', actor_id: 'finance-bot', context: { environment: 'production', amount_usd: 50_000, account_code: 'OPS-001' } },
        });
        const approvalId = held.json().approval_request_id as string;
        // Resolved by another person's credential: the requester may not approve its own action.
        const approver = { ...headers, authorization: `Bearer ${await authority.key(['approvals:write'])}` };
        const resolved = await authority.app.inject({ method: 'POST', url: `/v1/approvals/${approvalId}/resolve`, headers: approver, payload: { decision: 'approve' } });
        t.equal(resolved.statusCode, 200);
        // A gate's records reach the audit log through the drain, which writes their deliveries too.
        const gateRecord = (kind: VerificationRecord['kind'], code = '') =>
          verificationRecordFields({
            kind, gate: 'proxy:echo', mode: 'enforce', at: new Date(authority.clock.now()).toISOString(), request_id: `gate-${kind}`,
            permit_id: other.permit_id, action_type: 'demo.echo', actor_id: 'demo-agent', code, reason: code === '' ? '' : 'refused',
            upstream_status: kind === 'execution.observed' ? '201' : '', duration_ms: kind === 'execution.observed' ? '3' : '',
          });
        for (const [kind, code] of [['permit.rejected', 'PERMIT_REVOKED'], ['execution.observed', '']] as const) {
          await authority.backend.store.appendRecord(verificationStream(authority.acme.id), gateRecord(kind, code));
        }
        const drained = await drainVerificationRecords({ db: authority.backend.db, store: authority.backend.store, clock: authority.clock }, { orgIds: [authority.acme.id] });
        t.equal(drained.recorded, 2);
        const events = await authority.backend.db.query<{ id: string; type: string }>('SELECT id, type FROM audit_events WHERE org_id = $1 AND sequence > 1 ORDER BY sequence', [authority.acme.id]);
        const deliveries = await authority.backend.db.query<{ event_id: string; event_type: string }>('SELECT event_id, event_type FROM webhook_deliveries WHERE org_id = $1', [authority.acme.id]);
        t.same(
          new Set(events.map((e) => e.type)),
          new Set([
            'evaluation.decided', 'permit.issued', 'permit.verified', 'effect.reported', 'permit.revoked', 'policy.updated', 'escalation.created',
            'approval.requested', 'approval.resolved', 'permit.rejected', 'execution.observed',
          ]),
        );
        t.same(deliveries.map((d) => d.event_id).sort(), events.map((e) => e.id).sort(), 'one delivery per event appended after the subscription');
        const globex = await authority.backend.db.query('SELECT 1 FROM webhook_deliveries WHERE org_id = $1', [authority.globex.id]);
        t.equal(globex.length, 0, "another organization's subscriptions hear nothing");
      },
      {},
    ),
  );
}

const missing = realServersMissing();
if (missing) t.comment(`the Postgres + Redis variant did not run: ${missing}`);
