/**
 * Webhooks through the real app and a real receiver on loopback: subscriptions (validation,
 * secrets sealed at rest, rotation), the outbox (same transaction as the event, the event filter,
 * test deliveries) and signatures recomputed from the raw bytes, with the old secret refused after
 * a rotation. Retries, dead letters, crashes, concurrent workers and the private-address refusal
 * are in webhooks-delivery.test.ts. The clock is a ManualClock; nothing sleeps. Runs on PGlite +
 * the in-process store, and on Postgres + Redis when they are available.
 *
 * @example
 *   npx tap --disable-coverage test/integration/webhooks.test.ts
 */
import t from 'tap';
import { drainVerificationRecords } from '../../authority/verifications/drain.js';
import { verifyWebhook } from '../../shared/client/webhooks.js';
import { ErrorEnvelope } from '../../shared/wire/envelope.js';
import { verificationStream } from '../../shared/permits/store-keys.js';
import { verificationRecordFields, type VerificationRecord } from '../../shared/wire/verification-records.js';
import { WebhookDeliveryBody } from '../../shared/wire/webhooks.js';
import { withTestAuthority } from '../helpers/authority.js';
import { appBackends, realServersMissing } from '../helpers/backends.js';
import { DEMO_ACTION, signedWith, testWorker, webhookApi, withReceiver } from '../helpers/webhook-authority.js';
import type { ReceivedRequest } from '../helpers/webhook-receiver.js';

for (const backend of appBackends()) {
  t.test(`subscriptions: create, validate, list, update, rotate, delete on ${backend.name}`, (t) =>
    withTestAuthority(
      t,
      backend,
      async (authority) => {
        const hooks = webhookApi(authority);
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
        const foreign = await webhookApi(authority).raw({ action: 'rotate_secret', id: created.id }, authority.globexAdmin);
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
      const run = testWorker(authority);
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

  t.test(`after rotate_secret, deliveries verify with the new secret only on ${backend.name}`, (t) =>
    withReceiver(t, backend, async ({ authority, hooks, receiver }) => {
      const hook = await hooks.create({ name: 'rotating', url: receiver.url });
      const run = testWorker(authority);
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

  t.test(`every state change writes its deliveries in its own transaction on ${backend.name}`, (t) =>
    withTestAuthority(
      t,
      backend,
      async (authority) => {
        const hooks = webhookApi(authority);
        await hooks.create({ name: 'all', url: 'https://hooks.example.com/all' });
        const headers = { ...authority.bearer(authority.acmeAdmin), 'content-type': 'application/json' };
        const decided = (await hooks.evaluate()).json();
        await authority.app.inject({ method: 'POST', url: '/v1-verify-permit', headers, payload: { permit_token: decided.permit_token, ...DEMO_ACTION } });
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
