/**
 * A planned Redis switchover (`SENTINEL FAILOVER`, two replicas, `store.durability: replica`)
 * under load through two proxies in front of one upstream, end to end into the audit log: a real
 * authority (`startAuthority`, PGlite, its drain reading the verification stream) and two proxy
 * listeners (`startProxy`) on the same Sentinel group. Each permit is sent through both proxies at
 * once (a race), and sent again while it was answered 503 (a client retrying); after the load,
 * every used permit is replayed.
 *
 * Counted, never timed: each permit reached the upstream exactly once; every replay was refused;
 * the audit log holds exactly one `permit.verified` and one `execution.observed` per permit, both
 * with the request id of the request that went through, and no `permit.verified` for a request
 * answered 503.
 *
 * Regression pinned: with two replicas, `WAIT 1` let the replica that was not promoted acknowledge
 * consumes the old primary took during the switchover and then drop them, so those permits ran
 * twice; a consume answered 503 could leave its `permit.verified` behind.
 */
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import t from 'tap';
import { request } from 'undici';
import { parseAuthorityConfig } from '../../authority/config.js';
import { startAuthority } from '../../authority/main.js';
import { startProxy } from '../../proxy/main.js';
import { createLogger } from '../../shared/logging.js';
import { AuditEventsResponse, type AuditEventWire } from '../../shared/wire/audit.js';
import { EvaluateResponse } from '../../shared/wire/evaluate.js';
import { failoverSentinelPrimary, startSentinelGroup } from '../helpers/redis.js';
import { waitFor } from '../helpers/record-stores.js';

const PERMITS = 300;
/** The switchover starts once this many permits have been through. */
const BEFORE_FAULT = 80;
const WORKERS = 6;
const generous = { per_minute: 1_000_000, burst: 100_000 };
const silent = (name: string) => createLogger({ name, level: 'silent' });

// Three sentinels, three Redis servers, an authority and two proxies on a 2-core machine.
t.setTimeout(10 * 60_000);

t.test('SENTINEL FAILOVER with two replicas, through two proxies: each permit runs once, replays are refused, and the audit log holds one verification and one execution per permit', async (t) => {
  const started = await startSentinelGroup(undefined, { replicas: 2 });
  if (!started.ok) throw new Error(started.reason);
  const group = started.group;
  t.teardown(() => group.stop());
  const store = {
    topology: 'sentinel' as const,
    sentinels: group.sentinels.map((s) => `${s.host}:${s.port}`),
    sentinel_name: group.name,
    durability: 'replica' as const,
    command_timeout_ms: 1000,
  };
  const dir = await mkdtemp(join(tmpdir(), 'countersign-switchover-'));
  t.teardown(() => rm(dir, { recursive: true, force: true }));

  const effects = new Map<string, number>();
  const upstream = createServer((req, res) => {
    const id = /^\/echo\/([^/?]+)/.exec(req.url ?? '')?.[1] ?? '?';
    effects.set(id, (effects.get(id) ?? 0) + 1);
    req.resume();
    req.on('end', () => res.writeHead(200, { 'content-type': 'text/plain' }).end('ran'));
  });
  await new Promise<void>((resolve) => upstream.listen(0, '127.0.0.1', resolve));
  t.teardown(() => new Promise<void>((resolve) => (upstream.closeAllConnections(), upstream.close(() => resolve()))));

  const config = parseAuthorityConfig({
    data_dir: join(dir, 'data'),
    listen: '127.0.0.1:0',
    admin_listen: '127.0.0.1:0',
    store,
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

  const proxies: Awaited<ReturnType<typeof startProxy>>[] = [];
  for (const name of ['a', 'b']) {
    const file = join(dir, `proxy-${name}.yaml`);
    await writeFile(
      file,
      JSON.stringify({
        listen: '127.0.0.1:0',
        admin_listen: '127.0.0.1:0',
        upstream: `http://127.0.0.1:${(upstream.address() as AddressInfo).port}`,
        authority: { url: authority.apiUrl, api_key_file: keyFile },
        organization,
        store,
        log_level: 'silent',
        routes: [
          {
            name: 'echo',
            match: { method: 'POST', path: '/echo/:id' },
            action_type: 'demo.echo',
            facts: { actor_id: { header: 'X-Actor-Id' }, environment: { const: 'dev' }, target: { type: { const: 'demo' }, id: { path: 'id' } } },
          },
        ],
      }),
    );
    const proxy = await startProxy(file, { env: {}, watch: false, keyRefreshIntervalMs: 3_600_000, logger: silent(`proxy-${name}`) });
    t.teardown(() => proxy.close());
    proxies.push(proxy);
  }

  /** A permit for `id`; the authority answers 503 while its own Redis client follows the switchover, so ask again. */
  const permit = async (id: string): Promise<string> => {
    for (;;) {
      const response = await request(`${authority.apiUrl}/v1/evaluate`, {
        method: 'POST',
        headers: { ...bearer, 'content-type': 'application/json' },
        body: JSON.stringify({ action_type: 'demo.echo', actor_id: 'demo-agent', context: { environment: 'dev', target: { type: 'demo', id } } }),
      });
      if (response.statusCode === 200) {
        const token = EvaluateResponse.parse(await response.body.json()).permit_token;
        if (token === undefined) throw new Error(`no permit for ${id}`);
        return token;
      }
      await response.body.dump();
      if (response.statusCode !== 503) throw new Error(`evaluate for ${id} answered ${response.statusCode}`);
      await sleep(100);
    }
  };
  const statuses = new Map<string, number>();
  const send = async (proxy: number, id: string, token: string, requestId: string): Promise<number> => {
    const response = await request(`${proxies[proxy]!.url}/echo/${id}`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'x-actor-id': 'demo-agent', 'x-service-permit': token, 'x-request-id': requestId },
      body: '{}',
    });
    await response.body.dump();
    statuses.set(requestId, response.statusCode);
    return response.statusCode;
  };

  const tokens = new Map<string, string>();
  let done = 0;
  let retries = 0;
  /** Both proxies at once; while neither let it through and one answered 503, the client sends it again. */
  const race = async (id: string): Promise<void> => {
    const token = await permit(id);
    tokens.set(id, token);
    let answers: number[] = await Promise.all([send(0, id, token, `${id}-a`), send(1, id, token, `${id}-b`)]);
    for (let attempt = 1; !answers.includes(200) && answers.includes(503); attempt++) {
      retries += 1;
      await sleep(100);
      answers = [await send(attempt % 2, id, token, `${id}-r${attempt}`)];
    }
    done += 1;
  };
  const ids = Array.from({ length: PERMITS }, (_, i) => `p${i}`);
  const queue = [...ids];
  const workers = Array.from({ length: WORKERS }, async () => {
    for (let id = queue.shift(); id !== undefined; id = queue.shift()) await race(id);
  });
  await waitFor(`${BEFORE_FAULT} permits through before the switchover`, () => done >= BEFORE_FAULT);
  await failoverSentinelPrimary(group, { how: 'switchover' });
  await Promise.all(workers);
  t.comment(`${retries} requests were sent again after a 503 while the primary changed`);

  t.same(ids.filter((id) => effects.get(id) !== 1).map((id) => `${id}: ${effects.get(id) ?? 0}`), [], 'every permit reached the upstream exactly once');

  const replays = await Promise.all(ids.map((id, i) => send(i % 2, id, tokens.get(id)!, `${id}-replay`)));
  t.same(replays.filter((status) => status !== 403), [], 'every replay on the new primary is refused (403)');
  t.same(ids.filter((id) => effects.get(id) !== 1), [], 'and none of them reached the upstream');

  const through = new Set([...statuses].filter(([, status]) => status === 200).map(([requestId]) => requestId));
  const unavailable = new Set([...statuses].filter(([, status]) => status === 503).map(([requestId]) => requestId));
  const eventsOf = async (type: string): Promise<AuditEventWire[]> => {
    const events: AuditEventWire[] = [];
    let cursor: string | null = null;
    do {
      const query: string = `types=${type}&limit=500${cursor === null ? '' : `&cursor=${encodeURIComponent(cursor)}`}`;
      const response = await request(`${authority.apiUrl}/v1/audit/events?${query}`, { headers: bearer });
      if (response.statusCode !== 200) throw new Error(`audit events answered ${response.statusCode}: ${await response.body.text()}`);
      const page = AuditEventsResponse.parse(await response.body.json());
      events.push(...page.events);
      cursor = page.next_cursor;
    } while (cursor !== null);
    return events;
  };
  await waitFor('the verifications and executions to reach the audit log', async () => (await eventsOf('execution.observed')).length >= PERMITS && (await eventsOf('permit.verified')).length >= PERMITS);
  // Another drain run or two must not add anything. A wait, not a timing assertion.
  await sleep(3_000);
  for (const type of ['permit.verified', 'execution.observed']) {
    const events = await eventsOf(type);
    const requestIds = events.map((event) => event.request_id ?? '');
    t.equal(events.length, PERMITS, `${type}: exactly one per permit`);
    t.same(requestIds.filter((requestId) => !through.has(requestId)), [], `${type}: each for the request that went through`);
    t.equal(new Set(requestIds).size, requestIds.length, `${type}: no request recorded twice`);
    t.same(requestIds.filter((requestId) => unavailable.has(requestId)), [], `${type}: none for a request answered 503`);
  }
});
