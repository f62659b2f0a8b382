/**
 * Fail closed, end to end on loopback: a real authority (`startAuthority`, PGlite data directory),
 * the proxy process (`startProxy`) and a recording upstream, all sharing a real Redis that this
 * test starts itself as a child process, so it can stop it and start it again on the same port.
 *
 * - Redis stopped: a request with a valid permit gets 503 `gate_unavailable` and the upstream is
 *   not reached; Redis back: requests with fresh permits work again.
 * - Authority stopped: permits still verify with the proxy's cached keys (consume-once and the
 *   records live in Redis), and once the authority is back its drain brings the records into the
 *   audit log, each exactly once, and marks the permits consumed.
 *
 * Waiting is bounded polling only; no timing assertions. Needs `redis-server` on PATH; without it
 * the test says so and passes.
 *
 * @example
 *   npx tap --disable-coverage test/e2e/fail-closed.test.ts
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { accessSync, constants } from 'node:fs';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { createServer, type Server } from 'node:http';
import { createConnection, createServer as createNetServer, type AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { delimiter, join } from 'node:path';
import t, { type Test } from 'tap';
import { Redis } from 'ioredis';
import { request } from 'undici';
import { parseAuthorityConfig, type AuthorityConfig } from '../../authority/config.js';
import { startAuthority, type RunningAuthority } from '../../authority/main.js';
import { startProxy, type RunningProxy } from '../../proxy/main.js';
import { CountersignClient } from '../../shared/client/client.js';
import { createLogger } from '../../shared/logging.js';
import { AuditEventsResponse } from '../../shared/wire/audit.js';
import { EvaluateResponse } from '../../shared/wire/evaluate.js';
import { PermitResponse } from '../../shared/wire/permits.js';
import { echoRoutesYaml } from '../helpers/echo-route.js';

const generous = { per_minute: 100_000, burst: 100_000 };

function findOnPath(name: string): string | undefined {
  for (const dir of (process.env.PATH ?? '').split(delimiter)) {
    if (dir === '') continue;
    const candidate = join(dir, name);
    try {
      accessSync(candidate, constants.X_OK);
      return candidate;
    } catch {
      // not here
    }
  }
  return undefined;
}

function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createNetServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address() as AddressInfo;
      server.close(() => resolve(port));
    });
  });
}

function redisPing(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = createConnection({ host: '127.0.0.1', port });
    let reply = '';
    socket.setTimeout(1_000, () => socket.destroy());
    socket.on('connect', () => socket.write('PING\r\n'));
    socket.on('data', (chunk: Buffer) => {
      reply += chunk.toString();
      if (reply.includes('\r\n')) socket.end();
    });
    socket.on('error', () => undefined);
    socket.on('close', () => resolve(reply.startsWith('+PONG')));
  });
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** Bounded polling: gives up after about `limitMs`. */
async function eventually(what: string, check: () => Promise<boolean>, limitMs = 15_000, stepMs = 100): Promise<void> {
  const rounds = Math.ceil(limitMs / stepMs);
  for (let i = 0; i < rounds; i++) {
    if (await check()) return;
    await sleep(stepMs);
  }
  throw new Error(`gave up waiting for ${what}`);
}

/** A throwaway redis-server on a fixed loopback port that can be stopped and started again, with the AOF the default durability needs. */
class TestRedis {
  readonly url: string;
  #child: ChildProcess | null = null;
  #output = '';

  constructor(
    readonly bin: string,
    readonly port: number,
    readonly dir: string,
  ) {
    this.url = `redis://127.0.0.1:${port}`;
  }

  async start(): Promise<void> {
    if (this.#child) throw new Error('redis-server is already running');
    const child = spawn(this.bin, ['--port', String(this.port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'yes', '--appendfsync', 'always', '--dir', this.dir, '--daemonize', 'no'], {
      cwd: this.dir,
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    child.stdout?.on('data', (chunk: Buffer) => (this.#output += String(chunk)));
    child.stderr?.on('data', (chunk: Buffer) => (this.#output += String(chunk)));
    this.#child = child;
    let exited = false;
    child.once('exit', () => {
      exited = true;
      if (this.#child === child) this.#child = null;
    });
    await eventually(
      `redis-server on port ${this.port}`,
      async () => {
        if (exited) throw new Error(`redis-server exited before it answered:\n${this.#output.slice(-2000)}`);
        return redisPing(this.port);
      },
      20_000,
      50,
    );
  }

  /** SIGSTOP: connections stay open and nothing is answered. */
  pause(): void {
    this.#child?.kill('SIGSTOP');
  }

  resume(): void {
    this.#child?.kill('SIGCONT');
  }

  async stop(): Promise<void> {
    const child = this.#child;
    if (!child) return;
    const exited = once(child, 'exit');
    child.kill('SIGCONT');
    child.kill('SIGTERM');
    const timer = setTimeout(() => child.kill('SIGKILL'), 10_000);
    try {
      await exited;
    } finally {
      clearTimeout(timer);
    }
    this.#child = null;
  }
}

interface Upstream {
  url: string;
  received: string[];
}

async function startUpstream(cleanup: Array<() => Promise<void>>): Promise<Upstream> {
  const received: string[] = [];
  const server: Server = createServer((req, res) => {
    req.resume();
    req.on('end', () => {
      received.push(`${req.method} ${req.url}`);
      res.writeHead(200, { 'content-type': 'text/plain' }).end('upstream');
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  cleanup.push(
    () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  );
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, received };
}

function proxyYaml(o: { upstream: string; authorityUrl: string; keyFile: string; organization: string; redisUrl: string }): string {
  return `listen: 127.0.0.1:0
admin_listen: 127.0.0.1:0
upstream: ${o.upstream}
authority:
  url: ${o.authorityUrl}
  api_key_file: ${o.keyFile}
organization: ${o.organization}
redis_url: ${o.redisUrl}
log_level: silent
${echoRoutesYaml()}`;
}

interface Stack {
  redis: TestRedis;
  upstream: Upstream;
  config: AuthorityConfig;
  authority: RunningAuthority;
  proxy: RunningProxy;
  adminKey: string;
  organization: string;
  /** Starts the authority (again) on the same data directory and Redis; closed in teardown. */
  startAuthority(): Promise<RunningAuthority>;
  permit(id: string): Promise<{ token: string; id: string }>;
  send(path: string, token: string): Promise<{ status: number; json: () => Record<string, unknown> }>;
  api(path: string): Promise<{ status: number; body: unknown }>;
}

/** Everything a subtest needs, each piece released in the subtest's teardown. Null without redis-server. */
async function setUp(t: Test): Promise<Stack | null> {
  const bin = findOnPath('redis-server');
  if (bin === undefined) {
    t.comment('redis-server is not on PATH: the fail-closed tests need a real Redis they can stop and start, so they did not run');
    return null;
  }
  // Released in reverse order: proxy, authorities, upstream, Redis, then the directory.
  const cleanup: Array<() => Promise<void>> = [];
  t.teardown(async () => {
    for (const step of cleanup.reverse()) await step();
  });
  const dir = await mkdtemp(join(tmpdir(), 'countersign-fail-closed-'));
  cleanup.push(() => rm(dir, { recursive: true, force: true }));
  const redis = new TestRedis(bin, await freePort(), dir);
  cleanup.push(() => redis.stop());
  await redis.start();

  const upstream = await startUpstream(cleanup);
  const config = parseAuthorityConfig({
    data_dir: join(dir, 'data'),
    listen: '127.0.0.1:0',
    admin_listen: '127.0.0.1:0',
    redis_url: redis.url,
    log_level: 'silent',
    rate_limits: { evaluate: generous, plans: { community: generous, team: generous, business: generous, enterprise: generous } },
  });
  const running = new Set<RunningAuthority>();
  cleanup.push(async () => {
    for (const authority of running) await authority.close();
  });
  const start = async () => {
    const authority = await startAuthority(config, { env: {}, logger: createLogger({ name: 'authority', level: 'silent' }) });
    running.add(authority);
    return authority;
  };
  const authority = await start();
  const { api_key: adminKey, organization_id: organization } = JSON.parse(await readFile(join(config.data_dir, 'bootstrap.json'), 'utf8')) as {
    api_key: string;
    organization_id: string;
  };

  const stack = { redis, upstream, config, authority, adminKey, organization } as Stack;
  const bearer = { authorization: `Bearer ${adminKey}` };
  stack.startAuthority = async () => (stack.authority = await start());
  stack.api = async (path) => {
    const response = await request(`${stack.authority.apiUrl}${path}`, { headers: bearer });
    const text = await response.body.text();
    return { status: response.statusCode, body: text === '' ? null : (JSON.parse(text) as unknown) };
  };
  stack.permit = async (id) => {
    const response = await request(`${stack.authority.apiUrl}/v1/evaluate`, {
      method: 'POST',
      headers: { ...bearer, 'content-type': 'application/json' },
      body: JSON.stringify({ action_type: 'demo.echo', actor_id: 'demo-agent', context: { environment: 'dev', target: { type: 'demo', id } } }),
    });
    const text = await response.body.text();
    if (response.statusCode !== 200) throw new Error(`evaluate answered ${response.statusCode}: ${text}`);
    const decision = EvaluateResponse.parse(JSON.parse(text));
    if (decision.permit_token === undefined || decision.permit_id === undefined) throw new Error(`no permit for ${id}: ${text}`);
    return { token: decision.permit_token, id: decision.permit_id };
  };
  stack.send = async (path, token) => {
    const response = await request(`${stack.proxy.url}${path}`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'x-actor-id': 'demo-agent', 'x-service-permit': token },
      body: '{}',
    });
    const text = await response.body.text();
    return { status: response.statusCode, json: () => JSON.parse(text) as Record<string, unknown> };
  };

  // The proxy's own key, scope verify:execute only, in a file as an operator would keep it.
  const created = await request(`${authority.apiUrl}/v1/api-keys`, {
    method: 'POST',
    headers: { ...bearer, 'content-type': 'application/json' },
    body: JSON.stringify({ name: 'proxy', scopes: ['verify:execute'] }),
  });
  const createdText = await created.body.text();
  if (created.statusCode !== 201) throw new Error(`POST /v1/api-keys answered ${created.statusCode}: ${createdText}`);
  const keyFile = join(dir, 'proxy.key');
  await writeFile(keyFile, `${(JSON.parse(createdText) as { secret: string }).secret}\n`, { mode: 0o600 });

  const file = join(dir, 'proxy.yaml');
  await writeFile(file, proxyYaml({ upstream: upstream.url, authorityUrl: authority.apiUrl, keyFile, organization, redisUrl: redis.url }));
  // env {}: REDIS_URL and friends of the test process must not override the file. A key refresh
  // never runs during the test: the keys loaded at start are the cached ones.
  const proxy = await startProxy(file, { env: {}, watch: false, keyRefreshIntervalMs: 3_600_000, logger: createLogger({ name: 'proxy', level: 'silent' }) });
  cleanup.push(() => proxy.close());
  stack.proxy = proxy;
  return stack;
}

// Redis servers, an authority and proxies stopped and started again: longer than .taprc's
// two minutes per file while the other test files keep a 2-core machine busy.
t.setTimeout(6 * 60_000);

t.test('Redis stopped: 503 gate_unavailable and the upstream is not reached; Redis back: works again', async (t) => {
  const s = await setUp(t);
  if (!s) return;

  const before = await s.permit('before');
  const ok = await s.send('/echo/before', before.token);
  t.equal(ok.status, 200, 'with Redis up a permitted request is forwarded');
  t.same(s.upstream.received, ['POST /echo/before']);

  // Evaluated while Redis is up: the authority's evaluate needs Redis for its rate limits.
  const fresh = await s.permit('down');
  await s.redis.stop();
  t.notOk(await redisPing(s.redis.port), 'Redis is down');

  const refused = await s.send('/echo/down', fresh.token);
  t.equal(refused.status, 503, 'fail closed');
  t.match(refused.json(), { error: 'gate_unavailable', status: 503 });
  t.same(s.upstream.received, ['POST /echo/before'], 'the upstream received nothing');
  const notReady = await request(`${s.proxy.adminUrl}/readyz`);
  t.equal(notReady.statusCode, 503, 'the proxy is not ready without Redis');
  t.match(await notReady.body.json(), { checks: { keys: 'ok', store: 'unavailable' } });

  await s.redis.start();
  // Each attempt uses a new permit: the authority and the proxy reconnect on their own.
  let attempts = 0;
  let recovered: { id: string } | null = null;
  await eventually('a request through the proxy to succeed again', async () => {
    attempts += 1;
    let permit: { token: string; id: string };
    try {
      permit = await s.permit(`after-${attempts}`);
    } catch {
      return false; // the authority has not reconnected yet
    }
    const response = await s.send(`/echo/after-${attempts}`, permit.token);
    if (response.status === 200) {
      recovered = permit;
      return true;
    }
    t.equal(response.status, 503, `attempt ${attempts}: still failing closed while reconnecting`);
    return false;
  });
  t.ok(recovered, 'a fresh permit is accepted once Redis is back');
  t.comment(`recovered on attempt ${attempts}`);
  const ready = await request(`${s.proxy.adminUrl}/readyz`);
  t.equal(ready.statusCode, 200, 'ready again');
  await ready.body.dump();
  t.same(s.upstream.received, ['POST /echo/before', `POST /echo/after-${attempts}`], 'the upstream got that request exactly once, and none of the refused ones');
});

t.test('authority stopped: permits verify with the cached keys; their records reach the audit log once it is back', async (t) => {
  const s = await setUp(t);
  if (!s) return;

  const permits = [await s.permit('a-1'), await s.permit('a-2'), await s.permit('a-3')];
  await s.authority.close();
  await t.rejects(request(`${s.authority.apiUrl}/healthz`), 'the authority is down');

  for (const [i, permit] of permits.entries()) {
    const response = await s.send(`/echo/a-${i + 1}`, permit.token);
    t.equal(response.status, 200, `permit ${i + 1} verified with the cached keys`);
  }
  t.same(s.upstream.received, ['POST /echo/a-1', 'POST /echo/a-2', 'POST /echo/a-3'], 'the upstream got the 3 requests');
  const replay = await s.send('/echo/a-1', permits[0]!.token);
  t.equal(replay.status, 403, 'consume-once holds without the authority');
  t.equal(s.upstream.received.length, 3, 'the replay did not reach the upstream');

  await s.startAuthority();
  const ids = new Set(permits.map((permit) => permit.id));
  type Event = AuditEventsResponse['events'][number];
  let events: Event[] = [];
  const relevant = () => events.filter((event) => event.resource_id !== null && ids.has(event.resource_id));
  const count = (type: string, id: string) => relevant().filter((event) => event.type === type && event.resource_id === id).length;
  await eventually(
    'the drain to record 3 permit.verified and 3 execution.observed events',
    async () => {
      const response = await s.api('/v1/audit/events?types=permit.verified,execution.observed&limit=500');
      if (response.status !== 200) return false;
      events = AuditEventsResponse.parse(response.body).events;
      return [...ids].every((id) => count('permit.verified', id) >= 1 && count('execution.observed', id) >= 1);
    },
    20_000,
    250,
  );
  // Give the drain (every second) another run or two: it must not add duplicates. A wait, not a
  // timing assertion.
  await sleep(2_500);
  const again = await s.api('/v1/audit/events?types=permit.verified,execution.observed&limit=500');
  t.equal(again.status, 200, 'GET /v1/audit/events');
  events = AuditEventsResponse.parse(again.body).events;
  for (const id of ids) {
    t.equal(count('permit.verified', id), 1, `permit ${id}: one permit.verified event`);
    t.equal(count('execution.observed', id), 1, `permit ${id}: one execution.observed event`);
  }
  t.equal(relevant().filter((event) => event.type === 'permit.verified').length, 3, '3 permit.verified events in all');
  t.equal(relevant().filter((event) => event.type === 'execution.observed').length, 3, '3 execution.observed events in all');

  for (const id of ids) {
    const response = await s.api(`/v1/permits/${id}`);
    t.equal(response.status, 200, `GET /v1/permits/${id}`);
    t.equal(PermitResponse.parse(response.body).permit.status, 'consumed', `permit ${id} is consumed`);
  }
});

t.test('Redis emptied (FLUSHALL): used and revoked permits are refused as REPLAY_STATE_RESET, new ones work', async (t) => {
  const s = await setUp(t);
  if (!s) return;
  const used = await s.permit('used');
  t.equal((await s.send('/echo/used', used.token)).status, 200, 'the first use is forwarded');
  // The authority's own record of the use: verify-permit reads it before the store, so whether
  // the drain had brought it in before the loss would otherwise decide verify-permit's answer.
  await eventually('the drain to record the first use', async () => {
    const response = await s.api(`/v1/permits/${used.id}`);
    return response.status === 200 && PermitResponse.parse(response.body).permit.status === 'consumed';
  }, 20_000, 250);
  // Issued before the loss and never used: nothing but the store could say whether it was.
  const unused = await s.permit('unused');
  const revoked = await s.permit('revoked');
  const client = new CountersignClient({ baseUrl: s.authority.apiUrl, apiKey: s.adminKey });
  t.teardown(() => client.close());
  t.equal((await client.revokePermit(revoked.id, 'test')).status, 'revoked', 'revoked');

  // Everything the store held is lost, the epoch key with it.
  const flush = new Redis(s.redis.url, { maxRetriesPerRequest: 0 });
  t.teardown(() => flush.disconnect());
  t.equal(await flush.flushall(), 'OK');

  const replay = await s.send('/echo/used', used.token);
  t.equal(replay.status, 403, 'the replay is refused');
  t.match(replay.json(), { error: 'permit_rejected', reason: 'REPLAY_STATE_RESET' });
  const afterRevoke = await s.send('/echo/revoked', revoked.token);
  t.match(afterRevoke.json(), { error: 'permit_rejected', reason: 'REPLAY_STATE_RESET' }, 'the revoked permit is refused');
  t.same(s.upstream.received, ['POST /echo/used'], 'the upstream saw the used permit once and the revoked one never');

  t.match(await client.verifyPermit({ permit_token: unused.token }), { valid: false, verify_error_code: 'REPLAY_STATE_RESET' }, 'verify-permit refuses the unused permit issued before the loss');
  t.match(await client.verifyPermit({ permit_token: used.token }), { valid: false, verify_error_code: 'PERMIT_ALREADY_USED' }, "verify-permit refuses the used one from the authority's own record");

  // Permits issued after the authority read the new epoch (it reads it every few seconds) work.
  let fresh = 0;
  await eventually('a permit issued after the loss to be forwarded', async () => {
    const permit = await s.permit(`fresh-${fresh++}`);
    return (await s.send(`/echo/fresh-${fresh - 1}`, permit.token)).status === 200;
  }, 20_000, 500);
  t.ok(fresh >= 1);

  // The refusals are on the record, with their code.
  let codes: string[] = [];
  await eventually('the drain to record the refusals', async () => {
    const response = await s.api('/v1/audit/events?types=permit.rejected&limit=500');
    if (response.status !== 200) return false;
    codes = AuditEventsResponse.parse(response.body).events.flatMap((event) => {
      const details = (event.payload as { details?: { verify_error_code?: string | null } }).details;
      return details?.verify_error_code ? [details.verify_error_code] : [];
    });
    return codes.filter((code) => code === 'REPLAY_STATE_RESET').length >= 2;
  }, 20_000, 250);
  t.ok(codes.filter((code) => code === 'REPLAY_STATE_RESET').length >= 2, 'two permit.rejected records with REPLAY_STATE_RESET');
});

t.test('Redis paused past the gate timeout: 503, nothing reaches the upstream, and the permit stays usable', async (t) => {
  const s = await setUp(t);
  if (!s) return;
  const permits = [await s.permit('stalled-1'), await s.permit('stalled-2')];
  s.redis.pause();
  for (const [i, permit] of permits.entries()) {
    const refused = await s.send(`/echo/stalled-${i + 1}`, permit.token);
    t.equal(refused.status, 503, `request ${i + 1}: fail closed while Redis is stalled`);
    t.match(refused.json(), { error: 'gate_unavailable' });
  }
  t.same(s.upstream.received, [], 'the upstream received nothing');
  s.redis.resume();
  // The stalled consumes reach Redis now, late: they must change nothing.
  await eventually('Redis to answer again', () => redisPing(s.redis.port));
  for (const [i, permit] of permits.entries()) {
    let answer = 0;
    await eventually(`request ${i + 1} to go through with the same permit`, async () => {
      answer = (await s.send(`/echo/stalled-${i + 1}`, permit.token)).status;
      return answer !== 503;
    });
    t.equal(answer, 200, `request ${i + 1}: the permit was not consumed by the refused attempt`);
  }
  t.same(s.upstream.received, ['POST /echo/stalled-1', 'POST /echo/stalled-2'], 'one effect per permit');

  let events: Array<{ type: string; resource_id: string | null }> = [];
  await eventually('the drain to record the two uses', async () => {
    const response = await s.api('/v1/audit/events?types=permit.verified&limit=500');
    if (response.status !== 200) return false;
    events = AuditEventsResponse.parse(response.body).events.filter((event) => permits.some((p) => p.id === event.resource_id));
    return events.length >= 2;
  }, 20_000, 250);
  for (const permit of permits) {
    t.equal(events.filter((event) => event.resource_id === permit.id).length, 1, `${permit.id}: exactly one permit.verified`);
  }
});
