/**
 * No refusal or would-block record is lost while the store is unreachable, on every front door:
 * a real authority (`startAuthority`, PGlite data directory, draining the stream every second),
 * the proxy process (`startProxy`) with its forwarding listener and both Envoy ext_authz
 * transports (a real @grpc/grpc-js client on the proxy's .proto files, and Envoy's HTTP check
 * request), all on a Redis server of the test's own that it kills (SIGKILL) and starts again.
 *
 * Redis down: N enforce requests with valid permits are answered 503 `gate_unavailable` at once
 * and N shadow requests still go through, on each front door; the records are held in the proxy.
 * Redis back: exactly one `permit.rejected` audit event per request, 3 × 2N in all, no duplicates.
 * Waiting is bounded polling only; no timing assertions.
 *
 * @example
 *   npx tap --disable-coverage test/e2e/records-while-store-down.test.ts
 */
import { credentials, type Client, type ServiceError } from '@grpc/grpc-js';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import t from 'tap';
import { request } from 'undici';
import { parseAuthorityConfig } from '../../authority/config.js';
import { startAuthority } from '../../authority/main.js';
import { authorizationService, type CheckRequest, type CheckResponse } from '../../proxy/ext-authz/protos.js';
import { startProxy } from '../../proxy/main.js';
import { createLogger } from '../../shared/logging.js';
import { AuditEventsResponse } from '../../shared/wire/audit.js';
import { EvaluateResponse } from '../../shared/wire/evaluate.js';
import { checkRequest, fromCheckResponse } from '../helpers/ext-authz-harness.js';
import { startRedisProcess } from '../helpers/redis-process.js';
import { waitFor } from '../helpers/record-stores.js';

const N = 3;
const DOORS = ['sidecar', 'grpc', 'http'] as const;
type Door = (typeof DOORS)[number];
const generous = { per_minute: 100_000, burst: 100_000 };
const silent = (name: string) => createLogger({ name, level: 'silent' });

// Redis, an authority and a proxy started and stopped: longer than .taprc's two minutes while
// other test files keep a 2-core machine busy.
t.setTimeout(6 * 60_000);

t.test('Redis killed: every front door’s refusals and would-blocks are held, and reach the audit log once each when it is back', async (t) => {
  const redis = await startRedisProcess(t, { persistence: 'aof' });
  if (!redis) return;
  const dir = await mkdtemp(join(tmpdir(), 'countersign-records-'));
  t.teardown(() => rm(dir, { recursive: true, force: true }));

  let upstreamRequests = 0;
  const upstream = createServer((req, res) => {
    upstreamRequests += 1;
    req.resume();
    req.on('end', () => res.writeHead(200, { 'content-type': 'text/plain' }).end('upstream'));
  });
  await new Promise<void>((resolve) => upstream.listen(0, '127.0.0.1', resolve));
  t.teardown(() => new Promise<void>((resolve) => (upstream.closeAllConnections(), upstream.close(() => resolve()))));

  const config = parseAuthorityConfig({
    data_dir: join(dir, 'data'),
    listen: '127.0.0.1:0',
    admin_listen: '127.0.0.1:0',
    redis_url: redis.url,
    log_level: 'silent',
    rate_limits: { evaluate: generous, plans: { community: generous, team: generous, business: generous, enterprise: generous } },
  });
  const authority = await startAuthority(config, { env: {}, logger: silent('authority') });
  t.teardown(() => authority.close());
  const { api_key: adminKey, organization_id: organization } = JSON.parse(await readFile(join(config.data_dir, 'bootstrap.json'), 'utf8')) as {
    api_key: string;
    organization_id: string;
  };
  const bearer = { authorization: `Bearer ${adminKey}` };
  const created = await request(`${authority.apiUrl}/v1/api-keys`, {
    method: 'POST',
    headers: { ...bearer, 'content-type': 'application/json' },
    body: JSON.stringify({ name: 'proxy', scopes: ['verify:execute'] }),
  });
  const keyFile = join(dir, 'proxy.key');
  await writeFile(keyFile, `${((await created.body.json()) as { secret: string }).secret}\n`, { mode: 0o600 });

  const facts = `facts:
      actor_id: { header: X-Actor-Id }
      environment: { const: dev }
      target: { type: { const: demo }, id: { path: id } }`;
  const file = join(dir, 'proxy.yaml');
  await writeFile(
    file,
    `listen: 127.0.0.1:0
admin_listen: 127.0.0.1:0
upstream: http://127.0.0.1:${(upstream.address() as AddressInfo).port}
authority: { url: ${authority.apiUrl}, api_key_file: ${keyFile} }
organization: ${organization}
redis_url: ${redis.url}
store: { command_timeout_ms: 250 }
log_level: silent
ext_authz:
  grpc: { listen: 127.0.0.1:0 }
  http: { listen: 127.0.0.1:0 }
routes:
  - name: echo
    match: { method: POST, path: /echo/:id }
    action_type: demo.echo
    ${facts}
  - name: echo-shadow
    match: { method: POST, path: /s/echo/:id }
    action_type: demo.echo
    mode: shadow
    ${facts}
`,
  );
  const proxy = await startProxy(file, { env: {}, watch: false, keyRefreshIntervalMs: 3_600_000, logger: silent('proxy') });
  t.teardown(() => proxy.close());
  const Authorization = authorizationService();
  const grpc = new Authorization(proxy.extAuthz.grpc!, credentials.createInsecure()) as unknown as Client & {
    Check(request: CheckRequest, callback: (error: ServiceError | null, response?: CheckResponse) => void): void;
  };
  t.teardown(() => grpc.close());

  const permit = async (id: string): Promise<string> => {
    const response = await request(`${authority.apiUrl}/v1/evaluate`, {
      method: 'POST',
      headers: { ...bearer, 'content-type': 'application/json' },
      body: JSON.stringify({ action_type: 'demo.echo', actor_id: 'demo-agent', context: { environment: 'dev', target: { type: 'demo', id } } }),
    });
    const decision = EvaluateResponse.parse(await response.body.json());
    if (decision.permit_token === undefined) throw new Error(`no permit for ${id}`);
    return decision.permit_token;
  };
  /** One request through a front door: whether it was let through, and the status of a refusal. */
  const send = async (door: Door, path: string, token: string, requestId: string): Promise<{ through: boolean; status: number; error?: unknown }> => {
    const headers = { 'content-type': 'application/json', 'x-actor-id': 'demo-agent', 'x-service-permit': token, 'x-request-id': requestId };
    if (door === 'grpc') {
      const response = await new Promise<CheckResponse>((resolve, reject) =>
        grpc.Check(checkRequest({ path, token, headers: { 'x-request-id': requestId } }), (error, answer) => (error ? reject(error) : resolve(answer!))),
      );
      const verdict = fromCheckResponse(response);
      return { through: verdict.allowed, status: verdict.status, error: verdict.body?.error };
    }
    const base = door === 'sidecar' ? proxy.url : proxy.extAuthz.http!;
    const response = await request(`${base}${path}`, { method: 'POST', headers, body: '{}' });
    const text = await response.body.text();
    const through = response.statusCode === 200;
    return { through, status: response.statusCode, error: through ? undefined : (JSON.parse(text) as { error: string }).error };
  };

  // Permits are issued while Redis is up: the authority's evaluate needs it for its rate limits.
  const plan = DOORS.flatMap((door) =>
    Array.from({ length: N }, (_, i) => [
      { door, mode: 'enforce', id: `${door}-e-${i}`, path: `/echo/${door}-e-${i}` },
      { door, mode: 'shadow', id: `${door}-s-${i}`, path: `/s/echo/${door}-s-${i}` },
    ]).flat(),
  );
  const tokens = new Map<string, string>();
  for (const step of plan) tokens.set(step.id, await permit(step.id));

  await redis.crash();
  for (const step of plan) {
    const answer = await send(step.door, step.path, tokens.get(step.id)!, `rid-${step.id}`);
    if (step.mode === 'enforce') t.match(answer, { through: false, status: 503, error: 'gate_unavailable' }, `${step.door} enforce ${step.id}: 503 gate_unavailable`);
    else t.equal(answer.through, true, `${step.door} shadow ${step.id}: let through`);
  }
  t.equal(upstreamRequests, N, 'the sidecar forwarded its shadow requests and nothing else');
  const held = async () => (await proxy.metrics.recordsHeld.get()).values[0]?.value ?? 0;
  await waitFor('every refusal to be held', async () => (await held()) === plan.length);
  t.equal((await proxy.metrics.recordAppendFailures.get()).values[0]?.value, plan.length, 'countersign_proxy_record_append_failures_total counts each once');

  await redis.start();
  const wanted = new Set(plan.map((step) => `rid-${step.id}`));
  const rejected = async () => {
    const response = await request(`${authority.apiUrl}/v1/audit/events?types=permit.rejected&limit=500`, { headers: bearer });
    if (response.statusCode !== 200) {
      await response.body.dump();
      return [];
    }
    return AuditEventsResponse.parse(await response.body.json()).events.filter((event) => event.request_id !== null && wanted.has(event.request_id));
  };
  await waitFor('the held records to reach the audit log', async () => new Set((await rejected()).map((event) => event.request_id)).size === plan.length);
  // An append Redis took but did not acknowledge in time (its command time-out is 250 ms here, and
  // a restarted Redis can be slow) stays held and is sent again after a back-off, so the audit log
  // can hold every record before the backlog is empty: wait for both, then count the copies.
  await waitFor('the backlog to empty', async () => (await held()) === 0);
  t.equal(await held(), 0, 'nothing is held any more');
  // Another drain run or two, after any second copy was sent, must not add anything. A wait, not
  // a timing assertion.
  await new Promise((resolve) => setTimeout(resolve, 2_500));
  const events = await rejected();
  t.equal(events.length, DOORS.length * 2 * N, `exactly ${DOORS.length} × 2 × ${N} permit.rejected events`);
  for (const step of plan) {
    const mine = events.filter((event) => event.request_id === `rid-${step.id}`);
    t.equal(mine.length, 1, `${step.id}: recorded once`);
    t.match(mine[0]?.payload, { details: { mode: step.mode, verify_error_code: 'INTERNAL_ERROR', gate: step.mode === 'enforce' ? 'proxy:echo' : 'proxy:echo-shadow' } });
  }
  t.same((await proxy.metrics.recordsDropped.get()).values, [], 'nothing was dropped');
});
