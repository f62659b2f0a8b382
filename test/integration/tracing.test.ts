/**
 * The spans of the authority's other operations and of the proxy's failures, in process, with
 * tracing started in this test process the way the processes start it (OTEL_* variables,
 * `startTelemetry`), exporting OTLP JSON to a receiver on loopback; every request goes over a real
 * loopback connection. Covers: approvals resolve, escalation create and respond, a webhook
 * delivery (a CLIENT span of its own trace, whose context the receiver gets as `traceparent`),
 * the group commit's links for a batch serving several requests, a server span for an unknown
 * path, the proxy's spans in shadow mode and when the upstream cannot be reached, and the server
 * span of an Envoy ext_authz check in the trace of the request it describes. Spans are
 * awaited by polling the receiver; nothing depends on timing.
 */
import { randomBytes } from 'node:crypto';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import t from 'tap';
import { request } from 'undici';
import type { Db } from '../../authority/store/db.js';
import { GroupCommit } from '../../authority/store/group-commit.js';
import { startWebhookWorker } from '../../authority/webhooks/worker.js';
import { parseAuthorityConfig } from '../../authority/config.js';
import { startProxy } from '../../proxy/main.js';
import { createLogger } from '../../shared/logging.js';
import { startTelemetry, tracing } from '../../shared/telemetry/index.js';
import { createTestAuthority, GENEROUS_LIMITS } from '../helpers/authority.js';
import { appBackends } from '../helpers/backends.js';
import { ManualClock } from '../helpers/clock.js';
import { deadUrl } from '../helpers/loopback.js';
import { startOtlpReceiver, type ReceivedSpan } from '../helpers/otlp-receiver.js';
import { startReceiver } from '../helpers/webhook-receiver.js';
import { echoRoutesYaml } from '../helpers/echo-route.js';

const receiver = await startOtlpReceiver();
for (const name of Object.keys(process.env)) if (name.startsWith('OTEL_')) delete process.env[name];
Object.assign(process.env, { OTEL_EXPORTER_OTLP_ENDPOINT: receiver.url, OTEL_EXPORTER_OTLP_PROTOCOL: 'http/json', OTEL_BSP_SCHEDULE_DELAY: '50' });
const logger = createLogger({ name: 'test', level: 'silent' });
const telemetry = await startTelemetry({ serviceName: 'countersign-authority', logger });

const LOOPBACK = { ...GENEROUS_LIMITS, webhooks: { allow_private_targets: true } };
const backend = appBackends()[0]!;
const clock = new ManualClock(Date.now());
const opened = await backend.open({ now: () => clock.now() });
const authority = await createTestAuthority(opened, { config: LOOPBACK, clock });
// In this order: the app, its storage, the SDK's last export, then its receiver.
t.teardown(async () => {
  await authority.close();
  await opened.cleanup();
  await telemetry.shutdown();
  await receiver.close();
});
const api = (await authority.app.listen({ host: '127.0.0.1', port: 0 })).replace('localhost', '127.0.0.1');

const traceparent = () => {
  const traceId = randomBytes(16).toString('hex');
  const spanId = randomBytes(8).toString('hex');
  return { traceId, spanId, header: `00-${traceId}-${spanId}-01` };
};

async function call(method: string, path: string, body: unknown, token: string, parent?: string) {
  const response = await request(`${api}${path}`, {
    method: method as 'POST',
    headers: { authorization: `Bearer ${token}`, ...(body === undefined ? {} : { 'content-type': 'application/json' }), ...(parent ? { traceparent: parent } : {}) },
    ...(body === undefined ? {} : { body: JSON.stringify(body) }),
  });
  const text = await response.body.text();
  return { status: response.statusCode, json: text === '' ? {} : (JSON.parse(text) as Record<string, unknown>) };
}

/** The server span the caller's `parent` span id is the parent of, and its child named `name`. */
async function childOf(parentSpanId: string, name: string): Promise<{ server: ReceivedSpan; child: ReceivedSpan }> {
  const server = await receiver.waitFor((span) => span.kind === 'server' && span.parentSpanId === parentSpanId, `a server span under ${parentSpanId}`);
  const child = await receiver.waitFor((span) => span.name === name && span.parentSpanId === server.spanId, name);
  return { server, child };
}

t.test('tracing is on in this process', async (t) => {
  t.ok(tracing !== null);
  t.match(telemetry.settings, { enabled: true, protocol: 'http/json', endpoint: `${receiver.url}/v1/traces`, serviceName: 'countersign-authority' });
});

t.test('approvals: the resolve span says which request and how it ended', async (t) => {
  const held = await call('POST', '/v1/evaluate', { action_type: 'payments.wire', actor_id: 'finance-bot', context: { environment: 'production', amount_usd: 50_000, account_code: 'OPS-001' } }, authority.acmeAdmin);
  t.equal(held.json.decision, 'hold');
  const id = held.json.approval_request_id as string;
  const evaluateSpan = await receiver.waitFor((span) => span.name === 'countersign.evaluate' && span.attributes['countersign.approval_id'] === id, 'the hold');
  t.equal(evaluateSpan.attributes['countersign.decision'], 'hold');

  const approver = await authority.key(['approvals:read', 'approvals:write']);
  const parent = traceparent();
  t.equal((await call('POST', `/v1/approvals/${id}/resolve`, { decision: 'approve' }, approver, parent.header)).status, 200);
  const { server, child } = await childOf(parent.spanId, 'countersign.approval.resolve');
  t.match(server, { name: 'POST /v1/approvals/:id/resolve', traceId: parent.traceId });
  t.equal(server.attributes['http.route'], '/v1/approvals/:id/resolve', 'the template, not the id');
  t.same([child.attributes['countersign.approval_id'], child.attributes['countersign.approval.status']], [id, 'approved']);

  const again = traceparent();
  t.equal((await call('POST', `/v1/approvals/${id}/resolve`, { decision: 'reject' }, approver, again.header)).status, 409);
  const refused = await childOf(again.spanId, 'countersign.approval.resolve');
  t.equal(refused.child.statusCode, 2, 'an operation that failed is an error span');
  t.equal(refused.child.attributes['error.type'], 'conflict', 'recorded by its code, not its message');
  t.equal(refused.server.attributes['http.response.status_code'], 409);
  t.equal(refused.server.statusCode, 0, 'a 4xx answer is not an error of the server');
});

t.test('escalations: create and respond spans', async (t) => {
  const requester = await authority.key(['evaluate:write']);
  const voter = await authority.key(['hitl:approve']);
  const created = traceparent();
  const escalation = await call('POST', '/v1/escalations', { agentId: 'deploy-bot', escalationReason: 'schema change' }, requester, created.header);
  t.equal(escalation.status, 200);
  const create = await childOf(created.spanId, 'countersign.escalation.create');
  t.same([create.child.attributes['countersign.escalation_id'], create.child.attributes['countersign.escalation.status']], [escalation.json.id, 'pending']);

  const vote = traceparent();
  t.equal((await call('POST', `/v1/escalations/${escalation.json.id as string}/respond`, { decision: 'approve' }, voter, vote.header)).status, 200);
  const respond = await childOf(vote.spanId, 'countersign.escalation.respond');
  t.equal(respond.server.name, 'POST /v1/escalations/:id/respond');
  t.match(respond.child.attributes, { 'countersign.escalation_id': escalation.json.id, 'countersign.escalation.vote': 'approve', 'countersign.escalation.status': 'approved' });
});

t.test('a webhook delivery: a CLIENT span of its own, and the receiver continues its trace', async (t) => {
  const hooks = await startReceiver();
  t.teardown(() => hooks.close());
  const created = await call('POST', '/v1-webhooks', { action: 'create', name: 'traced', url: `${hooks.url}/hook?token=secret-in-url`, event_types: ['evaluation.decided'] }, authority.acmeAdmin);
  t.equal(created.status, 200);
  t.equal((await call('POST', '/v1/evaluate', { action_type: 'demo.echo', actor_id: 'demo-agent', context: { environment: 'dev', target: { type: 'demo', id: 'hook' } } }, authority.acmeAdmin)).status, 200);
  const worker = startWebhookWorker(
    { db: opened.db, box: authority.secrets, clock, metrics: authority.metrics, config: parseAuthorityConfig(LOOPBACK).webhooks, logger },
    { timer: false },
  );
  t.teardown(() => worker.stop());
  const pass = await worker.runOnce();
  t.equal(pass.delivered, 1);

  const delivered = hooks.received[0]!;
  const span = await receiver.waitFor((candidate) => candidate.name === 'countersign.webhook.deliver' && candidate.attributes['countersign.webhook.delivery_id'] === delivered.json.delivery_id, 'the delivery span');
  t.match(span, { kind: 'client', parentSpanId: '', statusCode: 0 });
  t.match(span.attributes, {
    'http.request.method': 'POST',
    'http.response.status_code': 204,
    'server.address': '127.0.0.1',
    'server.port': Number(new URL(hooks.url).port),
    'countersign.webhook.event_type': 'evaluation.decided',
    'countersign.webhook.attempt': 1,
    'countersign.webhook.result': 'delivered',
  });
  t.equal(delivered.headers.traceparent, `00-${span.traceId}-${span.spanId}-01`, "the receiver's parent is the delivery span");
  t.notOk(JSON.stringify(span).includes('secret-in-url'), "the URL's path and query are not recorded");
});

t.test('group commit: a batch links to every request it serves, and each request back to it', async (t) => {
  // A writer that holds the first batch until told, so the next three wait and share one batch.
  let release: () => void = () => undefined;
  const held = new Promise<void>((resolve) => (release = resolve));
  let batches = 0;
  const writer = new GroupCommit<number, string>({} as Db, async (_tx, items) => {
    if (batches++ === 0) await held;
    return items.map((item) => `stored ${item}`);
  }, { maxBatch: 16, transaction: false });
  const traced = tracing!;
  const submit = (item: number) => traced.inSpan(`test.request.${item}`, () => writer.submit(item), { root: true });
  const first = submit(0);
  const rest = [submit(1), submit(2), submit(3)];
  release();
  t.same(await Promise.all([first, ...rest]), ['stored 0', 'stored 1', 'stored 2', 'stored 3']);

  const requests = await Promise.all([0, 1, 2, 3].map((item) => receiver.waitFor((span) => span.name === `test.request.${item}`, `request ${item}`)));
  const shared = await receiver.waitFor((span) => span.name === 'countersign.group_commit' && span.attributes['countersign.batch.size'] === 3, 'the shared batch');
  t.same(
    shared.links.map((link) => link.spanId).sort(),
    requests.slice(1).map((span) => span.spanId).sort(),
    'the batch of three links to the three requests',
  );
  t.ok(shared.links.every((link) => link.traceId !== shared.traceId), 'each link leads into another trace: the batch is a root of its own');
  t.equal(shared.parentSpanId, '');
  for (const span of requests.slice(1)) t.same(span.links, [{ traceId: shared.traceId, spanId: shared.spanId }], `${span.name} links to its batch`);
  const own = await receiver.waitFor((span) => span.name === 'countersign.group_commit' && span.links.some((link) => link.spanId === requests[0]!.spanId), 'the first batch');
  t.equal(own.attributes['countersign.batch.size'], 1, 'the first request had a batch of its own');
  t.same(requests[0]!.links, [{ traceId: own.traceId, spanId: own.spanId }]);
});

t.test('a server span for a path no route serves is named by the method alone', async (t) => {
  const parent = traceparent();
  t.equal((await call('GET', '/v1/no-such-thing/12345', undefined, authority.acmeAdmin, parent.header)).status, 404);
  const server = await receiver.waitFor((span) => span.kind === 'server' && span.parentSpanId === parent.spanId, 'the 404 server span');
  t.equal(server.name, 'GET');
  t.notOk('http.route' in server.attributes);
  t.notOk(JSON.stringify(server).includes('12345'), 'the raw path is never recorded');
});

t.test("the proxy's spans: shadow would-blocks, an upstream that cannot be reached, and an ext_authz check in the trace it describes", async (t) => {
  const dir = await mkdtemp(join(tmpdir(), 'countersign-tracing-'));
  t.teardown(() => rm(dir, { recursive: true, force: true }));
  const keyFile = join(dir, 'proxy.key');
  await writeFile(keyFile, `${await authority.key(['verify:execute'])}\n`, { mode: 0o600 });
  const file = join(dir, 'proxy.yaml');
  await writeFile(
    file,
    `listen: 127.0.0.1:0
admin_listen: 127.0.0.1:0
upstream: ${await deadUrl()}
authority: { url: ${api}, api_key_file: ${keyFile} }
organization: ${authority.acme.id}
ext_authz:
  http: { listen: 127.0.0.1:0 }
${echoRoutesYaml('shadow')}`,
  );
  const proxy = await startProxy(file, { env: {}, logger, store: opened.store, now: () => clock.now(), watch: false });
  t.teardown(() => proxy.close());

  const parent = traceparent();
  const response = await request(`${proxy.url}/echo/shadowed`, { method: 'POST', headers: { 'x-actor-id': 'demo-agent', traceparent: parent.header }, body: '{}' });
  await response.body.dump();
  t.equal(response.statusCode, 502, 'shadow mode forwards without a permit; the upstream is not there');

  const server = await receiver.waitFor((span) => span.kind === 'server' && span.parentSpanId === parent.spanId, 'the proxy server span');
  t.match(server, { name: 'POST echo', statusCode: 2 }, 'a 5xx answer is an error of the server');
  t.match(server.attributes, { 'http.response.status_code': 502, 'error.type': '502', 'countersign.outcome': 'upstream_error' });
  const check = await receiver.waitFor((span) => span.name === 'countersign.gate.check' && span.parentSpanId === server.spanId, 'the check');
  t.match(check.attributes, { 'countersign.mode': 'shadow', 'countersign.verification.result': 'rejected', 'countersign.verification.reason': 'MISSING_PERMIT' });
  t.notOk(receiver.spans.some((span) => span.name === 'countersign.permit.consume' && span.parentSpanId === check.spanId), 'no permit, no consume');
  const forward = await receiver.waitFor((span) => span.name === 'countersign.forward' && span.parentSpanId === server.spanId, 'the forward');
  t.match(forward, { kind: 'client', statusCode: 2 });
  t.match(forward.attributes, { 'error.type': 'UPSTREAM_REFUSED', 'countersign.upstream': 'not_reached' });
  t.notOk('http.response.status_code' in forward.attributes, 'no answer, no status');

  // The same gate as Envoy's external authorizer: the check joins the trace of the request it describes.
  const described = traceparent();
  const check2 = await request(`${proxy.extAuthz.http}/echo/checked`, { method: 'POST', headers: { 'x-actor-id': 'demo-agent', traceparent: described.header } });
  await check2.body.dump();
  t.equal(check2.statusCode, 200, 'shadow mode allows');
  const checkServer = await receiver.waitFor((span) => span.kind === 'server' && span.parentSpanId === described.spanId, 'the ext_authz server span');
  t.match(checkServer, { name: 'POST echo', traceId: described.traceId });
  t.match(checkServer.attributes, { 'countersign.front_door': 'ext_authz_http', 'countersign.outcome': 'would_block', 'http.response.status_code': 200 });
  const gateCheck = await receiver.waitFor((span) => span.name === 'countersign.gate.check' && span.parentSpanId === checkServer.spanId, 'the ext_authz check\'s gate check');
  t.match(gateCheck.attributes, { 'countersign.mode': 'shadow', 'countersign.verification.reason': 'MISSING_PERMIT' });
});
