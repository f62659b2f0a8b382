/**
 * The gate as an Envoy external authorizer, both transports over loopback: a real @grpc/grpc-js
 * client on the same .proto files calling `envoy.service.auth.v3.Authorization/Check`, and an
 * HTTP client sending Envoy's `http_service` check request (test/helpers/ext-authz-harness.ts),
 * against a real authority's permits and the SAME shared store. Each case asks both transports
 * and expects what the forwarding proxy's tests expect: the same refusals (status, code, reason,
 * envelope), the same counting, and the same verification records. Runs on PGlite + the
 * in-process store, and on Postgres + Redis when available.
 *
 * @example
 *   node test/run.mjs --disable-coverage test/integration/ext-authz.test.ts
 */
import t, { type Test } from 'tap';
import { call, proxyConfig, withHarness, eventually } from '../helpers/proxy-harness.js';
import { appBackends, realServersMissing } from '../helpers/backends.js';
import { downStore } from '../helpers/loopback.js';
import { startExtAuthz, TRANSPORTS, type ClientRequest, type ExtAuthzUnderTest, type Transport, type Verdict } from '../helpers/ext-authz-harness.js';
import { tamperSignature } from '../helpers/permit-tokens.js';
import type { Harness } from '../helpers/proxy-harness.js';

/** The gRPC status a denial carries for each HTTP status. */
const GRPC_FOR: Record<number, number> = { 400: 3, 403: 7, 503: 14, 500: 13 };

const counted = async (authz: ExtAuthzUnderTest, labels: Record<string, string>, metric: 'verifications' | 'requests' | 'extAuthzChecks' = 'verifications') =>
  (await authz.metrics[metric].get()).values.find((value) => Object.entries(labels).every(([name, want]) => (value.labels as Record<string, unknown>)[name] === want))?.value ?? 0;

for (const backend of appBackends()) {
  t.test(`the Envoy external authorizer on ${backend.name}`, (t) =>
    withHarness(t, backend, async (h: Harness) => {
      const authz = await startExtAuthz(t, h);
      const recordsOf = async (permitId: string) => (await h.records()).filter((record) => record.permit_id === permitId);

      /** Asserts a denial: status, envelope, headers, gRPC code, and (for the gate's refusals) one more verification counted with the reason. */
      const expectDenied = async (tt: Test, transport: Transport, name: string, request: ClientRequest, status: number, code: string, reason: string, route = 'echo') => {
        const before = await counted(authz, { route, reason });
        const verdict = await authz.check(transport, request);
        tt.equal(verdict.allowed, false, `${transport} ${name}: denied`);
        tt.equal(verdict.status, status, `${transport} ${name}: status`);
        tt.match(verdict.body, { error: code, status, reason, message: String, request_id: String }, `${transport} ${name}: the error envelope`);
        tt.match(verdict.headers['content-type'], /^application\/json/, `${transport} ${name}: JSON`);
        tt.equal(verdict.headers['x-request-id'], verdict.body?.request_id, `${transport} ${name}: the request id, in the header and the envelope`);
        if (transport === 'grpc') tt.equal(verdict.grpcCode, GRPC_FOR[status], `grpc ${name}: google.rpc.Status ${GRPC_FOR[status]}`);
        // Placement refusals (forbidden, invalid_request) never reach the gate, as in the proxy.
        if (['permit_required', 'permit_rejected', 'gate_unavailable'].includes(code)) {
          tt.equal(await counted(authz, { route, reason }), before + 1, `${transport} ${name}: countersign_proxy_verifications_total{route="${route}",reason="${reason}"} counted it`);
        }
        return verdict;
      };

      for (const transport of TRANSPORTS) {
        await t.test(`${transport}: a permitted request is allowed once, with the gate's headers, and a replay is refused`, async (t) => {
          const permit = await h.permit({ id: `ok-${transport}` });
          const allowedBefore = await counted(authz, { route: 'echo', outcome: 'allowed' }, 'requests');
          const verdict = await authz.check(transport, { path: `/echo/ok-${transport}?x=1`, token: permit.token, headers: { 'x-request-id': `envoy-${transport}-1` } });
          t.equal(verdict.allowed, true);
          t.same(verdict.set, { 'x-countersign-mode': 'enforce', 'x-countersign-permit-id': permit.id }, 'the permit id and the mode go upstream');
          t.same(verdict.remove, ['x-service-permit'], 'the permit header is removed');
          t.equal(await counted(authz, { route: 'echo', outcome: 'allowed' }, 'requests'), allowedBefore + 1, 'countersign_proxy_requests_total{route="echo",outcome="allowed"}');
          t.equal(await counted(authz, { transport, outcome: 'allowed' }, 'extAuthzChecks'), 1, `countersign_proxy_ext_authz_checks_total{transport="${transport}",outcome="allowed"}`);

          const replay = await expectDenied(t, transport, 'replay', { path: `/echo/ok-${transport}`, token: permit.token }, 403, 'permit_rejected', 'PERMIT_ALREADY_USED');
          t.ok(replay.body?.request_id, 'a request id is made when Envoy sends none');
          const records = await recordsOf(permit.id);
          t.same(records.map((record) => record.kind), ['permit.verified', 'permit.rejected'], 'verified once, then the replay refused; no execution.observed (Envoy forwards)');
          t.match(records[0], { gate: 'proxy:echo', mode: 'enforce', request_id: `envoy-${transport}-1`, actor_id: 'demo-agent', action_type: 'demo.echo' });
          t.match(records[1], { gate: 'proxy:echo', code: 'PERMIT_ALREADY_USED' });
        });

        await t.test(`${transport}: refusals as the proxy answers them`, async (t) => {
          await expectDenied(t, transport, 'no permit', { path: '/echo/order-1' }, 403, 'permit_required', 'MISSING_PERMIT');
          const bound = await h.permit({ id: `bound-${transport}` });
          await expectDenied(t, transport, 'another target', { path: `/echo/other-${transport}`, token: bound.token }, 403, 'permit_rejected', 'BINDING_MISMATCH');
          const tampered = await h.permit({ id: `tampered-${transport}` });
          await expectDenied(t, transport, 'tampered', { path: `/echo/tampered-${transport}`, token: tamperSignature(tampered.token) }, 403, 'permit_rejected', 'PERMIT_INVALID');
          const globex = await h.permit({ id: `globex-${transport}`, admin: h.authority.globexAdmin });
          await expectDenied(t, transport, 'other organization', { path: `/echo/globex-${transport}`, token: globex.token }, 403, 'permit_rejected', 'ORG_MISMATCH');
          const actor = await h.permit({ id: `actor-${transport}` });
          await expectDenied(t, transport, 'no actor header', { path: `/echo/actor-${transport}`, token: actor.token, actor: null }, 403, 'permit_rejected', 'BINDING_MISMATCH');
          const staging = await h.permit({ id: `staging-${transport}` });
          await expectDenied(t, transport, 'wrong environment', { path: `/staging/echo/staging-${transport}`, token: staging.token }, 403, 'permit_rejected', 'BINDING_MISMATCH', 'echo-staging');
          // The refused permits were never consumed: each still opens its own request.
          const after = await authz.check(transport, { path: `/echo/bound-${transport}`, token: bound.token });
          t.equal(after.allowed, true, 'a permit refused for another target stays usable for its own');
          const rejected = (await recordsOf(bound.id)).map((record) => [record.kind, record.code]);
          t.same(rejected, [['permit.rejected', 'BINDING_MISMATCH'], ['permit.verified', '']], 'the refusal and the later use, recorded in order');
        });

        await t.test(`${transport}: what no permit can open`, async (t) => {
          await expectDenied(t, transport, 'unmatched', { path: '/plain/thing' }, 403, 'forbidden', 'UNMATCHED_ROUTE');
          await expectDenied(t, transport, 'ambiguous path', { path: '/x/../echo/1' }, 400, 'invalid_request', 'AMBIGUOUS_PATH');
          await expectDenied(t, transport, 'method override', { path: '/plain/thing', headers: { 'x-http-method-override': 'POST' } }, 400, 'invalid_request', 'METHOD_OVERRIDE');
          t.ok((await counted(authz, { route: 'unmatched', outcome: 'denied_unmatched' }, 'requests')) > 0, 'counted as denied_unmatched');
          t.ok((await counted(authz, { route: 'unmatched', outcome: 'refused_ambiguous' }, 'requests')) > 0, 'counted as refused_ambiguous');
          // Only the gRPC CheckRequest can carry Upgrade: it is hop-by-hop, not a header Envoy's HTTP check request passes on.
          if (transport === 'grpc') {
            const permit = await h.permit({ id: 'order-upgrade' });
            await expectDenied(t, transport, 'upgrade on a gated route', { path: '/echo/order-upgrade', token: permit.token, headers: { upgrade: 'websocket' } }, 403, 'forbidden', 'UPGRADE_ON_GATED_ROUTE');
            t.same(await recordsOf(permit.id), [], 'the permit was not touched');
          }
        });

        await t.test(`${transport}: body facts from the buffered body; without the whole body, fail closed and keep the permit`, async (t) => {
          const permit = await h.permit({ id: `body-${transport}` });
          const body = JSON.stringify({ id: `body-${transport}` });
          await expectDenied(t, transport, 'the flag filtered out', { path: '/b/echo', token: permit.token, body, envoySends: 'body-without-flag' }, 503, 'gate_unavailable', 'BODY_NOT_SENT', 'echo-body');
          if (transport === 'grpc') {
            // Over HTTP, Envoy's check request then has Content-Length 0: a request without a body (below).
            await expectDenied(t, transport, 'with_request_body off', { path: '/b/echo', token: permit.token, body, envoySends: 'nothing' }, 503, 'gate_unavailable', 'BODY_NOT_SENT', 'echo-body');
          }
          await expectDenied(t, transport, 'partial body', { path: '/b/echo', token: permit.token, body: body.slice(0, 5), partial: true }, 503, 'gate_unavailable', 'BODY_TOO_LARGE', 'echo-body');
          const big = JSON.stringify({ id: `body-${transport}`, pad: 'x'.repeat(200) });
          await expectDenied(t, transport, 'body over max_body_bytes', { path: '/b/echo', token: permit.token, body: big }, 503, 'gate_unavailable', 'BODY_TOO_LARGE', 'echo-body');
          const other = JSON.stringify({ id: 'someone-else' });
          await expectDenied(t, transport, 'another id in the body', { path: '/b/echo', token: permit.token, body: other }, 403, 'permit_rejected', 'BINDING_MISMATCH', 'echo-body');
          const ok = await authz.check(transport, { path: '/b/echo', token: permit.token, body, packAsBytes: true });
          t.equal(ok.allowed, true, 'the whole body binds; the permit survived every refusal above');
          t.equal(ok.set['x-countersign-permit-id'], permit.id);
          if (transport === 'grpc') {
            const asText = await h.permit({ id: 'body-text' });
            const text = await authz.check('grpc', { path: '/b/echo', token: asText.token, body: JSON.stringify({ id: 'body-text' }) });
            t.equal(text.allowed, true, 'http.body (text) binds as http.raw_body (bytes) does');
          }
        });

        await t.test(`${transport}: a request without a body on a body-bound route gets the forwarding sidecar's answer`, async (t) => {
          const proxy = await h.startProxy();
          const permit = await h.permit({ id: `no-body-${transport}` });
          const sidecar = await call(proxy.url, '/b/echo', { token: permit.token, body: '' });
          t.equal(sidecar.status, 403, 'the sidecar refuses it: the bound fact is absent');
          const verdict = await expectDenied(t, transport, 'no body', { path: '/b/echo', token: permit.token }, 403, 'permit_rejected', 'BINDING_MISMATCH', 'echo-body');
          t.match(verdict.body, { error: sidecar.json().error, reason: sidecar.json().reason, status: sidecar.status }, 'the same code, reason and status as the sidecar');
          if (transport === 'http') {
            const off = await authz.check('http', { path: '/b/echo', token: permit.token, body: '{"id":"x"}', envoySends: 'nothing' });
            t.match(off.body, { status: 403, reason: 'BINDING_MISMATCH' }, 'with_request_body off looks the same over HTTP: Content-Length 0, no flag');
          }
          const whole = await authz.check(transport, { path: '/b/echo', token: permit.token, body: JSON.stringify({ id: `no-body-${transport}` }) });
          t.equal(whole.allowed, true, 'refused before the permit was touched: it still opens the request with its body');
        });

        await t.test(`${transport}: shadow allows, and records and counts what enforce would have refused`, async (t) => {
          const before = await counted(authz, { route: 'echo-shadow', outcome: 'would_block' }, 'requests');
          const requestId = `shadow-${transport}`;
          const verdict = await authz.check(transport, { path: '/s/echo/order-s', headers: { 'x-request-id': requestId, 'x-countersign-permit-id': 'forged' } });
          t.equal(verdict.allowed, true, 'allowed without a permit');
          t.same(verdict.set, { 'x-countersign-mode': 'shadow' });
          t.same(verdict.remove.sort(), ['x-countersign-permit-id', 'x-service-permit'], 'no permit id goes upstream, not even a forged one');
          t.equal(await counted(authz, { route: 'echo-shadow', outcome: 'would_block' }, 'requests'), before + 1, 'countersign_proxy_requests_total{route="echo-shadow",outcome="would_block"}');
          t.equal(await counted(authz, { transport, outcome: 'would_block' }, 'extAuthzChecks'), 1, `counted for ${transport}`);
          const record = await eventually('the shadow refusal record', async () => (await h.records()).find((r) => r.request_id === requestId));
          t.match(record, { kind: 'permit.rejected', mode: 'shadow', gate: 'proxy:echo-shadow', code: 'MISSING_PERMIT' });
        });
      }

      await t.test('unmatched: pass allows untouched but for the gate\'s own headers; a reload reaches both transports', async (t) => {
        authz.setConfig(proxyConfig(h.authority.acme.id, h.upstream.url, { unmatched: 'pass' }));
        for (const transport of TRANSPORTS) {
          const verdict = await authz.check(transport, { path: '/plain/thing', token: 'not-for-upstream' });
          t.equal(verdict.allowed, true, `${transport}: allowed`);
          t.same(verdict.set, {}, `${transport}: nothing added`);
          t.same(verdict.remove.sort(), ['x-countersign-mode', 'x-countersign-permit-id', 'x-service-permit'], `${transport}: the permit and x-countersign-* headers removed`);
        }
        t.equal(await counted(authz, { route: 'unmatched', outcome: 'passthrough' }, 'requests'), 2);
        authz.setConfig(h.config);
        for (const transport of TRANSPORTS) t.equal((await authz.check(transport, { path: '/plain/thing' })).status, 403, `${transport}: denied again after the reload`);
      });

      await t.test('store down → 503 gate_unavailable on both transports, and the permit stays usable', async (t) => {
        const down = await startExtAuthz(t, h, { store: downStore() });
        const permit = await h.permit({ id: 'order-down' });
        for (const transport of TRANSPORTS) {
          const verdict = await down.check(transport, { path: '/echo/order-down', token: permit.token });
          t.equal(verdict.status, 503, `${transport}: 503`);
          t.match(verdict.body, { error: 'gate_unavailable', status: 503, reason: 'INTERNAL_ERROR' });
          t.equal(verdict.headers['retry-after'], '1', `${transport}: Retry-After`);
          if (transport === 'grpc') t.equal(verdict.grpcCode, 14, 'UNAVAILABLE');
        }
        t.match(await down.metrics.registry.metrics(), /countersign_proxy_store_errors_total 2/);
        t.match(await down.metrics.registry.metrics(), /countersign_proxy_verifications_total\{route="echo",result="unavailable",reason="INTERNAL_ERROR"\} 2/);
        t.equal((await authz.check('grpc', { path: '/echo/order-down', token: permit.token })).allowed, true, 'used once the store answers');
      });

      await t.test('gRPC: raw headers (header_map), a repeated permit header, and a request without HTTP attributes', async (t) => {
        const permit = await h.permit({ id: 'order-raw' });
        const raw = await authz.check('grpc', { path: '/echo/order-raw', token: permit.token, rawHeaders: [] });
        t.equal(raw.allowed, true, 'header_map (encode_raw_headers) reads like headers');
        const twice = await h.permit({ id: 'order-twice' });
        const repeated = await authz.check('grpc', { path: '/echo/order-twice', token: twice.token, rawHeaders: [['x-service-permit', twice.token]] });
        t.match(repeated.body, { error: 'permit_rejected', reason: 'PERMIT_INVALID' }, 'a permit header sent twice is ambiguous');
        const empty = await authz.grpcCheck({});
        t.equal(empty.status.code, 3, 'INVALID_ARGUMENT');
        t.match(JSON.parse(empty.denied_response?.body ?? '{}'), { error: 'invalid_request', reason: 'NOT_HTTP' });
      });

      await t.test('HTTP: path_prefix is taken off the path; a path without it is refused', async (t) => {
        const prefixed = await startExtAuthz(t, h, { pathPrefix: '/authz' });
        const permit = await h.permit({ id: 'order-prefix' });
        const verdict = await prefixed.check('http', { path: '/echo/order-prefix', token: permit.token });
        t.equal(verdict.allowed, true, '/authz/echo/order-prefix is /echo/order-prefix');
        t.equal(verdict.set['x-countersign-permit-id'], permit.id);
        const response = await fetch(`${prefixed.httpUrl}/echo/order-prefix`, { method: 'POST' });
        t.equal(response.status, 400);
        t.match(await response.json(), { error: 'invalid_request', reason: 'PATH_PREFIX_MISMATCH' });
      });

      await t.test('one gate: a permit used through one transport is spent for the other', async (t) => {
        const permit = await h.permit({ id: 'order-both' });
        const request: ClientRequest = { path: '/echo/order-both', token: permit.token };
        t.equal((await authz.check('http', request)).allowed, true);
        const verdict: Verdict = await authz.check('grpc', request);
        t.match(verdict.body, { error: 'permit_rejected', reason: 'PERMIT_ALREADY_USED' });
      });
    }),
  );
}

if (realServersMissing()) t.comment(`the Postgres + Redis variant did not run: ${realServersMissing()}`);
