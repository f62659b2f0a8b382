/**
 * Webhook deliveries when things go wrong, through the real app and a real receiver on loopback:
 * failures retry on the configured schedule, dead-letter and are replayed; a worker that stops
 * mid-delivery is taken over after its lease with the same delivery id; two workers on one
 * database never send the same attempt twice; private targets are refused when the connection is
 * made, not only by the URL. The clock is a ManualClock; nothing sleeps. Runs on PGlite + the
 * in-process store, and on Postgres + Redis when they are available.
 *
 * @example
 *   npx tap --disable-coverage test/integration/webhooks-delivery.test.ts
 */
import t from 'tap';
import { parseAuthorityConfig } from '../../authority/config.js';
import { claimDueDeliveries } from '../../authority/webhooks/deliveries.js';
import { deliveryAgent } from '../../authority/webhooks/targets.js';
import { sendAttempt } from '../../authority/webhooks/worker.js';
import type { WebhookDeliveryWire } from '../../shared/wire/webhooks.js';
import { appBackends, realServersMissing } from '../helpers/backends.js';
import { deadUrl } from '../helpers/loopback.js';
import { LOOPBACK, testWorker, withReceiver } from '../helpers/webhook-authority.js';

for (const backend of appBackends()) {
  t.test(`failures retry on the schedule, dead-letter, and replay delivers on ${backend.name}`, (t) =>
    withReceiver(t, backend, async ({ authority, hooks, receiver }) => {
      const config = { webhooks: { allow_private_targets: true, retry_schedule_ms: [10_000, 60_000], jitter: 0.2 } };
      const hook = await hooks.create({ name: 'flaky', url: receiver.url, max_attempts: 3, timeout_seconds: 1 });
      const run = testWorker(authority, config);
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

      const restarted = testWorker(authority);
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
      const [a, b] = [testWorker(authority, config), testWorker(authority, config)];
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
        const strict = testWorker(authority, {}, { resolve });
        t.teardown(() => strict.stop());
        t.match(await strict.runOnce(), { sent: 1, failed: 1 });
        t.equal(receiver.received.length, 0, 'nothing reached the loopback receiver');
        t.match((await hooks.deliveries())[0]?.history[0]?.error, /private, loopback or link-local/);

        // The same name with private targets allowed does connect: the refusal was the address.
        const lenient = testWorker(authority, LOOPBACK, { resolve });
        t.teardown(() => lenient.stop());
        authority.clock.advance(10_000);
        t.match(await lenient.runOnce(), { delivered: 1 });
        t.equal(receiver.received.length, 1);
      },
      {}, // the default configuration: private targets refused
    ),
  );
}

const missing = realServersMissing();
if (missing) t.comment(`the Postgres + Redis variant did not run: ${missing}`);
