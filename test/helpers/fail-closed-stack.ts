/**
 * The fail-closed stack, end to end on loopback, for the tests that stop its parts
 * (test/e2e/fail-closed*.test.ts): a real authority (`startAuthority`, PGlite data directory), the
 * proxy process (`startProxy`) and a recording upstream, all sharing a real Redis that the stack
 * starts itself as a child process, so that a test can stop it, pause it and start it again on
 * the same port. Waiting is bounded polling only (`eventually`).
 *
 * @example
 *   const s = await setUp(t);
 *   if (!s) return; // no redis-server: t.comment says so
 *   const permit = await s.permit('a-1');
 *   await s.redis.stop();
 *   (await s.send('/echo/a-1', permit.token)).status; // 503
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Test } from 'tap';
import { request } from 'undici';
import { parseAuthorityConfig, type AuthorityConfig } from '../../authority/config.js';
import { startAuthority, type RunningAuthority } from '../../authority/main.js';
import { startProxy, type RunningProxy } from '../../proxy/main.js';
import { createLogger } from '../../shared/logging.js';
import { EvaluateResponse } from '../../shared/wire/evaluate.js';
import { freePort, redisPing } from '../support/servers.mjs';
import { echoRoutesYaml } from './echo-route.js';
import { redisServerBinary } from './redis-process.js';

export { redisPing };

const generous = { per_minute: 100_000, burst: 100_000 };

export const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** Bounded polling: gives up after about `limitMs`. */
export async function eventually(what: string, check: () => Promise<boolean>, limitMs = 15_000, stepMs = 100): Promise<void> {
  const rounds = Math.ceil(limitMs / stepMs);
  for (let i = 0; i < rounds; i++) {
    if (await check()) return;
    await sleep(stepMs);
  }
  throw new Error(`gave up waiting for ${what}`);
}

/** A throwaway redis-server on a fixed loopback port that can be stopped and started again, with the AOF the default durability needs. */
export class TestRedis {
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

export interface Upstream {
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

export interface Stack {
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
export async function setUp(t: Test): Promise<Stack | null> {
  const bin = redisServerBinary();
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
