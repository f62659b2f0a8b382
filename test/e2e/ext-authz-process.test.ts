/**
 * `countersign proxy` as an Envoy external authorizer (`startProxy` with `ext_authz`), on loopback:
 * a test authority on a real port, proxy.yaml in a temporary directory, the authority's store
 * shared. Covers ext_authz only (no upstream, no forwarding listener), readiness per listener, a
 * reload reaching both transports, one gate behind the forwarding listener and the authorizer, and
 * close() letting a check in flight finish. Waiting is bounded polling only; no timing assertions.
 *
 * @example
 *   node test/run.mjs --disable-coverage test/e2e/ext-authz-process.test.ts
 */
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { createServer } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { credentials, type Client, type ServiceError } from '@grpc/grpc-js';
import t, { type Test } from 'tap';
import { request } from 'undici';
import { authorizationService, type CheckRequest, type CheckResponse } from '../../proxy/ext-authz/protos.js';
import { startProxy, type RunningProxy, type StartProxyOptions } from '../../proxy/main.js';
import { createLogger } from '../../shared/logging.js';
import type { SharedStore } from '../../shared/store/types.js';
import { EvaluateResponse } from '../../shared/wire/evaluate.js';
import { createTestAuthority, GENEROUS_LIMITS } from '../helpers/authority.js';
import { appBackends, realServersMissing } from '../helpers/backends.js';
import { ManualClock } from '../helpers/clock.js';
import { checkRequest, fromCheckResponse, type ClientRequest } from '../helpers/ext-authz-harness.js';
import { closeServer, listen } from '../helpers/loopback.js';
import { echoRoutesYaml } from '../helpers/echo-route.js';

interface YamlOptions {
  organization: string;
  authorityUrl: string;
  keyFile: string;
  mode?: string;
  /** Forward to this upstream beside the authorizer; without it, ext_authz only. */
  upstream?: string;
}

function proxyYaml(o: YamlOptions): string {
  return `${o.upstream !== undefined ? `listen: 127.0.0.1:0\nupstream: ${o.upstream}\n` : ''}admin_listen: 127.0.0.1:0
authority:
  url: ${o.authorityUrl}
  api_key_file: ${o.keyFile}
organization: ${o.organization}
log_level: silent
ext_authz:
  only: ${o.upstream === undefined}
  grpc: { listen: 127.0.0.1:0 }
  http: { listen: 127.0.0.1:0 }
${echoRoutesYaml(o.mode)}`;
}

type CheckClient = Client & { Check(request: CheckRequest, callback: (error: ServiceError | null, response?: CheckResponse) => void): void };

function grpcClient(t: Test, address: string): CheckClient {
  const client = new (authorizationService())(address, credentials.createInsecure()) as unknown as CheckClient;
  t.teardown(() => client.close());
  return client;
}

const grpcCheck = (client: CheckClient, asked: ClientRequest) =>
  new Promise<CheckResponse>((resolve, reject) => client.Check(checkRequest(asked), (error, response) => (error ? reject(error) : resolve(response!))));

async function httpCheck(base: string, path: string, token?: string) {
  const headers: Record<string, string> = { 'x-actor-id': 'demo-agent', ...(token !== undefined ? { 'x-service-permit': token } : {}) };
  const response = await request(`${base}${path}`, { method: 'POST', headers });
  await response.body.text();
  return { status: response.statusCode, headers: response.headers };
}

const readyz = async (proxy: RunningProxy) => {
  const response = await request(`${proxy.adminUrl}/readyz`);
  return { status: response.statusCode, body: (await response.body.json()) as { status: string; checks: Record<string, string> } };
};

/** A store whose next consume waits until released: a check in flight, on demand. */
function holdingStore(store: SharedStore) {
  let hold: { entered: () => void; released: Promise<void> } | null = null;
  const wrapped = new Proxy(store, {
    get(target, property) {
      const value = Reflect.get(target, property, target) as unknown;
      if (property !== 'consumePermit' || typeof value !== 'function') return typeof value === 'function' ? value.bind(target) : value;
      return async (...args: unknown[]) => {
        const current = hold;
        hold = null;
        if (current !== null) {
          current.entered();
          await current.released;
        }
        return (value as (...a: unknown[]) => Promise<unknown>).apply(target, args);
      };
    },
  });
  return {
    store: wrapped,
    /** The next consume waits for `release()`; `entered` resolves once it waits. */
    holdNext() {
      let release: () => void = () => undefined;
      let entered: () => void = () => undefined;
      const reached = new Promise<void>((resolve) => (entered = resolve));
      hold = { entered, released: new Promise<void>((resolve) => (release = resolve)) };
      return { reached, release: () => release() };
    },
  };
}

for (const backend of appBackends()) {
  t.test(`countersign proxy as an Envoy external authorizer on ${backend.name}`, async (t) => {
    const clock = new ManualClock(Date.now());
    const opened = await backend.open({ now: () => clock.now() });
    const authority = await createTestAuthority(opened, { config: GENEROUS_LIMITS, clock });
    t.teardown(async () => {
      await authority.close();
      await opened.cleanup();
    });
    const authorityUrl = (await authority.app.listen({ host: '127.0.0.1', port: 0 })).replace('localhost', '127.0.0.1');
    const dir = await mkdtemp(join(tmpdir(), 'countersign-ext-authz-'));
    t.teardown(() => rm(dir, { recursive: true, force: true }));
    const keyFile = join(dir, 'proxy.key');
    await writeFile(keyFile, `${await authority.key(['verify:execute'])}\n`, { mode: 0o600 });
    const base: YamlOptions = { organization: authority.acme.id, authorityUrl, keyFile };
    const holding = holdingStore(opened.store);
    const options: StartProxyOptions = { env: {}, logger: createLogger({ name: 'proxy', level: 'silent' }), store: holding.store, now: () => clock.now(), watch: false };
    const permit = async (id: string) => {
      const response = await request(`${authorityUrl}/v1/evaluate`, {
        method: 'POST',
        headers: { ...authority.bearer(authority.acmeAdmin), 'content-type': 'application/json' },
        body: JSON.stringify({ action_type: 'demo.echo', actor_id: 'demo-agent', context: { environment: 'dev', target: { type: 'demo', id } } }),
      });
      const decision = EvaluateResponse.parse(await response.body.json());
      if (!decision.permit_token || !decision.permit_id) throw new Error(`no permit for ${id}`);
      return { token: decision.permit_token, id: decision.permit_id };
    };

    const file = join(dir, 'proxy.yaml');
    await writeFile(file, proxyYaml(base));
    const proxy = await startProxy(file, options);
    t.teardown(() => proxy.close());
    const client = grpcClient(t, proxy.extAuthz.grpc!);

    await t.test('ext_authz only: no upstream, no forwarding listener; both transports serve and are ready', async (t) => {
      t.equal(proxy.url, '', 'no forwarding listener');
      t.equal(proxy.config().upstream, undefined);
      t.match(proxy.extAuthz.grpc, /^127\.0\.0\.1:[1-9]\d*$/);
      t.match(proxy.extAuthz.http, /^http:\/\/127\.0\.0\.1:[1-9]\d*$/);
      const ready = await readyz(proxy);
      t.equal(ready.status, 200);
      t.same(ready.body, { status: 'ok', checks: { keys: 'ok', store: 'ok', ext_authz_grpc: 'ok', ext_authz_http: 'ok' } });

      const first = await permit('order-1');
      const allowed = fromCheckResponse(await grpcCheck(client, { path: '/echo/order-1', token: first.token }));
      t.same(allowed.set, { 'x-countersign-mode': 'enforce', 'x-countersign-permit-id': first.id }, 'gRPC: allowed with the gate\'s headers');
      const second = await permit('order-2');
      const viaHttp = await httpCheck(proxy.extAuthz.http!, '/echo/order-2', second.token);
      t.equal(viaHttp.status, 200, 'HTTP: allowed');
      t.equal(viaHttp.headers['x-countersign-permit-id'], second.id);
      t.equal((await httpCheck(proxy.extAuthz.http!, '/echo/order-2', second.token)).status, 403, 'HTTP: the replay is refused');
      const metrics = await (await request(`${proxy.adminUrl}/metrics`)).body.text();
      t.match(metrics, /countersign_proxy_requests_total\{route="echo",outcome="allowed"\} 2/);
      t.match(metrics, /countersign_proxy_ext_authz_checks_total\{transport="grpc",outcome="allowed"\} 1/);
      t.match(metrics, /countersign_proxy_ext_authz_checks_total\{transport="http",outcome="blocked"\} 1/);
    });

    await t.test('reload(): a route switched to shadow, on both transports at once', async (t) => {
      await writeFile(file, proxyYaml({ ...base, mode: 'shadow' }));
      t.equal(await proxy.reload(), true);
      const grpcVerdict = fromCheckResponse(await grpcCheck(client, { path: '/echo/order-s' }));
      t.equal(grpcVerdict.allowed, true, 'gRPC: shadow allows without a permit');
      t.same(grpcVerdict.set, { 'x-countersign-mode': 'shadow' });
      t.equal((await httpCheck(proxy.extAuthz.http!, '/echo/order-s')).status, 200, 'HTTP: the same');
      await writeFile(file, proxyYaml({ ...base, upstream: 'http://127.0.0.1:9' }));
      t.equal(await proxy.reload(), true, 'the routes of a file that turns forwarding on apply…');
      t.equal(proxy.config().ext_authz?.only, true, '…but ext_authz needs a restart: still no forwarding listener');
      await writeFile(file, proxyYaml(base));
      t.equal(await proxy.reload(), true);
      t.equal(fromCheckResponse(await grpcCheck(client, { path: '/echo/order-e' })).status, 403, 'enforce again');
    });

    await t.test('one gate behind both front doors: a permit forwarded once is spent for Envoy too', async (t) => {
      const received: string[] = [];
      const upstreamServer = createServer((req, res) => {
        received.push(`${req.method} ${req.url}`);
        req.resume();
        req.on('end', () => res.writeHead(201).end('upstream'));
      });
      const upstream = await listen(upstreamServer);
      t.teardown(() => closeServer(upstreamServer));
      const bothFile = join(dir, 'both.yaml');
      await writeFile(bothFile, proxyYaml({ ...base, upstream }));
      const both = await startProxy(bothFile, options);
      t.teardown(() => both.close());
      t.match(both.url, /^http:\/\/127\.0\.0\.1:[1-9]\d*$/, 'the forwarding listener');
      const used = await permit('order-f');
      const forwarded = await request(`${both.url}/echo/order-f`, { method: 'POST', headers: { 'x-actor-id': 'demo-agent', 'x-service-permit': used.token }, body: '{}' });
      await forwarded.body.text();
      t.equal(forwarded.statusCode, 201);
      t.same(received, ['POST /echo/order-f']);
      const verdict = fromCheckResponse(await grpcCheck(grpcClient(t, both.extAuthz.grpc!), { path: '/echo/order-f', token: used.token }));
      t.match(verdict.body, { error: 'permit_rejected', reason: 'PERMIT_ALREADY_USED' });
      await writeFile(bothFile, proxyYaml(base));
      t.equal(await both.reload(), false, 'a reload that drops the upstream of a forwarding proxy is refused (ext_authz.only needs a restart)');
      t.match(await (await request(`${both.adminUrl}/metrics`)).body.text(), /countersign_proxy_config_reload_success 0/);
    });

    await t.test('close() lets a check in flight finish, then stops every listener', async (t) => {
      const closingFile = join(dir, 'closing.yaml');
      await writeFile(closingFile, proxyYaml(base));
      const closing = await startProxy(closingFile, options);
      const closingClient = grpcClient(t, closing.extAuthz.grpc!);
      const held = await permit('order-held');
      const hold = holding.holdNext();
      const inFlight = grpcCheck(closingClient, { path: '/echo/order-held', token: held.token });
      await hold.reached;
      const closed = closing.close();
      hold.release();
      const verdict = fromCheckResponse(await inFlight);
      t.equal(verdict.allowed, true, 'the check in flight got its answer');
      t.equal(verdict.set['x-countersign-permit-id'], held.id);
      await closed;
      await t.rejects(grpcCheck(closingClient, { path: '/echo/order-after' }), 'the gRPC listener is closed');
      await t.rejects(httpCheck(closing.extAuthz.http!, '/echo/order-after'), 'the HTTP listener is closed');
      await t.rejects(request(`${closing.adminUrl}/healthz`), 'the admin port is closed');
    });
  });
}

const missing = realServersMissing();
if (missing) t.comment(`the Postgres + Redis variant did not run: ${missing}`);
