/**
 * The end-to-end proxy harness on loopback, three real HTTP servers: a test authority app (issues
 * permits, publishes its keys), the proxy (`createProxyServer` with a gate over the authority's
 * JWKS and the SAME shared store the authority uses), and an upstream that records every request
 * it gets. Time moves through the gate's `now`, never by sleeping.
 *
 * @example
 *   withHarness(t, backend, async (h) => {
 *     const proxy = await h.startProxy();
 *     const permit = await h.permit({ id: 'order-1' });
 *     await call(proxy.url, '/echo/order-1', { token: permit.token });
 *     h.upstream.received.length; // 1
 *   });
 */
import { createServer, type IncomingHttpHeaders } from 'node:http';
import type { Readable } from 'node:stream';
import type { Test } from 'tap';
import { request } from 'undici';
import { parseProxyConfig } from '../../proxy/config.js';
import type { ProxyConfig, ProxyConfigInput } from '../../proxy/config.js';
import { createExecutionRecords } from '../../proxy/execution-records.js';
import { createGate } from '../../proxy/gate.js';
import { createProxyMetrics, type ProxyMetrics } from '../../proxy/metrics.js';
import { createRecordBacklog } from '../../proxy/record-backlog.js';
import { createProxyServer, proxyState, type ProxyState } from '../../proxy/server.js';
import { createLogger } from '../../shared/logging.js';
import { verificationStream } from '../../shared/permits/store-keys.js';
import { staticKeyResolver } from '../../shared/permits/static-keys.js';
import type { SharedStore } from '../../shared/store/types.js';
import { EvaluateResponse } from '../../shared/wire/evaluate.js';
import { VerificationRecord } from '../../shared/wire/verification-records.js';
import type { AuthorityConfigInput } from '../../authority/config.js';
import type { ConsoleFiles } from '../../authority/console/static.js';
import { createTestAuthority, GENEROUS_LIMITS, type TestAuthority } from './authority.js';
import type { appBackends, OpenedBackend } from './backends.js';
import { ManualClock } from './clock.js';
import { closeServer, listen } from './loopback.js';

export const echoFacts = (id: unknown = { path: 'id' }) => ({
  actor_id: { header: 'X-Actor-Id' },
  environment: { const: 'dev' },
  target: { type: { const: 'demo' }, id },
});

/** A payment's facts as the example policy's payments class binds them, from the JSON body. */
export const wireFacts = {
  actor_id: { header: 'X-Actor-Id' },
  environment: { const: 'production' },
  amount_usd: { body: '/amount_usd' },
  account_code: { body: '/account_code' },
};

/** Routes: POST /echo/:id (enforce), /s/echo/:id (shadow), /b/echo (id from the body), /wires (payments.wire), /staging/echo/:id (environment staging). */
export function proxyConfig(organization: string, upstream: string, overrides: Partial<ProxyConfigInput> = {}): ProxyConfig {
  return parseProxyConfig({
    upstream,
    authority: { url: 'http://127.0.0.1:7070', api_key: 'cs_test_unused' },
    organization,
    log_level: 'silent',
    routes: [
      { name: 'echo', match: { method: 'POST', path: '/echo/:id' }, action_type: 'demo.echo', facts: echoFacts() },
      { name: 'echo-shadow', match: { method: 'POST', path: '/s/echo/:id' }, action_type: 'demo.echo', mode: 'shadow', facts: echoFacts() },
      { name: 'echo-body', match: { method: 'POST', path: '/b/echo' }, action_type: 'demo.echo', max_body_bytes: 64, facts: echoFacts({ body: '/id' }) },
      { name: 'wire', match: { method: 'POST', path: '/wires' }, action_type: 'payments.wire', facts: wireFacts },
      { name: 'echo-staging', match: { method: 'POST', path: '/staging/echo/:id' }, action_type: 'demo.echo', facts: { ...echoFacts(), environment: { const: 'staging' } } },
    ],
    ...overrides,
  });
}

export interface Upstream {
  url: string;
  received: Received[];
  /** Called when a request's first body bytes arrive, before the rest. */
  onFirstChunk: ((url: string) => void) | null;
}

export interface Received {
  method: string;
  url: string;
  headers: IncomingHttpHeaders;
  body: string;
}

/** An upstream that records every request and answers 201 with the body it got. */
export async function startUpstream(t: Test): Promise<Upstream> {
  const received: Received[] = [];
  const upstream: Upstream = { url: '', received, onFirstChunk: null };
  const server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (chunk: Buffer) => {
      if (chunks.length === 0) upstream.onFirstChunk?.(req.url ?? '');
      chunks.push(chunk);
    });
    req.on('end', () => {
      const body = Buffer.concat(chunks).toString('utf8');
      received.push({ method: req.method ?? '', url: req.url ?? '', headers: req.headers, body });
      res.writeHead(201, { 'content-type': 'text/plain', 'x-upstream': 'yes' });
      res.end(`upstream saw: ${body}`);
    });
  });
  upstream.url = await listen(server);
  t.teardown(() => closeServer(server));
  return upstream;
}

export interface RunningProxy {
  url: string;
  metrics: ProxyMetrics;
  /** Swaps the configuration as a reload would. */
  setConfig(config: ProxyConfig): void;
}

export interface Harness {
  authority: TestAuthority;
  authorityUrl: string;
  opened: OpenedBackend;
  clock: ManualClock;
  upstream: Upstream;
  config: ProxyConfig;
  startProxy(options?: { store?: SharedStore; now?: () => number; upstream?: string }): Promise<RunningProxy>;
  permit(options?: { id?: string; admin?: string }): Promise<{ token: string; id: string }>;
  records(): Promise<VerificationRecord[]>;
}

/**
 * `options.config` goes on top of the test authority's configuration; `options.port` is the
 * authority's port (default: any free one), for a test that must name its URL before it starts;
 * `options.consoleFiles`, the console it serves (default: a stand-in page).
 */
export async function withHarness(
  t: Test,
  backend: ReturnType<typeof appBackends>[number],
  fn: (h: Harness) => Promise<void>,
  options: { config?: AuthorityConfigInput; port?: number; consoleFiles?: ConsoleFiles } = {},
): Promise<void> {
  const clock = new ManualClock(Date.now());
  const opened = await backend.open({ now: () => clock.now() });
  const authority = await createTestAuthority(opened, { config: { ...GENEROUS_LIMITS, ...options.config }, clock, ...(options.consoleFiles ? { consoleFiles: options.consoleFiles } : {}) });
  t.teardown(async () => {
    await authority.close();
    await opened.cleanup();
  });
  const authorityUrl = (await authority.app.listen({ host: '127.0.0.1', port: options.port ?? 0 })).replace('localhost', '127.0.0.1');
  // The authority dates a permit no earlier than the replay store's epoch, which Redis creates at
  // its own (real) time on the first evaluate: a manual clock left behind by a slow set-up would
  // make the gate, on the same clock, find fresh permits not yet valid.
  clock.advance(Math.max(0, Date.now() - clock.now()));
  const upstream = await startUpstream(t);
  const jwks = await (await request(`${authorityUrl}/v1/permit-keys`, { headers: authority.bearer(authority.acmeAdmin) })).body.json();
  const keys = staticKeyResolver(jwks as Parameters<typeof staticKeyResolver>[0]);
  const config = proxyConfig(authority.acme.id, upstream.url);
  const logger = createLogger({ name: 'proxy', level: 'silent' });

  const h: Harness = {
    authority,
    authorityUrl,
    opened,
    clock,
    upstream,
    config,
    async startProxy(options = {}) {
      let state: ProxyState = proxyState(options.upstream ? { ...config, upstream: options.upstream } : config);
      const metrics = createProxyMetrics();
      const store = options.store ?? opened.store;
      const records = createRecordBacklog({
        store,
        stream: verificationStream(authority.acme.id),
        logger,
        onAppendFailed: (count) => metrics.recordAppendFailures.inc(count),
      });
      const executionRecords = createExecutionRecords({ records });
      const gate = createGate({
        organization: authority.acme.id,
        issuer: config.issuer,
        audience: config.audience,
        keys,
        store,
        now: options.now ?? (() => clock.now()),
        permitHeader: config.permit_header,
        records,
        executionRecords,
      });
      const proxy = createProxyServer({ current: () => state, gate, executionRecords, metrics, logger });
      const url = await listen(proxy.server);
      t.teardown(async () => {
        await proxy.close();
        await records.close(1_000);
      });
      return {
        url,
        metrics,
        setConfig(next) {
          state = proxyState(next);
        },
      };
    },
    async permit({ id = 'order-1', admin = authority.acmeAdmin } = {}) {
      const response = await request(`${authorityUrl}/v1/evaluate`, {
        method: 'POST',
        headers: { authorization: `Bearer ${admin}`, 'content-type': 'application/json' },
        body: JSON.stringify({ action_type: 'demo.echo', actor_id: 'demo-agent', context: { environment: 'dev', target: { type: 'demo', id } } }),
      });
      const text = await response.body.text();
      if (response.statusCode !== 200) throw new Error(`evaluate answered ${response.statusCode}: ${text}`);
      const decision = EvaluateResponse.parse(JSON.parse(text));
      if (!decision.permit_token || !decision.permit_id) throw new Error(`no permit: ${text}`);
      return { token: decision.permit_token, id: decision.permit_id };
    },
    async records() {
      const stored = await opened.store.readRecords(verificationStream(authority.acme.id), '0', 10_000);
      return stored.map((entry) => VerificationRecord.parse(entry.fields));
    },
  };
  await fn(h);
}

export async function call(
  base: string,
  path: string,
  options: { token?: string; actor?: string | null; body?: string | Readable; headers?: Record<string, string>; method?: 'POST' | 'GET' } = {},
) {
  const headers: Record<string, string> = { 'content-type': 'application/json', ...options.headers };
  if (options.token !== undefined) headers['x-service-permit'] = options.token;
  if (options.actor !== null) headers['x-actor-id'] = options.actor ?? 'demo-agent';
  const response = await request(`${base}${path}`, { method: options.method ?? 'POST', headers, body: options.body ?? '{"hello":"world"}' });
  const text = await response.body.text();
  return { status: response.statusCode, headers: response.headers, text, json: () => JSON.parse(text) as Record<string, unknown> };
}

/** Polls (bounded, no sleeping on a timer) until `find` returns something. */
export async function eventually<T>(what: string, find: () => Promise<T | undefined>): Promise<T> {
  for (let i = 0; i < 500; i++) {
    const found = await find();
    if (found !== undefined) return found;
    await new Promise((resolve) => setImmediate(resolve));
  }
  throw new Error(`gave up waiting for ${what}`);
}

