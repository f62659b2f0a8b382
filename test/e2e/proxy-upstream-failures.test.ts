/**
 * Honest execution records end to end: a permitted request goes through the real proxy
 * to a real loopback upstream that misbehaves in one way each, and the `execution.observed`
 * record, the audit event the drain makes of it and the permit's proof say whether the upstream
 * answered (with its status), was not reached, or may have been. Each case counts what the
 * upstream saw. Regression: all of these used to be recorded alike, `UPSTREAM_ERROR` and no status.
 *
 * @example
 *   npx tap --disable-coverage test/e2e/proxy-upstream-failures.test.ts
 */
import { once } from 'node:events';
import { createServer, request as httpRequest, type IncomingMessage, type ServerResponse } from 'node:http';
import t, { type Test } from 'tap';
import { request } from 'undici';
import { drainVerificationRecords } from '../../authority/verifications/drain.js';
import { createExecutionRecords } from '../../proxy/execution-records.js';
import { createGate } from '../../proxy/gate.js';
import { createRecordBacklog } from '../../proxy/record-backlog.js';
import { createProxyMetrics } from '../../proxy/metrics.js';
import { createProxyServer, proxyState } from '../../proxy/server.js';
import { createLogger } from '../../shared/logging.js';
import { verificationStream } from '../../shared/permits/store-keys.js';
import { staticKeyResolver } from '../../shared/permits/static-keys.js';
import { ExecutionObservedDetails, verificationRecordFields, type VerificationRecord } from '../../shared/wire/verification-records.js';
import { appBackends, realServersMissing } from '../helpers/backends.js';
import { closeServer, deadUrl, listen } from '../helpers/loopback.js';
import { call, eventually, withHarness, type Harness } from '../helpers/proxy-harness.js';

/** A loopback upstream whose behaviour the test sets per path; it counts the requests it read. */
async function misbehavingUpstream(t: Test) {
  const seen: string[] = [];
  const held: ServerResponse[] = [];
  const server = createServer((req, res) => {
    req.resume();
    req.on('end', () => {
      seen.push(req.url ?? '');
      if (req.url?.startsWith('/echo/reset')) req.socket.destroy();
      else if (req.url?.startsWith('/echo/held')) held.push(res);
      // /echo/silent: read, never answered.
      else if (!req.url?.startsWith('/echo/silent')) res.writeHead(201).end('done');
    });
  });
  const url = await listen(server);
  t.teardown(() => closeServer(server));
  return { url, seen, held };
}

/** The proxy as the harness builds it, but with a short headers timeout and a hook on each response. */
async function startProxy(t: Test, h: Harness, upstream: string) {
  const jwks = await (await request(`${h.authorityUrl}/v1/permit-keys`, { headers: h.authority.bearer(h.authority.acmeAdmin) })).body.json();
  const metrics = createProxyMetrics();
  const store = h.opened.store;
  const logger = createLogger({ name: 'proxy', level: 'silent' });
  const records = createRecordBacklog({ store, stream: verificationStream(h.authority.acme.id), logger, onAppendFailed: (count) => metrics.recordAppendFailures.inc(count) });
  const executionRecords = createExecutionRecords({ records });
  const gate = createGate({
    organization: h.authority.acme.id,
    issuer: h.config.issuer,
    audience: h.config.audience,
    keys: staticKeyResolver(jwks as Parameters<typeof staticKeyResolver>[0]),
    store,
    now: () => h.clock.now(),
    permitHeader: h.config.permit_header,
    records,
    executionRecords,
  });
  const state = proxyState({ ...h.config, upstream });
  const proxy = createProxyServer({
    current: () => state,
    gate,
    executionRecords,
    metrics,
    logger,
    upstreamHeadersTimeoutMs: 200,
  });
  // Registered before the proxy handles a request, so it sees each client leave no later than the forwarding does.
  const clientsGone: string[] = [];
  proxy.server.on('request', (req: IncomingMessage, res: ServerResponse) => res.on('close', () => !res.writableFinished && clientsGone.push(req.url ?? '')));
  const url = await listen(proxy.server);
  t.teardown(async () => {
    await proxy.close();
    await records.close(1_000);
  });
  return { url, metrics, clientsGone };
}

async function executionOf(h: Harness, permitId: string): Promise<VerificationRecord> {
  return eventually('the execution.observed record', async () => (await h.records()).find((record) => record.kind === 'execution.observed' && record.permit_id === permitId));
}

/** Drains the records into the audit log; the permit's proof then holds the execution event. */
async function provenExecution(h: Harness, permitId: string): Promise<ExecutionObservedDetails> {
  await drainVerificationRecords({ db: h.opened.db, store: h.opened.store, clock: h.clock });
  // The in-process store's stream ids follow the clock: move it so later appends never reuse a drained id.
  h.clock.advance(5);
  const response = await request(`${h.authorityUrl}/v1/permits/${permitId}/proof`, { headers: h.authority.bearer(h.authority.acmeAdmin) });
  const proof = (await response.body.json()) as { events: Array<{ type: string; payload: { details: unknown } }> };
  const executions = proof.events.filter((event) => event.type === 'execution.observed');
  if (executions.length !== 1) throw new Error(`expected one execution.observed event in the proof, got ${executions.length}`);
  return ExecutionObservedDetails.parse(executions[0]!.payload.details);
}

for (const backend of appBackends()) {
  t.test(`upstream failures on the record, on ${backend.name}`, (t) =>
    withHarness(t, backend, async (h) => {
      const upstream = await misbehavingUpstream(t);
      const proxy = await startProxy(t, h, upstream.url);

      await t.test('answered: the status is the upstream’s, with no code', async (t) => {
        const permit = await h.permit({ id: 'ok' });
        const response = await call(proxy.url, '/echo/ok', { token: permit.token });
        t.equal(response.status, 201);
        t.match(await executionOf(h, permit.id), { upstream: 'answered', upstream_status: '201', code: '' });
        t.match(await provenExecution(h, permit.id), { upstream: 'answered', upstream_status: 201, code: null, reason: null });
      });

      await t.test('connection refused: not reached, and the 502 says so', async (t) => {
        const refusing = await startProxy(t, h, await deadUrl());
        const permit = await h.permit({ id: 'refused' });
        const before = upstream.seen.length;
        const response = await call(refusing.url, '/echo/refused', { token: permit.token, headers: { 'x-request-id': 'refused-1' } });
        t.equal(response.status, 502);
        t.match(response.json(), { error: 'upstream_unavailable', status: 502, request_id: 'refused-1', reason: 'UPSTREAM_NOT_REACHED' });
        t.equal(upstream.seen.length, before, 'no upstream saw anything');
        t.match(await executionOf(h, permit.id), { upstream: 'not_reached', upstream_status: '', code: 'UPSTREAM_REFUSED' });
        t.match(await provenExecution(h, permit.id), { upstream: 'not_reached', upstream_status: null, code: 'UPSTREAM_REFUSED', reason: /never left/ });
      });

      await t.test('DNS failure: not reached', async (t) => {
        // RFC 6761: .invalid names never resolve.
        const lost = await startProxy(t, h, 'http://countersign-upstream.invalid:7090');
        const permit = await h.permit({ id: 'nowhere' });
        const response = await call(lost.url, '/echo/nowhere', { token: permit.token });
        t.match(response.json(), { error: 'upstream_unavailable', reason: 'UPSTREAM_NOT_REACHED' });
        t.match(await executionOf(h, permit.id), { upstream: 'not_reached', code: 'UPSTREAM_DNS_FAILURE' });
      });

      await t.test('TLS handshake failure: not reached, and the upstream saw no request', async (t) => {
        // https to a plain HTTP server: the handshake fails before any request is written.
        const tls = await startProxy(t, h, upstream.url.replace('http:', 'https:'));
        const permit = await h.permit({ id: 'tls' });
        const before = upstream.seen.length;
        const response = await call(tls.url, '/echo/tls', { token: permit.token });
        t.match(response.json(), { error: 'upstream_unavailable', reason: 'UPSTREAM_NOT_REACHED' });
        t.equal(upstream.seen.length, before, 'the upstream handled no request');
        t.match(await executionOf(h, permit.id), { upstream: 'not_reached', code: 'UPSTREAM_TLS_FAILURE' });
      });

      await t.test('reset after the upstream read the request: unknown, and the 502 says so', async (t) => {
        const permit = await h.permit({ id: 'reset' });
        const response = await call(proxy.url, '/echo/reset', { token: permit.token });
        t.equal(response.status, 502);
        t.match(response.json(), { error: 'upstream_unavailable', reason: 'UPSTREAM_RESULT_UNKNOWN' });
        t.equal(upstream.seen.filter((path) => path === '/echo/reset').length, 1, 'the upstream read the request once');
        t.match(await executionOf(h, permit.id), { upstream: 'unknown', upstream_status: '', code: 'UPSTREAM_RESET' });
        t.match(await provenExecution(h, permit.id), { upstream: 'unknown', upstream_status: null, code: 'UPSTREAM_RESET', reason: /may have reached/ });
      });

      await t.test('no answer before the headers timeout: unknown', async (t) => {
        const permit = await h.permit({ id: 'silent' });
        const response = await call(proxy.url, '/echo/silent', { token: permit.token });
        t.equal(response.status, 502);
        t.match(response.json(), { error: 'upstream_unavailable', reason: 'UPSTREAM_RESULT_UNKNOWN' });
        t.equal(upstream.seen.filter((path) => path === '/echo/silent').length, 1);
        t.match(await executionOf(h, permit.id), { upstream: 'unknown', upstream_status: '', code: 'UPSTREAM_HEADERS_TIMEOUT' });
        t.match(await provenExecution(h, permit.id), { upstream: 'unknown', code: 'UPSTREAM_HEADERS_TIMEOUT' });
      });

      await t.test('the client leaves while the upstream works, then the upstream answers: answered, with its status', async (t) => {
        const permit = await h.permit({ id: 'held' });
        const req = httpRequest(`${proxy.url}/echo/held`, { method: 'POST', headers: { 'x-service-permit': permit.token, 'x-actor-id': 'demo-agent' } });
        req.on('error', () => undefined);
        req.end('{}');
        await eventually('the upstream to hold the request', async () => (upstream.held.length === 1 ? true : undefined));
        req.destroy();
        await eventually('the proxy to see the client leave', async () => (proxy.clientsGone.includes('/echo/held') ? true : undefined));
        const held = upstream.held.shift()!;
        t.notOk(held.destroyed, 'the upstream request was not aborted');
        held.writeHead(202).end('accepted');
        await once(held, 'finish');
        t.match(await executionOf(h, permit.id), { upstream: 'answered', upstream_status: '202', code: 'CLIENT_GONE' });
        t.match(await provenExecution(h, permit.id), { upstream: 'answered', upstream_status: 202, code: 'CLIENT_GONE' });
        t.equal(upstream.seen.filter((path) => path === '/echo/held').length, 1, 'one upstream request');
      });

      await t.test('the client leaves while the upstream works, then the upstream fails: unknown', async (t) => {
        const permit = await h.permit({ id: 'held-dropped' });
        const req = httpRequest(`${proxy.url}/echo/held-dropped`, { method: 'POST', headers: { 'x-service-permit': permit.token, 'x-actor-id': 'demo-agent' } });
        req.on('error', () => undefined);
        req.end('{}');
        await eventually('the upstream to hold the request', async () => (upstream.held.length === 1 ? true : undefined));
        req.destroy();
        await eventually('the proxy to see the client leave', async () => (proxy.clientsGone.includes('/echo/held-dropped') ? true : undefined));
        upstream.held.shift()!.socket?.destroy();
        t.match(await executionOf(h, permit.id), { upstream: 'unknown', upstream_status: '', code: 'CLIENT_GONE' });
        t.match(await provenExecution(h, permit.id), { upstream: 'unknown', code: 'CLIENT_GONE' });
      });

      await t.test('records of older gates (no `upstream` field) are drained as answered or unknown', async (t) => {
        const stream = verificationStream(h.authority.acme.id);
        const old = (permitId: string, status: string) =>
          verificationRecordFields({
            kind: 'execution.observed',
            gate: 'proxy:echo',
            mode: 'enforce',
            at: new Date(h.clock.now()).toISOString(),
            request_id: `old-${permitId}`,
            permit_id: permitId,
            action_type: 'demo.echo',
            actor_id: 'demo-agent',
            code: status === '' ? 'UPSTREAM_ERROR' : '',
            reason: status === '' ? 'ECONNREFUSED' : '',
            upstream_status: status,
            duration_ms: '4',
          });
        const [withStatus, without] = [await h.permit({ id: 'old-1' }), await h.permit({ id: 'old-2' })];
        await h.opened.store.appendRecord(stream, old(withStatus.id, '200'));
        h.clock.advance(1);
        await h.opened.store.appendRecord(stream, old(without.id, ''));
        t.match(await provenExecution(h, withStatus.id), { upstream: 'answered', upstream_status: 200, code: null });
        t.match(await provenExecution(h, without.id), { upstream: 'unknown', upstream_status: null, code: 'UPSTREAM_ERROR', reason: 'ECONNREFUSED' });
      });

      await t.test('upstream errors are counted; a client leaving is not an upstream error', async (t) => {
        const errors = await proxy.metrics.upstreamErrors.get();
        t.equal(errors.values.find((value) => value.labels.route === 'echo')?.value, 2, 'reset and timeout');
      });
    }),
  );
}

if (realServersMissing()) t.comment(`the Postgres + Redis variant did not run: ${realServersMissing()}`);
