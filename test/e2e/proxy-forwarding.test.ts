/**
 * The proxy end to end on loopback (test/helpers/proxy-harness.ts: authority + proxy + a recording
 * upstream): forwarding, each refusal, replay under concurrency, shadow, fail closed, pass-through
 * and upgrades. Asynchronous records are polled for with a bound. Runs on PGlite + the in-process
 * store, and on Postgres + Redis when available.
 *
 * @example
 *   npx tap --disable-coverage test/e2e/proxy-forwarding.test.ts
 *   node test/run.mjs test/e2e/proxy-forwarding.test.ts   # with Postgres + Redis
 */
import { createServer } from 'node:http';
import { connect, type Socket } from 'node:net';
import { Readable } from 'node:stream';
import t, { type Test } from 'tap';
import { request } from 'undici';
import { drainVerificationRecords } from '../../authority/verifications/drain.js';
import { appBackends, realServersMissing } from '../helpers/backends.js';
import { closeServer, deadUrl, downStore, listen } from '../helpers/loopback.js';
import { call, eventually, proxyConfig, withHarness } from '../helpers/proxy-harness.js';
import { tamperSignature } from '../helpers/permit-tokens.js';

/** An upstream that accepts any upgrade and then echoes each chunk back as `echo:<chunk>`. */
async function startUpgradeEcho(t: Test): Promise<{ url: string; heads: string[] }> {
  const heads: string[] = [];
  const server = createServer((_req, res) => res.end());
  const sockets = new Set<Socket>();
  server.on('upgrade', (req, socket: Socket) => {
    heads.push(JSON.stringify(req.headers));
    sockets.add(socket);
    // node:http sockets allow half-open connections; this echo has nothing to say after the peer's end.
    socket.on('end', () => socket.destroy());
    socket.on('close', () => sockets.delete(socket));
    socket.write('HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n');
    socket.on('data', (chunk: Buffer) => socket.write(`echo:${chunk.toString()}`));
  });
  const url = await listen(server);
  t.teardown(() => {
    for (const socket of sockets) socket.destroy();
    return closeServer(server);
  });
  return { url, heads };
}

/**
 * Writes `head` on a raw connection, then `then` once the answer's head arrived; resolves all that
 * was read, once the answer ends or (with `then`) its echo came back.
 */
function rawExchange(base: string, head: string, then: string): Promise<string> {
  return new Promise((resolve, reject) => {
    let text = '';
    let sent = false;
    const socket = connect(Number(new URL(base).port), '127.0.0.1', () => socket.write(head));
    socket.on('data', (chunk: Buffer) => {
      text += chunk.toString();
      if (then !== '' && !sent && text.includes('\r\n\r\n')) {
        sent = true;
        if (text.startsWith('HTTP/1.1 101')) socket.write(then);
      }
      if (then !== '' && text.endsWith(`echo:${then}`)) socket.destroy();
    });
    socket.on('error', reject);
    socket.on('close', () => resolve(text));
  });
}

const PROM_LINE = /^[a-zA-Z_:][a-zA-Z0-9_:]*(\{([a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\\n]|\\["\\n])*",?)*\})? (-?[0-9.]+(e[+-]?[0-9]+)?|NaN|[+-]Inf)( -?[0-9]+)?$/;

for (const backend of appBackends()) {
  t.test(`forwarding through the gate on ${backend.name}`, (t) =>
    withHarness(t, backend, async (h) => {
      const proxy = await h.startProxy();
      const { received } = h.upstream;

      await t.test('happy path: one request upstream, permit stripped, ids added', async (t) => {
        const permit = await h.permit({ id: 'order-1' });
        const response = await call(proxy.url, '/echo/order-1?x=1', { token: permit.token, body: '{"amount":5}', headers: { 'x-request-id': 'client-req-1' } });
        t.equal(response.status, 201, "the upstream's status");
        t.equal(response.text, 'upstream saw: {"amount":5}', "the upstream's body");
        t.equal(response.headers['x-upstream'], 'yes', "the upstream's headers");
        t.equal(response.headers['x-request-id'], 'client-req-1', 'a sane request id is echoed');
        t.equal(received.length, 1, 'exactly one upstream request');
        const got = received[0]!;
        t.match(got, { method: 'POST', url: '/echo/order-1?x=1', body: '{"amount":5}' });
        t.notOk('x-service-permit' in got.headers, 'the permit header is stripped');
        t.equal(got.headers['x-countersign-permit-id'], permit.id);
        t.equal(got.headers['x-countersign-mode'], 'enforce');
        t.equal(got.headers['x-actor-id'], 'demo-agent', 'other headers pass');
        t.equal(got.headers['x-forwarded-for'], '127.0.0.1');
        t.equal(got.headers['x-forwarded-proto'], 'http');
        t.match(got.headers['x-forwarded-host'], /^127\.0\.0\.1:\d+$/);

        const execution = await eventually('the execution.observed record', async () =>
          (await h.records()).find((record) => record.kind === 'execution.observed' && record.permit_id === permit.id),
        );
        t.match(execution, { upstream_status: '201', code: '', mode: 'enforce', gate: 'proxy:echo', request_id: 'client-req-1', actor_id: 'demo-agent' });

        const drained = await drainVerificationRecords({ db: h.opened.db, store: h.opened.store, clock: h.clock });
        t.ok(drained.recorded >= 2, 'the drain recorded the gate records');
        // MemoryStore ids follow the clock; move it so later appends never reuse a drained id.
        h.clock.advance(5);
        const events = await request(`${h.authorityUrl}/v1/audit/events?limit=500`, { headers: h.authority.bearer(h.authority.acmeAdmin) });
        const list = ((await events.body.json()) as { events: Array<{ type: string; sequence: number; resource_id: string | null; payload: unknown }> }).events;
        const ofPermit = list
          .filter((event) => event.resource_id === permit.id || JSON.stringify(event.payload).includes(permit.id))
          .sort((a, b) => a.sequence - b.sequence)
          .map((event) => event.type);
        t.same(ofPermit, ['evaluation.decided', 'permit.issued', 'permit.verified', 'execution.observed'], 'the chain in order in the audit log');
      });

      await t.test('the hops an X-Forwarded-For already names are kept, this client after them', async (t) => {
        const permit = await h.permit({ id: 'order-xff' });
        const response = await call(proxy.url, '/echo/order-xff', { token: permit.token, body: '{}', headers: { 'x-forwarded-for': '203.0.113.7, 10.0.0.2' } });
        t.equal(response.status, 201);
        const got = received.find((request) => request.url === '/echo/order-xff');
        t.equal(got?.headers['x-forwarded-for'], '203.0.113.7, 10.0.0.2, 127.0.0.1');
      });

      await t.test('refusals never reach the upstream', async (t) => {
        const before = received.length;
        const refusals = async (route: string, reason: string) =>
          (await proxy.metrics.verifications.get()).values.find((value) => value.labels.route === route && value.labels.result === 'rejected' && value.labels.reason === reason)?.value ?? 0;
        const expectRefusal = async (name: string, sent: () => Promise<Awaited<ReturnType<typeof call>>>, status: number, code: string, reason: string, route = 'echo') => {
          const counted = await refusals(route, reason);
          const response = await sent();
          t.equal(response.status, status, `${name}: status`);
          t.match(response.json(), { error: code, status, reason, request_id: String, message: String }, `${name}: the envelope`);
          t.ok(response.headers['x-request-id'], `${name}: a request id`);
          t.equal(await refusals(route, reason), counted + 1, `${name}: countersign_proxy_verifications_total{route="${route}",result="rejected",reason="${reason}"} counted it`);
        };
        await expectRefusal('no permit', () => call(proxy.url, '/echo/order-1'), 403, 'permit_required', 'MISSING_PERMIT');

        const used = await h.permit({ id: 'order-2' });
        t.equal((await call(proxy.url, '/echo/order-2', { token: used.token })).status, 201);
        const afterUse = received.length;
        await expectRefusal('replayed', () => call(proxy.url, '/echo/order-2', { token: used.token }), 403, 'permit_rejected', 'PERMIT_ALREADY_USED');

        const tampered = await h.permit({ id: 'order-3' });
        await expectRefusal('tampered', () => call(proxy.url, '/echo/order-3', { token: tamperSignature(tampered.token) }), 403, 'permit_rejected', 'PERMIT_INVALID');

        const globex = await h.permit({ id: 'order-4', admin: h.authority.globexAdmin });
        await expectRefusal('other organization', () => call(proxy.url, '/echo/order-4', { token: globex.token }), 403, 'permit_rejected', 'ORG_MISMATCH');

        const bound = await h.permit({ id: 'order-5' });
        await expectRefusal('wrong target id', () => call(proxy.url, '/echo/order-6', { token: bound.token }), 403, 'permit_rejected', 'BINDING_MISMATCH');

        const revoked = await h.permit({ id: 'order-7' });
        const revoke = await request(`${h.authorityUrl}/v1/permits/${revoked.id}/revoke`, {
          method: 'POST',
          headers: { ...h.authority.bearer(h.authority.acmeAdmin), 'content-type': 'application/json' },
          body: JSON.stringify({ reason: 'test' }),
        });
        t.equal(revoke.statusCode, 200);
        await revoke.body.dump();
        await expectRefusal('revoked', () => call(proxy.url, '/echo/order-7', { token: revoked.token }), 403, 'permit_rejected', 'PERMIT_REVOKED');

        const other = await h.permit({ id: 'order-9' });
        await expectRefusal('wrong environment', () => call(proxy.url, '/staging/echo/order-9', { token: other.token }), 403, 'permit_rejected', 'BINDING_MISMATCH', 'echo-staging');

        const wire = await request(`${h.authorityUrl}/v1/evaluate`, {
          method: 'POST',
          headers: { ...h.authority.bearer(h.authority.acmeAdmin), 'content-type': 'application/json' },
          body: JSON.stringify({ action_type: 'payments.wire', actor_id: 'finance-bot', context: { environment: 'production', amount_usd: 500, account_code: 'OPS-001' } }),
        });
        const payment = (await wire.body.json()) as { decision: string; permit_token: string };
        t.equal(payment.decision, 'allow');
        const pay = (amount: number) => () =>
          call(proxy.url, '/wires', { token: payment.permit_token, actor: 'finance-bot', body: JSON.stringify({ amount_usd: amount, account_code: 'OPS-001' }) });
        await expectRefusal('wrong amount', pay(600), 403, 'permit_rejected', 'BINDING_MISMATCH', 'wire');

        const later = await h.startProxy({ now: () => h.clock.now() + 120_000 });
        const expiring = await h.permit({ id: 'order-8' });
        const expiredBefore = (await later.metrics.verifications.get()).values.length;
        t.equal(expiredBefore, 0, 'a fresh proxy has counted nothing');
        const expired = await call(later.url, '/echo/order-8', { token: expiring.token });
        t.match(expired.json(), { error: 'permit_rejected', status: 403, reason: 'PERMIT_EXPIRED' }, 'expired: the envelope');
        t.equal(
          (await later.metrics.verifications.get()).values.find((value) => value.labels.reason === 'PERMIT_EXPIRED')?.value,
          1,
          'expired: counted with its reason',
        );

        t.equal(received.length, afterUse, 'no refused request reached the upstream');
        t.equal(afterUse, before + 1, 'only the one permitted request did');
      });

      await t.test('200 concurrent requests with one permit: exactly one reaches the upstream', async (t) => {
        const permit = await h.permit({ id: 'order-c' });
        const responses = await Promise.all(Array.from({ length: 200 }, () => call(proxy.url, '/echo/order-c', { token: permit.token })));
        t.equal(responses.filter((response) => response.status === 201).length, 1, 'one forwarded');
        t.ok(responses.every((response) => response.status === 201 || response.json().reason === 'PERMIT_ALREADY_USED'), 'the rest refused as replays');
        t.equal(received.filter((got) => got.headers['x-countersign-permit-id'] === permit.id).length, 1, 'the upstream saw it once');
      });

      await t.test('shadow: refusals are forwarded and counted as would_block', async (t) => {
        const before = received.length;
        const response = await call(proxy.url, '/s/echo/order-s');
        t.equal(response.status, 201, 'forwarded without a permit');
        t.equal(received.length, before + 1);
        t.equal(received.at(-1)!.headers['x-countersign-mode'], 'shadow');
        t.notOk('x-countersign-permit-id' in received.at(-1)!.headers, 'no permit id: none was verified');
        const spoofed = await call(proxy.url, '/s/echo/order-s', { headers: { 'x-countersign-permit-id': 'forged' } });
        t.equal(spoofed.status, 201);
        t.notOk('x-countersign-permit-id' in received.at(-1)!.headers, 'a client-supplied permit id is dropped');
        const text = await proxy.metrics.registry.metrics();
        t.match(text, /countersign_proxy_requests_total\{route="echo-shadow",outcome="would_block"\} 2/);
        t.match(text, /countersign_proxy_verifications_total\{route="echo-shadow",result="rejected",reason="MISSING_PERMIT"\} 2/);
      });

      await t.test('store down → 503, upstream untouched', async (t) => {
        const down = await h.startProxy({ store: downStore() });
        const before = received.length;
        const permit = await h.permit({ id: 'order-d' });
        const response = await call(down.url, '/echo/order-d', { token: permit.token });
        t.equal(response.status, 503);
        t.match(response.json(), { error: 'gate_unavailable', reason: 'INTERNAL_ERROR' });
        t.equal(received.length, before, 'the upstream was not contacted');
        t.match(await down.metrics.registry.metrics(), /countersign_proxy_store_errors_total 1/);
      });

      await t.test('upstream down → 502 upstream_unavailable, recorded as not reached', async (t) => {
        const proxyToNowhere = await h.startProxy({ upstream: await deadUrl() });
        const permit = await h.permit({ id: 'order-u' });
        const response = await call(proxyToNowhere.url, '/echo/order-u', { token: permit.token });
        t.equal(response.status, 502);
        t.match(response.json(), { error: 'upstream_unavailable', status: 502, reason: 'UPSTREAM_NOT_REACHED' });
        const execution = await eventually('the failed execution record', async () =>
          (await h.records()).find((record) => record.kind === 'execution.observed' && record.permit_id === permit.id),
        );
        t.match(execution, { upstream: 'not_reached', code: 'UPSTREAM_REFUSED', upstream_status: '' });
        const text = await proxyToNowhere.metrics.registry.metrics();
        t.match(text, /countersign_proxy_upstream_errors_total\{route="echo"\} 1/);
        t.match(text, /countersign_proxy_requests_total\{route="echo",outcome="upstream_error"\} 1/);
      });

      await t.test('unmatched: pass streams through untouched, deny refuses', async (t) => {
        const before = received.length;
        // pass is an explicit choice (the default in enforce mode is deny).
        proxy.setConfig(proxyConfig(h.authority.acme.id, h.upstream.url, { unmatched: 'pass' }));
        // The client sends the rest only once the upstream has the first bytes: a proxy that
        // buffered the body would deadlock here (bounded by the test timeout) instead of passing.
        const firstArrived = new Promise<void>((resolve) => {
          h.upstream.onFirstChunk = (url) => {
            if (url.startsWith('/plain/thing')) resolve();
          };
        });
        const body = Readable.from(
          (async function* () {
            yield Buffer.from('first,');
            await firstArrived;
            yield Buffer.from('second,');
            yield Buffer.from('third');
          })(),
        );
        const response = await call(proxy.url, '/plain/thing?a=1&a=2', {
          body,
          headers: { 'x-custom': 'kept' },
          actor: null,
        });
        t.equal(response.status, 201);
        const got = received[before]!;
        t.match(got, { method: 'POST', url: '/plain/thing?a=1&a=2', body: 'first,second,third' });
        t.equal(got.headers['x-custom'], 'kept');
        t.equal(got.headers['transfer-encoding'], 'chunked', 'streamed: the length was unknown when forwarding began');
        h.upstream.onFirstChunk = null;
        t.notOk('x-countersign-mode' in got.headers, 'no gate headers on a pass-through');

        proxy.setConfig(proxyConfig(h.authority.acme.id, h.upstream.url, { unmatched: 'deny' }));
        const denied = await call(proxy.url, '/plain/thing', { actor: null });
        t.equal(denied.status, 403);
        t.match(denied.json(), { error: 'forbidden', reason: 'UNMATCHED_ROUTE' });
        t.equal(received.length, before + 1, 'the denied request did not reach the upstream');
        proxy.setConfig(h.config);
      });

      await t.test('body-bound route: the body binds, and over max_body_bytes → 503', async (t) => {
        const before = received.length;
        const permit = await h.permit({ id: 'order-b' });
        const ok = await call(proxy.url, '/b/echo', { token: permit.token, body: '{"id":"order-b"}' });
        t.equal(ok.status, 201);
        t.equal(received.at(-1)!.body, '{"id":"order-b"}', 'the buffered body went upstream');
        const big = await h.permit({ id: 'order-big' });
        const tooLarge = await call(proxy.url, '/b/echo', { token: big.token, body: JSON.stringify({ id: 'order-big', pad: 'x'.repeat(200) }) });
        t.equal(tooLarge.status, 503);
        t.match(tooLarge.json(), { error: 'gate_unavailable', reason: 'BODY_TOO_LARGE' });
        t.equal(received.length, before + 1, 'the oversized request did not reach the upstream');
      });

      await t.test('upgrades: piped through on unmatched paths, refused on gated routes', async (t) => {
        const echo = await startUpgradeEcho(t);
        const upgrading = await h.startProxy({ upstream: echo.url });
        upgrading.setConfig(proxyConfig(h.authority.acme.id, echo.url, { unmatched: 'pass' }));
        const passed = await rawExchange(upgrading.url, 'GET /ws/chat HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nX-Service-Permit: secret\r\n\r\n', 'ping');
        t.match(passed, /^HTTP\/1\.1 101 /, 'the upstream switched protocols');
        t.match(passed, /echo:ping$/, 'bytes flow both ways after the upgrade');
        t.notOk(echo.heads[0]?.includes('secret'), 'the permit header was not passed on');
        const refused = await rawExchange(upgrading.url, 'POST /echo/order-1 HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nContent-Length: 0\r\n\r\n', '');
        t.match(refused, /^HTTP\/1\.1 403 /);
        t.match(refused, /"reason":"UPGRADE_ON_GATED_ROUTE"/);
        t.equal(echo.heads.length, 1, 'the refused upgrade never reached the upstream');
      });

      await t.test('bad input does not take the proxy down', async (t) => {
        const garbage = await rawExchange(proxy.url, 'NOT A REQUEST\r\n\r\n', '');
        t.match(garbage, /^HTTP\/1\.1 400 /, 'a malformed request line → 400');
        const star = await rawExchange(proxy.url, 'OPTIONS * HTTP/1.1\r\nHost: x\r\n\r\n', '');
        t.match(star, /^HTTP\/1\.1 400 [\s\S]*"error":"invalid_request"/, 'a non-path target → 400 envelope');
        // A client that sends half a body and leaves.
        await new Promise<void>((resolve) => {
          const socket = connect(Number(new URL(proxy.url).port), '127.0.0.1', () => {
            socket.end('POST /plain/half HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\nonly a little');
            socket.destroy();
            resolve();
          });
        });
        const weird = await call(proxy.url, '/echo/%E0%A4%A', { headers: { 'x-request-id': 'has spaces in it' } });
        t.equal(weird.status, 400, 'a malformed escape is refused as ambiguous, not a crash');
        t.match(weird.json(), { error: 'invalid_request', reason: 'AMBIGUOUS_PATH' });
        t.not(weird.headers['x-request-id'], 'has spaces in it', 'an insane request id is replaced');
        t.equal((await call(proxy.url, '/s/echo/after')).status, 201, 'still serving');
      });

      await t.test('the metrics text is Prometheus exposition with the documented series', async (t) => {
        proxy.metrics.setRouteModes(h.config.routes);
        proxy.metrics.recordConfigReload(true);
        proxy.metrics.keyRefreshes.inc({ result: 'ok' });
        const text = await proxy.metrics.registry.metrics();
        const bad = text.split('\n').filter((line) => line !== '' && !line.startsWith('#') && !PROM_LINE.test(line));
        t.same(bad, [], 'every sample line parses');
        for (const name of [
          'countersign_proxy_requests_total',
          'countersign_proxy_verifications_total',
          'countersign_proxy_request_duration_seconds',
          'countersign_proxy_verification_duration_seconds',
          'countersign_proxy_upstream_errors_total',
          'countersign_proxy_store_errors_total',
          'countersign_proxy_route_mode',
          'countersign_proxy_config_reload_success',
          'countersign_proxy_config_reload_timestamp_seconds',
          'countersign_proxy_key_refreshes_total',
          'countersign_proxy_record_append_failures_total',
        ]) {
          t.match(text, new RegExp(`^# TYPE ${name} `, 'm'), `${name} is exposed`);
        }
        t.match(text, /countersign_proxy_route_mode\{route="echo-shadow",mode="shadow"\} 1/);
        t.match(text, /countersign_proxy_requests_total\{route="echo",outcome="forwarded"\} \d+/);
        t.match(text, /countersign_proxy_requests_total\{route="unmatched",outcome="passthrough"\} 1/);
        t.match(text, /countersign_proxy_requests_total\{route="unmatched",outcome="denied_unmatched"\} \d+/);
        t.match(text, /countersign_proxy_requests_total\{route="unmatched",outcome="refused_ambiguous"\} \d+/);
        t.notMatch(text, /order-|\/echo\//, 'no raw URLs or ids in labels');
      });
    }),
  );
}

if (realServersMissing()) t.comment(`the Postgres + Redis variant did not run: ${realServersMissing()}`);
