/**
 * The proxy as a process (`startProxy`), on loopback: a test authority app listening on a real
 * port, an upstream, and the proxy started from a proxy.yaml in a temporary directory with its own
 * API key file, sharing the authority's store. Covers the admin port, hot reload (direct, by the
 * file watcher, refused when invalid), an unreachable authority at start, and start-up refusals.
 * Waiting is bounded polling only; no timing assertions.
 *
 * @example
 *   npx tap --disable-coverage test/e2e/proxy-process.test.ts
 */
import { mkdir, mkdtemp, rename, rm, symlink, writeFile } from 'node:fs/promises';
import { createServer } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Writable } from 'node:stream';
import t, { type Test } from 'tap';
import { request } from 'undici';
import { ProxyConfigError } from '../../proxy/config.js';
import { startProxy, type RunningProxy, type StartProxyOptions } from '../../proxy/main.js';
import { createLogger } from '../../shared/logging.js';
import { verificationStream } from '../../shared/permits/store-keys.js';
import { EvaluateResponse } from '../../shared/wire/evaluate.js';
import { createTestAuthority } from '../helpers/authority.js';
import { appBackends, realServersMissing } from '../helpers/backends.js';
import { ManualClock } from '../helpers/clock.js';
import { listen, closeServer, deadUrl } from '../helpers/loopback.js';
import { echoRoutesYaml } from '../helpers/echo-route.js';

const generous = { rate_limits: { evaluate: { per_minute: 100_000, burst: 100_000 }, plans: { community: { per_minute: 100_000, burst: 100_000 }, business: { per_minute: 100_000, burst: 100_000 } } } };

interface YamlOptions {
  organization: string;
  upstream: string;
  authorityUrl: string;
  keyFile: string;
  mode?: string;
  listen?: string;
  extra?: string;
}

/** A proxy.yaml as an operator would write it; listeners on port 0 so tests never collide. */
function proxyYaml(o: YamlOptions): string {
  return `listen: ${o.listen ?? '127.0.0.1:0'}
admin_listen: 127.0.0.1:0
upstream: ${o.upstream}
authority:
  url: ${o.authorityUrl}
  api_key_file: ${o.keyFile}
organization: ${o.organization}
log_level: info
${o.extra ?? ''}
${echoRoutesYaml(o.mode)}`;
}

async function get(url: string) {
  const response = await request(url);
  const text = await response.body.text();
  return { status: response.statusCode, headers: response.headers, text, json: () => JSON.parse(text) as Record<string, unknown> };
}

async function post(base: string, path: string, token?: string) {
  const headers: Record<string, string> = { 'content-type': 'application/json', 'x-actor-id': 'demo-agent' };
  if (token !== undefined) headers['x-service-permit'] = token;
  const response = await request(`${base}${path}`, { method: 'POST', headers, body: '{}' });
  const text = await response.body.text();
  return { status: response.statusCode, headers: response.headers, text, json: () => JSON.parse(text) as Record<string, unknown> };
}

/** Bounded polling: the file watcher is asynchronous by nature. Gives up after about 10 s. */
async function eventually(what: string, check: () => Promise<boolean>): Promise<void> {
  for (let i = 0; i < 500; i++) {
    if (await check()) return;
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
  throw new Error(`gave up waiting for ${what}`);
}

const metricsOf = async (proxy: RunningProxy) => (await get(`${proxy.adminUrl}/metrics`)).text;

for (const backend of appBackends()) {
  t.test(`the proxy process on ${backend.name}`, async (t: Test) => {
    const clock = new ManualClock(Date.now());
    const opened = await backend.open({ now: () => clock.now() });
    const authority = await createTestAuthority(opened, { config: generous, clock });
    t.teardown(async () => {
      await authority.close();
      await opened.cleanup();
    });
    const authorityUrl = (await authority.app.listen({ host: '127.0.0.1', port: 0 })).replace('localhost', '127.0.0.1');

    const received: string[] = [];
    let releaseSlow: () => void = () => undefined;
    const slowReleased = new Promise<void>((resolve) => (releaseSlow = resolve));
    const upstreamServer = createServer((req, res) => {
      received.push(`${req.method} ${req.url}`);
      req.resume();
      req.on('end', () => {
        // /echo/slow answers only when the test says so: a request in flight during close().
        const answer = () => res.writeHead(201, { 'content-type': 'text/plain' }).end('upstream');
        if (req.url === '/echo/slow') void slowReleased.then(answer);
        else answer();
      });
    });
    const upstream = await listen(upstreamServer);
    t.teardown(() => closeServer(upstreamServer));

    const dir = await mkdtemp(join(tmpdir(), 'countersign-proxy-'));
    t.teardown(() => rm(dir, { recursive: true, force: true }));
    const keyFile = join(dir, 'proxy.key');
    await writeFile(keyFile, `${await authority.key(['verify:execute'])}\n`, { mode: 0o600 });
    const base: YamlOptions = { organization: authority.acme.id, upstream, authorityUrl, keyFile };

    const logs: string[] = [];
    const logger = createLogger({
      name: 'proxy',
      level: 'info',
      destination: new Writable({
        write(chunk, _encoding, done) {
          logs.push(String(chunk));
          done();
        },
      }),
    });
    // env {}: REDIS_URL and friends of the test process must not override the file.
    const options = (extra: StartProxyOptions = {}): StartProxyOptions => ({ env: {}, logger, store: opened.store, now: () => clock.now(), ...extra });
    const start = async (file: string, extra: StartProxyOptions = {}) => {
      const proxy = await startProxy(file, options(extra));
      t.teardown(() => proxy.close());
      return proxy;
    };
    const permit = async (id: string) => {
      const response = await request(`${authorityUrl}/v1/evaluate`, {
        method: 'POST',
        headers: { ...authority.bearer(authority.acmeAdmin), 'content-type': 'application/json' },
        body: JSON.stringify({ action_type: 'demo.echo', actor_id: 'demo-agent', context: { environment: 'dev', target: { type: 'demo', id } } }),
      });
      const decision = EvaluateResponse.parse(await response.body.json());
      if (!decision.permit_token) throw new Error(`no permit for ${id}`);
      return decision.permit_token;
    };

    const file = join(dir, 'proxy.yaml');
    await writeFile(file, proxyYaml(base));
    // Reloaded by hand only, so the direct reload is what is tested here.
    const proxy = await start(file, { watch: false });

    await t.test('serves on the actual ports; a permitted request reaches the upstream', async (t) => {
      t.match(proxy.url, /^http:\/\/127\.0\.0\.1:[1-9]\d*$/);
      t.match(proxy.adminUrl, /^http:\/\/127\.0\.0\.1:[1-9]\d*$/);
      t.not(proxy.url, proxy.adminUrl);
      const response = await post(proxy.url, '/echo/order-1', await permit('order-1'));
      t.equal(response.status, 201);
      t.equal(response.text, 'upstream');
      t.same(received, ['POST /echo/order-1']);
      const refused = await post(proxy.url, '/echo/order-2');
      t.equal(refused.status, 403, 'enforce: no permit, no forwarding');
      t.equal(received.length, 1);
    });

    await t.test('admin port: /healthz, /readyz, /metrics, 404 otherwise', async (t) => {
      const health = await get(`${proxy.adminUrl}/healthz`);
      t.equal(health.status, 200);
      t.same(health.json(), { status: 'ok' });
      const ready = await get(`${proxy.adminUrl}/readyz`);
      t.equal(ready.status, 200);
      t.same(ready.json(), { status: 'ok', checks: { keys: 'ok', store: 'ok' } });
      const metrics = await get(`${proxy.adminUrl}/metrics`);
      t.equal(metrics.status, 200);
      t.match(metrics.headers['content-type'], /^text\/plain; version=0\.0\.4/);
      t.match(metrics.text, /countersign_proxy_requests_total\{route="echo",outcome="forwarded"\} 1/);
      t.match(metrics.text, /countersign_proxy_route_mode\{route="echo",mode="enforce"\} 1/);
      t.match(metrics.text, /countersign_proxy_config_reload_success 1/);
      t.match(metrics.text, /countersign_proxy_key_refreshes_total\{result="success"\} 1/);
      const backlog = Number(/^countersign_proxy_record_backlog (\S+)$/m.exec(metrics.text)?.[1]);
      t.ok(backlog > 0, 'the records of the requests above wait for the authority to drain them');
      t.equal(backlog, await opened.store.countRecords(verificationStream(authority.acme.id)), 'countersign_proxy_record_backlog is what the stream holds');
      const missing = await get(`${proxy.adminUrl}/nothing`);
      t.equal(missing.status, 404);
      t.match(missing.json(), { error: 'not_found', status: 404, request_id: String });
    });

    await t.test('unmatched: denied by default; pass is warned about at start and counted', async (t) => {
      const before = received.length;
      const denied = await post(proxy.url, '/echo/order-x/extra');
      t.equal(denied.status, 403, 'enforce mode and no unmatched key: deny');
      t.match(denied.json(), { error: 'forbidden', reason: 'UNMATCHED_ROUTE' });
      t.notOk(logs.some((line) => line.includes('unmatched: pass')), 'no pass-through warning for the default');
      const passFile = join(dir, 'proxy-pass.yaml');
      await writeFile(passFile, proxyYaml({ ...base, extra: 'unmatched: pass' }));
      const passing = await start(passFile, { watch: false });
      t.ok(logs.some((line) => line.includes('"level":"warn"') && line.includes('unmatched: pass')), 'pass is logged as a warning at start');
      t.equal((await post(passing.url, '/plain/thing')).status, 201, 'forwarded');
      t.equal((await post(passing.url, '/plain/other')).status, 201, 'forwarded');
      t.equal(received.length, before + 2, 'only the two pass-through requests reached the upstream');
      t.match(await metricsOf(passing), /countersign_proxy_requests_total\{route="unmatched",outcome="passthrough"\} 2/, 'each one counted');
      await passing.close();
    });

    await t.test('reload(): the route switches to shadow without a restart', async (t) => {
      await writeFile(file, proxyYaml({ ...base, mode: 'shadow' }));
      t.equal(await proxy.reload(), true);
      const before = received.length;
      const response = await post(proxy.url, '/echo/order-s');
      t.equal(response.status, 201, 'forwarded without a permit');
      t.equal(received.length, before + 1);
      const text = await metricsOf(proxy);
      t.match(text, /countersign_proxy_requests_total\{route="echo",outcome="would_block"\} 1/);
      t.match(text, /countersign_proxy_route_mode\{route="echo",mode="shadow"\} 1/);
      t.match(text, /countersign_proxy_route_mode\{route="echo",mode="enforce"\} 0/);
    });

    await t.test('an invalid edit is refused and the last good configuration keeps serving', async (t) => {
      await writeFile(file, proxyYaml({ ...base, mode: 'sometimes' }));
      t.equal(await proxy.reload(), false);
      const text = await metricsOf(proxy);
      t.match(text, /countersign_proxy_config_reload_success 0/);
      t.match(text, /countersign_proxy_route_mode\{route="echo",mode="shadow"\} 1/);
      t.ok(logs.some((line) => line.includes('reload refused') && line.includes('routes.0.mode')), 'the log names the bad field');
      t.equal((await post(proxy.url, '/echo/order-s2')).status, 201, 'still shadow');

      // Fixed, with a listen change that needs a restart: applied except for that.
      await writeFile(file, proxyYaml({ ...base, mode: 'shadow', listen: '127.0.0.1:1' }));
      t.equal(await proxy.reload(), true);
      t.match(await metricsOf(proxy), /countersign_proxy_config_reload_success 1/);
      t.same(proxy.config().listen, { host: '127.0.0.1', port: 0 }, 'listen keeps its running value');
      t.ok(logs.some((line) => line.includes('need a restart') && line.includes('listen')), 'the ignored change is logged');
      t.equal((await post(proxy.url, '/echo/order-s3')).status, 201, 'still serving on the old port');
    });

    await t.test('the file watcher reloads on its own, also after the file is replaced', async (t) => {
      const watchedFile = join(dir, 'watched.yaml');
      await writeFile(watchedFile, proxyYaml(base));
      const watched = await start(watchedFile, { watchDebounceMs: 20 });
      const modeIs = (mode: string) => async () => new RegExp(`route_mode\\{route="echo",mode="${mode}"\\} 1`).test(await metricsOf(watched));
      t.ok(await modeIs('enforce')());

      // As editors save: a new file renamed over the old one.
      await writeFile(`${watchedFile}.tmp`, proxyYaml({ ...base, mode: 'shadow' }));
      await rename(`${watchedFile}.tmp`, watchedFile);
      await eventually('the watcher to switch the route to shadow', modeIs('shadow'));
      t.equal((await post(watched.url, '/echo/order-w')).status, 201, 'shadow: forwarded without a permit');

      // In place, on the re-established watch.
      await writeFile(watchedFile, proxyYaml(base));
      await eventually('the watcher to switch the route back to enforce', modeIs('enforce'));
      t.equal((await post(watched.url, '/echo/order-w2')).status, 403, 'enforce again');
    });

    await t.test('a Kubernetes ConfigMap update (the kubelet swaps a ..data symlink) reloads too', async (t) => {
      // The kubelet's atomic writer: <dir>/proxy.yaml -> ..data/proxy.yaml, ..data -> a timestamped
      // folder. An update writes a new folder, points ..data_tmp at it, renames that over ..data,
      // and removes the old folder. This is what docs/shadow-to-enforce.md relies on.
      const mount = join(dir, 'configmap');
      await mkdir(join(mount, '..2026_11_22_01'), { recursive: true });
      await writeFile(join(mount, '..2026_11_22_01', 'proxy.yaml'), proxyYaml(base));
      await symlink('..2026_11_22_01', join(mount, '..data'));
      await symlink(join('..data', 'proxy.yaml'), join(mount, 'proxy.yaml'));
      const projected = await start(join(mount, 'proxy.yaml'), { watchDebounceMs: 20 });
      const modeIs = (mode: string) => async () => new RegExp(`route_mode\\{route="echo",mode="${mode}"\\} 1`).test(await metricsOf(projected));
      t.ok(await modeIs('enforce')());

      await mkdir(join(mount, '..2026_11_22_02'));
      await writeFile(join(mount, '..2026_11_22_02', 'proxy.yaml'), proxyYaml({ ...base, mode: 'shadow' }));
      await symlink('..2026_11_22_02', join(mount, '..data_tmp'));
      await rename(join(mount, '..data_tmp'), join(mount, '..data'));
      await rm(join(mount, '..2026_11_22_01'), { recursive: true });
      await eventually('the watcher to pick up the projected update', modeIs('shadow'));
      t.equal((await post(projected.url, '/echo/order-k')).status, 201, 'shadow after the ConfigMap update, without a restart');
    });

    await t.test('authority unreachable at start: starts, not ready, fails closed', async (t) => {
      const deadFile = join(dir, 'dead.yaml');
      await writeFile(deadFile, proxyYaml({ ...base, authorityUrl: await deadUrl() }));
      const dead = await start(deadFile, { watch: false });
      const ready = await get(`${dead.adminUrl}/readyz`);
      t.equal(ready.status, 503);
      t.same(ready.json(), { status: 'unavailable', checks: { keys: 'unavailable', store: 'ok' } });
      t.equal((await get(`${dead.adminUrl}/healthz`)).status, 200, 'alive all the same');
      const before = received.length;
      const response = await post(dead.url, '/echo/order-d', await permit('order-d'));
      t.equal(response.status, 503);
      t.match(response.json(), { error: 'gate_unavailable', status: 503 });
      t.equal(received.length, before, 'the upstream was not contacted');
      t.match(await metricsOf(dead), /countersign_proxy_key_refreshes_total\{result="failure"\} 1/);
    });

    await t.test('SIGHUP reloads when asked to handle it; close() drains, then stops everything', async (t) => {
      const hupFile = join(dir, 'hup.yaml');
      await writeFile(hupFile, proxyYaml(base));
      const hup = await startProxy(hupFile, options({ watch: false, handleSighup: true }));
      await writeFile(hupFile, proxyYaml({ ...base, mode: 'shadow' }));
      // The listener runs as for a real signal, without sending one to the test runner.
      process.emit('SIGHUP', 'SIGHUP');
      await eventually('the SIGHUP reload', async () => /route_mode\{route="echo",mode="shadow"\} 1/.test(await metricsOf(hup)));

      const inFlight = post(hup.url, '/echo/slow');
      await eventually('the slow request to reach the upstream', async () => received.includes('POST /echo/slow'));
      const closed = hup.close();
      releaseSlow();
      const response = await inFlight;
      t.equal(response.status, 201, 'the request in flight got its answer');
      await closed;
      await t.rejects(get(`${hup.adminUrl}/healthz`), 'the admin port is closed');
      await t.rejects(post(hup.url, '/echo/after'), 'the proxy port is closed');
      t.notOk(process.listeners('SIGHUP').some((listener) => listener.name === 'onHup'), 'the SIGHUP handler is removed');
    });

    await t.test('idle client connections are kept 120 s by default, keep_alive_timeout_ms when set', async (t) => {
      // Clients that keep idle connections longer than the server (Go: 90 s) meet resets on reuse.
      // Permitted requests: a refusal may close its connection rather than read an unread body.
      const defaults = join(dir, 'keep-alive-default.yaml');
      await writeFile(defaults, proxyYaml(base));
      const byDefault = await post((await start(defaults, { watch: false })).url, '/echo/keep-alive-1', await permit('keep-alive-1'));
      t.equal(byDefault.headers['keep-alive'], 'timeout=120', 'the default, announced to the client');
      const shorter = join(dir, 'keep-alive.yaml');
      await writeFile(shorter, proxyYaml({ ...base, extra: 'keep_alive_timeout_ms: 75000' }));
      const configured = await start(shorter, { watch: false });
      const answered = await post(configured.url, '/echo/keep-alive-2', await permit('keep-alive-2'));
      t.equal(answered.headers['keep-alive'], 'timeout=75', 'the configured timeout');
    });

    await t.test('start-up refusals name the field', async (t) => {
      const badFile = join(dir, 'bad.yaml');
      await writeFile(badFile, proxyYaml({ ...base, upstream: 'not-a-url' }));
      const error = await startProxy(badFile, options()).catch((caught: unknown) => caught);
      t.type(error, ProxyConfigError);
      t.match((error as Error).message, /^\s*upstream: expected an http:\/\/ or https:\/\/ URL$/m, 'the bad field, by its path');

      await writeFile(badFile, proxyYaml({ ...base, keyFile: join(dir, 'missing.key') }));
      await t.rejects(startProxy(badFile, options()), { name: 'ProxyConfigError', message: /authority\.api_key_file: cannot read/ });

      // No store given and no redis_url: refused unless allowed.
      const alone = { env: {}, logger, watch: false };
      await t.rejects(startProxy(file, alone), { name: 'ProxyConfigError', message: /redis_url: required/ });
      const allowed = await startProxy(file, { ...alone, env: { COUNTERSIGN_ALLOW_IN_PROCESS_STORE: '1' } });
      t.teardown(() => allowed.close());
      t.equal((await get(`${allowed.adminUrl}/readyz`)).status, 200, 'allowed: runs on its own in-process store');
      const allowingFile = join(dir, 'allowing.yaml');
      await writeFile(allowingFile, `${proxyYaml(base)}\nallow_in_process_store: true\n`);
      const allowedByFile = await startProxy(allowingFile, alone);
      t.teardown(() => allowedByFile.close());
      t.equal((await get(`${allowedByFile.adminUrl}/readyz`)).status, 200, 'allow_in_process_store: true in the file does the same');
    });
  });
}

const missing = realServersMissing();
if (missing) t.comment(`the Postgres + Redis variant did not run: ${missing}`);
