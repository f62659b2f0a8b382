/**
 * The Envoy external authorizer where Envoy's edges meet the gate's, on both transports and
 * against the forwarding sidecar: request heads as large as Envoy accepts (60 KiB), header-bound
 * facts that are not ASCII (`X-Actor-Id: démo-agent`, sent as its UTF-8 bytes, read the same way
 * over gRPC `headers`, gRPC `header_map`, HTTP and the sidecar; bytes that are not UTF-8 never
 * match), and gRPC's standard health service (grpc.health.v1) reporting readiness as `/readyz`
 * does, asked by a real @grpc/grpc-js client. Runs on PGlite + the in-process store, and the
 * health cases on a Redis of the test's own that is killed and restarted.
 *
 * @example
 *   node test/run.mjs --disable-coverage test/integration/ext-authz-envoy-edges.test.ts
 */
import { credentials, status, type Client, type ClientReadableStream, type ServiceError } from '@grpc/grpc-js';
import t, { type Test } from 'tap';
import { request } from 'undici';
import { AUTHORIZATION_SERVICE_NAME, healthService, SERVING_STATUS, type HealthCheckRequest, type HealthCheckResponse } from '../../proxy/ext-authz/protos.js';
import { RedisStore } from '../../shared/store/redis.js';
import { EvaluateResponse } from '../../shared/wire/evaluate.js';
import { appBackends } from '../helpers/backends.js';
import { oneRulePolicy } from '../helpers/one-rule-policy.js';
import { startExtAuthz, type ExtAuthzUnderTest } from '../helpers/ext-authz-harness.js';
import { call, eventually, withHarness, type Harness } from '../helpers/proxy-harness.js';
import { startRedisProcess } from '../helpers/redis-process.js';

const backend = appBackends()[0]!;

/** A permit the authority evaluated for `actor` on target `id` (the echo route's binding). */
async function permitFor(h: Harness, actor: string, id: string): Promise<{ token: string; id: string }> {
  const response = await request(`${h.authorityUrl}/v1/evaluate`, {
    method: 'POST',
    headers: { authorization: `Bearer ${h.authority.acmeAdmin}`, 'content-type': 'application/json' },
    body: JSON.stringify({ action_type: 'demo.echo', actor_id: actor, context: { environment: 'dev', target: { type: 'demo', id } } }),
  });
  const decision = EvaluateResponse.parse(await response.body.json());
  if (!decision.permit_token || !decision.permit_id) throw new Error(`no permit for ${actor}`);
  return { token: decision.permit_token, id: decision.permit_id };
}

type HealthClient = Client & {
  Check(request: HealthCheckRequest, callback: (error: ServiceError | null, response?: HealthCheckResponse) => void): void;
  Watch(request: HealthCheckRequest): ClientReadableStream<HealthCheckResponse>;
};

function healthClient(t: Test, authz: ExtAuthzUnderTest): HealthClient {
  const Health = healthService();
  const client = new Health(authz.grpcAddress, credentials.createInsecure()) as unknown as HealthClient;
  t.teardown(() => client.close());
  return client;
}

/** grpc.health.v1 Check: the status, or the call's error code. */
function healthCheck(client: HealthClient, service: string): Promise<number | { code: number }> {
  return new Promise((resolve) => client.Check({ service }, (error, response) => resolve(error ? { code: error.code } : (response?.status ?? SERVING_STATUS.UNKNOWN))));
}

/** The first status a Watch answers, then the watch is cancelled. */
function firstWatched(client: HealthClient, service: string): Promise<number> {
  return new Promise((resolve, reject) => {
    const stream = client.Watch({ service });
    stream.once('data', (message: HealthCheckResponse) => {
      resolve(message.status ?? SERVING_STATUS.UNKNOWN);
      stream.cancel();
    });
    stream.on('error', (error: ServiceError) => {
      if (error.code !== status.CANCELLED) reject(error);
    });
  });
}

t.test('ext_authz at Envoy\'s edges', (t) =>
  withHarness(t, backend, async (h) => {
    const authz = await startExtAuthz(t, h);

    await t.test('HTTP: a 20 KiB header (Envoy accepts 60 KiB and always sends Authorization) reaches the gate on every path', async (t) => {
      const bearer = `Bearer ${'a'.repeat(20 * 1024)}`;
      const permit = await h.permit({ id: 'big-head' });
      const verdict = await authz.check('http', { path: '/echo/big-head', token: permit.token, headers: { authorization: bearer } });
      t.equal(verdict.allowed, true, 'a check with a 20 KiB Authorization header is decided');
      const healthz = await fetch(`${authz.httpUrl}/healthz`, { headers: { authorization: bearer } });
      t.equal(healthz.status, 403, '/healthz is a path like any other: placed, not refused by node:http');
      t.match(await healthz.json(), { error: 'forbidden', reason: 'UNMATCHED_ROUTE' }, 'the envelope, not a bare 431');
      const tooLarge = await fetch(`${authz.httpUrl}/healthz`, { headers: { authorization: `Bearer ${'a'.repeat(70 * 1024)}` } });
      t.equal(tooLarge.status, 431, 'past Envoy\'s limit (and the check request\'s own headers), node:http still refuses');
    });

    await t.test('a non-ASCII header-bound fact binds on every transport and on the sidecar; bytes that are not UTF-8 never do', async (t) => {
      // A policy that lets any actor run demo.* (the example policy names demo-agent alone).
      const published = await request(`${h.authorityUrl}/v1/policies`, {
        method: 'PUT',
        headers: { authorization: `Bearer ${h.authority.acmeAdmin}`, 'content-type': 'application/json' },
        body: JSON.stringify({ source: oneRulePolicy('false', { actionPrefix: 'demo' }), format: 'yaml' }),
      });
      t.equal(published.statusCode, 200, (await published.body.text()).slice(0, 300));
      const proxy = await h.startProxy();
      const actor = 'démo-agent';
      const latin1 = Buffer.from(actor, 'latin1'); // d, 0xE9, mo-agent: not UTF-8
      const cases = [
        { name: 'gRPC headers', transport: 'grpc' as const },
        { name: 'gRPC header_map', transport: 'grpc' as const, rawHeaders: [] as Array<[string, string]> },
        { name: 'HTTP', transport: 'http' as const },
      ];
      for (const [i, { name, transport, rawHeaders }] of cases.entries()) {
        const permit = await permitFor(h, actor, `utf8-${i}`);
        const path = `/echo/utf8-${i}`;
        const wrong = await authz.check(transport, { path, token: permit.token, actorBytes: latin1, ...(rawHeaders ? { rawHeaders } : {}) });
        t.match(wrong.body, { status: 403, error: 'permit_rejected', reason: 'BINDING_MISMATCH' }, `${name}: the latin1 bytes of démo-agent are refused`);
        const verdict = await authz.check(transport, { path, token: permit.token, actor, ...(rawHeaders ? { rawHeaders } : {}) });
        t.equal(verdict.allowed, true, `${name}: X-Actor-Id démo-agent (UTF-8) binds the permit evaluated for démo-agent`);
        t.equal(verdict.set['x-countersign-permit-id'], permit.id, `${name}: the refusal left the permit unused`);
      }
      const permit = await permitFor(h, actor, 'utf8-sidecar');
      const wrong = await call(proxy.url, '/echo/utf8-sidecar', { token: permit.token, actor: latin1.toString('latin1') });
      t.equal(wrong.status, 403, 'sidecar: the latin1 bytes are refused');
      t.match(wrong.json(), { reason: 'BINDING_MISMATCH' });
      const forwarded = await call(proxy.url, '/echo/utf8-sidecar', { token: permit.token, actor: Buffer.from(actor, 'utf8').toString('latin1') });
      t.equal(forwarded.status, 201, 'sidecar: the UTF-8 bytes bind and the request is forwarded');
      const replacement = await permitFor(h, 'd\ufffdmo-agent', 'utf8-fffd');
      const lossy = await authz.check('grpc', { path: '/echo/utf8-fffd', token: replacement.token, actorBytes: latin1 });
      t.match(lossy.body, { reason: 'BINDING_MISMATCH' }, 'gRPC headers: invalid bytes read leniently as U+FFFD do not match a permit for an actor spelled with U+FFFD');
    });

    await t.test('grpc.health.v1: SERVING for "" and the ext_authz service, NOT_FOUND for another; Watch answers the status', async (t) => {
      const health = healthClient(t, authz);
      t.equal(await healthCheck(health, ''), SERVING_STATUS.SERVING, 'the server as a whole');
      t.equal(await healthCheck(health, AUTHORIZATION_SERVICE_NAME), SERVING_STATUS.SERVING, AUTHORIZATION_SERVICE_NAME);
      t.same(await healthCheck(health, 'no.such.Service'), { code: status.NOT_FOUND }, 'an unknown service: NOT_FOUND');
      t.equal(await firstWatched(health, ''), SERVING_STATUS.SERVING, 'Watch: the current status at once');
      t.equal(await firstWatched(health, 'no.such.Service'), SERVING_STATUS.SERVICE_UNKNOWN, 'Watch of an unknown service: SERVICE_UNKNOWN');
    });

    await t.test('grpc.health.v1: NOT_SERVING while Redis is down, SERVING again once it is back (as /readyz)', async (t) => {
      const redis = await startRedisProcess(t, { persistence: 'none' });
      if (!redis) return;
      const store = new RedisStore({ url: redis.url });
      t.teardown(() => store.close());
      const health = healthClient(t, await startExtAuthz(t, h, { store }));
      t.equal(await healthCheck(health, ''), SERVING_STATUS.SERVING, 'ready while Redis answers');
      await redis.crash();
      t.equal(await healthCheck(health, ''), SERVING_STATUS.NOT_SERVING, 'Redis down: NOT_SERVING');
      t.equal(await healthCheck(health, AUTHORIZATION_SERVICE_NAME), SERVING_STATUS.NOT_SERVING, `Redis down: ${AUTHORIZATION_SERVICE_NAME} NOT_SERVING`);
      t.equal(await firstWatched(health, AUTHORIZATION_SERVICE_NAME), SERVING_STATUS.NOT_SERVING, 'Watch says so too');
      await redis.start();
      await eventually('SERVING after the restart', async () => ((await healthCheck(health, '')) === SERVING_STATUS.SERVING ? true : undefined));
      t.pass('SERVING again once Redis is back');
    });
  }),
);
