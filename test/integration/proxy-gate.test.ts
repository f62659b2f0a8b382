/**
 * The proxy gate's decision against REAL permits: a real authority app evaluates demo.echo and
 * issues permits; the gate verifies them with the published JWKS over the SAME shared store the
 * authority uses (so revocation reaches it), and its records land in acme's verification stream.
 * Time moves through the gate's `now`, never by sleeping. Runs on PGlite + the in-process store,
 * and on Postgres + Redis when they are available.
 *
 * @example
 *   npx tap --disable-coverage test/integration/proxy-gate.test.ts
 *   node test/run.mjs test/integration/proxy-gate.test.ts   # with Postgres + Redis
 */
import t, { type Test } from 'tap';
import { parseProxyConfig } from '../../proxy/config.js';
import type { ProxyConfigInput, ProxyRoute } from '../../proxy/config.js';
import { createExecutionRecords } from '../../proxy/execution-records.js';
import { createGate } from '../../proxy/gate.js';
import { executionRecord } from '../../proxy/gate-records.js';
import type { GateDecision, GateInput, GateOptions } from '../../proxy/gate.js';
import { createRecordBacklog } from '../../proxy/record-backlog.js';
import { createLogger } from '../../shared/logging.js';
import { verificationStream } from '../../shared/permits/store-keys.js';
import { RemoteKeyResolver } from '../../shared/permits/remote-keys.js';
import { staticKeyResolver } from '../../shared/permits/static-keys.js';
import type { SharedStore } from '../../shared/store/types.js';
import { EvaluateResponse } from '../../shared/wire/evaluate.js';
import { VerificationRecord } from '../../shared/wire/verification-records.js';
import { createTestAuthority, type TestAuthority } from '../helpers/authority.js';
import { appBackends, realServersMissing } from '../helpers/backends.js';
import { ManualClock } from '../helpers/clock.js';
import { downStore } from '../helpers/loopback.js';
import { tamperSignature } from '../helpers/permit-tokens.js';
import { eventually } from '../helpers/proxy-harness.js';

const generous = { rate_limits: { evaluate: { per_minute: 100_000, burst: 100_000 }, plans: { community: { per_minute: 100_000, burst: 100_000 }, business: { per_minute: 100_000, burst: 100_000 } } } };

const echoFacts = (environment: string, id: unknown = { path: 'id' }) => ({
  actor_id: { header: 'X-Actor-Id' },
  environment: { const: environment },
  target: { type: { const: 'demo' }, id },
});

function proxyConfig(organization: string, overrides: Partial<ProxyConfigInput> = {}) {
  return parseProxyConfig({
    upstream: 'http://127.0.0.1:9',
    authority: { url: 'http://127.0.0.1:7070', api_key: 'cs_test_unused' },
    organization,
    routes: [
      { name: 'echo', match: { method: 'POST', path: '/echo/:id' }, action_type: 'demo.echo', facts: echoFacts('dev') },
      { name: 'echo-prod', match: { method: 'POST', path: '/prod/echo/:id' }, action_type: 'demo.echo', facts: echoFacts('prod') },
      { name: 'echo-query', match: { method: 'POST', path: '/q/echo' }, action_type: 'demo.echo', facts: echoFacts('dev', { query: 'id' }) },
      { name: 'echo-body', match: { method: 'POST', path: '/b/echo' }, action_type: 'demo.echo', max_body_bytes: 1024, facts: echoFacts('dev', { body: '/id' }) },
      {
        name: 'echo-permit-actor',
        match: { method: 'POST', path: '/p/echo/:id' },
        action_type: 'demo.echo',
        facts: { ...echoFacts('dev'), actor_id: { permit: true } },
      },
      { name: 'echo-shadow', match: { method: 'POST', path: '/s/echo/:id' }, action_type: 'demo.echo', mode: 'shadow', facts: echoFacts('dev') },
    ],
    ...overrides,
  });
}

function routeOf(routes: readonly ProxyRoute[], name: string): ProxyRoute {
  const route = routes.find((candidate) => candidate.name === name);
  if (!route) throw new Error(`no route ${name}`);
  return route;
}

/** Rewrites the payload's `sub`, keeping the original signature. */
function forgeSubject(token: string, sub: string): string {
  const [header, payload, signature] = token.split('.') as [string, string, string];
  const claims = JSON.parse(Buffer.from(payload, 'base64url').toString('utf8')) as Record<string, unknown>;
  return `${header}.${Buffer.from(JSON.stringify({ ...claims, sub })).toString('base64url')}.${signature}`;
}

interface Harness {
  authority: TestAuthority;
  store: SharedStore;
  clock: ManualClock;
  routes: readonly ProxyRoute[];
  gate: (overrides?: Partial<GateOptions>) => ReturnType<typeof createGate>;
  permit: (options?: { actor?: string; id?: string; admin?: string }) => Promise<{ token: string; id: string }>;
  input: (route: string, options: { token?: string; id?: string; actor?: string | null; query?: string; body?: unknown; bodyTooLarge?: boolean }) => GateInput;
  records: () => Promise<VerificationRecord[]>;
}

async function withHarness(t: Test, backend: ReturnType<typeof appBackends>[number], fn: (h: Harness) => Promise<void>): Promise<void> {
  const clock = new ManualClock(Date.now());
  const opened = await backend.open({ now: () => clock.now() });
  const authority = await createTestAuthority(opened, { config: generous, clock });
  t.teardown(async () => {
    await authority.close();
    await opened.cleanup();
  });
  const jwks = (await authority.app.inject({ method: 'GET', url: '/v1/permit-keys', headers: authority.bearer(authority.acmeAdmin) })).json();
  const keys = staticKeyResolver(jwks);
  const config = proxyConfig(authority.acme.id);
  const backlogOver = (store: SharedStore) => {
    const backlog = createRecordBacklog({ store, stream: verificationStream(authority.acme.id), logger: createLogger({ name: 'proxy', level: 'silent' }) });
    t.teardown(() => backlog.close(0));
    return backlog;
  };
  let n = 0;
  const h: Harness = {
    authority,
    store: opened.store,
    clock,
    routes: config.routes,
    gate: (overrides = {}) =>
      createGate({
        organization: authority.acme.id,
        issuer: config.issuer,
        audience: config.audience,
        keys,
        store: opened.store,
        now: () => clock.now(),
        permitHeader: config.permit_header,
        records: backlogOver(overrides.store ?? opened.store),
        ...overrides,
      }),
    async permit({ actor = 'demo-agent', id = 'order-1', admin = authority.acmeAdmin } = {}) {
      const response = await authority.app.inject({
        method: 'POST',
        url: '/v1/evaluate',
        headers: { authorization: `Bearer ${admin}`, 'content-type': 'application/json' },
        payload: JSON.stringify({ action_type: 'demo.echo', actor_id: actor, context: { environment: 'dev', target: { type: 'demo', id } } }),
      });
      if (response.statusCode !== 200) throw new Error(`evaluate answered ${response.statusCode}: ${response.body}`);
      const decision = EvaluateResponse.parse(response.json());
      if (!decision.permit_token || !decision.permit_id) throw new Error(`no permit: ${response.body}`);
      return { token: decision.permit_token, id: decision.permit_id };
    },
    input(route, { token, id = 'order-1', actor = 'demo-agent', query = '', body, bodyTooLarge }) {
      const headers: Record<string, string> = {};
      // The header as configured (X-Service-Permit), lower-cased as node:http delivers it.
      if (token !== undefined) headers[config.permit_header] = token;
      if (actor !== null) headers['x-actor-id'] = actor;
      return {
        route: routeOf(config.routes, route),
        params: (route === 'echo-query' || route === 'echo-body' ? {} : { id }) as Record<string, string>,
        query: new URLSearchParams(query),
        headers,
        ...(body !== undefined ? { body } : {}),
        ...(bodyTooLarge !== undefined ? { bodyTooLarge } : {}),
        requestId: `req-${++n}`,
      };
    },
    async records() {
      const stored = await opened.store.readRecords(verificationStream(authority.acme.id), '0', 10_000);
      return stored.map((entry) => VerificationRecord.parse(entry.fields));
    },
  };
  await fn(h);
}

/** Asserts a block and returns it. */
function blocked(t: Test, decision: GateDecision, status: number, code: string, verifyCode: string | null, message: string) {
  t.match(decision, { action: 'block', status, code, verifyCode, reason: verifyCode ?? String }, message);
}

for (const backend of appBackends()) {
  t.test(`enforce: real permits through the gate on ${backend.name}`, (t) =>
    withHarness(t, backend, async (h) => {
      const gate = h.gate();
      /** request id → the code its permit.rejected record must carry. */
      const refused = new Map<string, string>();
      const check = async (input: GateInput) => {
        const decision = await gate.check(input);
        if (decision.action === 'block') refused.set(input.requestId, decision.verifyCode ?? decision.reason);
        return decision;
      };

      // Happy path: forward, consumed, exactly one permit.verified record.
      const good = await h.permit();
      const happyInput = h.input('echo', { token: good.token });
      const happy = await check(happyInput);
      t.match(happy, { action: 'forward', mode: 'enforce', permitId: good.id, wouldBlock: null, claims: { jti: good.id, sub: 'demo-agent', act: 'demo.echo', org: h.authority.acme.id } });
      const verified = (await h.records()).filter((record) => record.kind === 'permit.verified');
      t.equal(verified.length, 1, 'the stream holds exactly one permit.verified record');
      t.match(verified[0], { gate: 'proxy:echo', mode: 'enforce', request_id: happyInput.requestId, permit_id: good.id, action_type: 'demo.echo', actor_id: 'demo-agent', code: '', upstream_status: '' });

      blocked(t, await check(h.input('echo', {})), 403, 'permit_required', 'MISSING_PERMIT', 'no permit → 403 permit_required');
      blocked(t, await check(h.input('echo', { token: '' })), 403, 'permit_required', 'MISSING_PERMIT', 'an empty header is no permit');
      blocked(t, await check(h.input('echo', { token: good.token })), 403, 'permit_rejected', 'PERMIT_ALREADY_USED', 'replay');

      const expiring = await h.permit({ id: 'order-2' });
      const later = h.gate({ now: () => h.clock.now() + 120_000 });
      const expiredInput = h.input('echo', { token: expiring.token, id: 'order-2' });
      const expired = await later.check(expiredInput);
      blocked(t, expired, 403, 'permit_rejected', 'PERMIT_EXPIRED', 'expired');
      refused.set(expiredInput.requestId, 'PERMIT_EXPIRED');

      const tampered = await h.permit({ id: 'order-3' });
      blocked(t, await check(h.input('echo', { token: tamperSignature(tampered.token), id: 'order-3' })), 403, 'permit_rejected', 'PERMIT_INVALID', 'tampered signature');
      blocked(t, await check(h.input('echo', { token: 'not-a-permit', id: 'order-3' })), 403, 'permit_rejected', 'PERMIT_INVALID', 'garbage');

      const globex = await h.permit({ id: 'order-4', admin: h.authority.globexAdmin });
      blocked(t, await check(h.input('echo', { token: globex.token, id: 'order-4' })), 403, 'permit_rejected', 'ORG_MISMATCH', "globex's permit at acme's gate");

      const bound = await h.permit({ id: 'order-5' });
      blocked(t, await check(h.input('echo', { token: bound.token, id: 'order-6' })), 403, 'permit_rejected', 'BINDING_MISMATCH', 'another target id');
      blocked(t, await check(h.input('echo-prod', { token: bound.token, id: 'order-5' })), 403, 'permit_rejected', 'BINDING_MISMATCH', 'another environment');
      blocked(t, await check(h.input('echo', { token: bound.token, id: 'order-5', actor: 'someone-else' })), 403, 'permit_rejected', 'ACTOR_MISMATCH', 'another actor');
      const noActor = await check(h.input('echo', { token: bound.token, id: 'order-5', actor: null }));
      blocked(t, noActor, 403, 'permit_rejected', 'BINDING_MISMATCH', 'no actor header');
      t.match(noActor, { detail: /actor_id/ }, 'naming the fact');

      // A fact the request lacks refuses before the permit is touched: it stays usable.
      const missingFact = await check(h.input('echo-query', { token: bound.token }));
      blocked(t, missingFact, 403, 'permit_rejected', 'BINDING_MISMATCH', 'a fact missing from the request → 403, not 503');
      t.match(missingFact, { detail: /target\.id/ }, 'the refusal names the fact');
      blocked(t, await check(h.input('echo-query', { token: bound.token, query: 'id=order-5&id=order-6' })), 403, 'permit_rejected', 'BINDING_MISMATCH', 'an ambiguous fact refuses');
      t.match(await check(h.input('echo-query', { token: bound.token, query: 'id=order-5' })), { action: 'forward', permitId: bound.id }, 'the refused mismatches did not consume the permit');

      const revoked = await h.permit({ id: 'order-7' });
      const revoke = await h.authority.app.inject({
        method: 'POST',
        url: `/v1/permits/${revoked.id}/revoke`,
        headers: { ...h.authority.bearer(h.authority.acmeAdmin), 'content-type': 'application/json' },
        payload: JSON.stringify({ reason: 'test' }),
      });
      t.equal(revoke.statusCode, 200);
      blocked(t, await check(h.input('echo', { token: revoked.token, id: 'order-7' })), 403, 'permit_rejected', 'PERMIT_REVOKED', 'revocation reaches the gate through the shared store');

      // Body-bound route: over the limit the facts cannot be read → 503; within it, forward.
      const bodyPermit = await h.permit({ id: 'order-8' });
      const tooLarge = await check(h.input('echo-body', { token: bodyPermit.token, bodyTooLarge: true }));
      t.match(tooLarge, { action: 'block', status: 503, code: 'gate_unavailable', reason: 'BODY_TOO_LARGE', verifyCode: null }, 'body over max_body_bytes → 503');
      t.match(await check(h.input('echo-body', { token: bodyPermit.token, body: { id: 'order-8' } })), { action: 'forward', permitId: bodyPermit.id }, 'the body fact binds');

      // actor_id from the permit: no header needed, and a forged sub fails the signature.
      const own = await h.permit({ id: 'order-9' });
      blocked(t, await check(h.input('echo-permit-actor', { token: forgeSubject(own.token, 'someone-else'), id: 'order-9', actor: null })), 403, 'permit_rejected', 'PERMIT_INVALID', 'a forged sub fails the signature');
      t.match(await check(h.input('echo-permit-actor', { token: own.token, id: 'order-9', actor: 'ignored' })), { action: 'forward', permitId: own.id, claims: { sub: 'demo-agent' } }, 'actor from the verified permit');

      // Every refusal appended a permit.rejected record with its code.
      const records = await h.records();
      for (const [requestId, code] of refused) {
        const rejected = records.filter((record) => record.request_id === requestId);
        t.match(rejected, [{ kind: 'permit.rejected', mode: 'enforce', code }], `${requestId}: one permit.rejected record with ${code}`);
      }
      t.match(records.find((record) => record.code === 'PERMIT_ALREADY_USED'), { permit_id: good.id, actor_id: 'demo-agent' }, 'a refusal after the signature names the permit');
      t.equal(records.filter((record) => record.kind === 'permit.verified').length, 4, 'one permit.verified per forward');
    }),
  );

  t.test(`shadow: refusals forward with wouldBlock on ${backend.name}`, (t) =>
    withHarness(t, backend, async (h) => {
      const gate = h.gate();
      t.equal(routeOf(h.routes, 'echo-shadow').mode, 'shadow', 'mode per route');
      t.equal(routeOf(proxyConfig(h.authority.acme.id, { mode: 'shadow' }).routes, 'echo').mode, 'shadow', 'mode as default');

      const missing = await gate.check(h.input('echo-shadow', {}));
      t.match(missing, { action: 'forward', mode: 'shadow', permitId: null, claims: null, wouldBlock: { status: 403, code: 'permit_required', verifyCode: 'MISSING_PERMIT' } });

      const permit = await h.permit();
      const used = await gate.check(h.input('echo-shadow', { token: permit.token }));
      t.match(used, { action: 'forward', mode: 'shadow', permitId: permit.id, wouldBlock: null }, 'a valid permit forwards without wouldBlock');
      const replay = await gate.check(h.input('echo-shadow', { token: permit.token }));
      t.match(replay, { action: 'forward', permitId: permit.id, wouldBlock: { code: 'permit_rejected', reason: 'PERMIT_ALREADY_USED' } }, 'shadow consumed the permit');
      t.match(await gate.check(h.input('echo', { token: permit.token })), { action: 'block', verifyCode: 'PERMIT_ALREADY_USED' }, 'so enforce refuses it too');

      const other = await h.permit({ id: 'order-2' });
      t.match(await gate.check(h.input('echo-shadow', { token: other.token, id: 'order-3' })), { action: 'forward', wouldBlock: { verifyCode: 'BINDING_MISMATCH' } });
      t.match(await gate.check(h.input('echo-shadow', { token: other.token, id: 'order-2', actor: 'x' })), { action: 'forward', wouldBlock: { verifyCode: 'ACTOR_MISMATCH' } });
      t.match(await gate.check(h.input('echo-shadow', { token: tamperSignature(other.token), id: 'order-2' })), { action: 'forward', wouldBlock: { verifyCode: 'PERMIT_INVALID' } });
      t.match(await h.gate({ now: () => h.clock.now() + 120_000 }).check(h.input('echo-shadow', { token: other.token, id: 'order-2' })), { action: 'forward', wouldBlock: { verifyCode: 'PERMIT_EXPIRED' } });

      const records = await h.records();
      t.equal(records.filter((record) => record.kind === 'permit.rejected' && record.mode === 'shadow').length, 6, 'each would-block recorded in shadow mode');
      t.match(records.filter((record) => record.kind === 'permit.verified'), [{ mode: 'shadow', permit_id: permit.id }], 'the shadow success recorded its verification');
    }),
  );

  t.test(`verification impossible → 503 (enforce) or forward (shadow) on ${backend.name}`, (t) =>
    withHarness(t, backend, async (h) => {
      const permit = await h.permit();
      let failedAppends = 0;
      const store = downStore();
      const records = createRecordBacklog({ store, stream: verificationStream(h.authority.acme.id), logger: createLogger({ name: 'proxy', level: 'silent' }), onAppendFailed: (count) => (failedAppends += count) });
      t.teardown(() => records.close(0));
      const down = h.gate({ store, records });
      t.match(await down.check(h.input('echo', { token: permit.token })), { action: 'block', status: 503, code: 'gate_unavailable', verifyCode: 'INTERNAL_ERROR' }, 'a store that rejects → 503');
      t.match(await down.check(h.input('echo-shadow', { token: permit.token })), { action: 'forward', mode: 'shadow', wouldBlock: { status: 503, code: 'gate_unavailable' } }, 'shadow forwards anyway');
      // A 503's record is not waited for: it is held once the backlog's append has failed.
      await eventually('the two refusals to be held', async () => (failedAppends === 2 ? true : undefined));
      t.equal(records.size(), 2, 'both refusals are held for the store, the decisions stood');

      const noKeys = h.gate({ keys: new RemoteKeyResolver({ fetchKeys: () => Promise.reject(new Error('authority down')) }) });
      t.match(await noKeys.check(h.input('echo', { token: permit.token })), { action: 'block', status: 503, code: 'gate_unavailable' }, 'keys never loaded → 503');
      t.match(await h.gate().check(h.input('echo', { token: permit.token })), { action: 'forward', permitId: permit.id }, 'none of that consumed the permit');
    }),
  );

  t.test(`200 concurrent checks with one permit forward exactly once on ${backend.name}`, (t) =>
    withHarness(t, backend, async (h) => {
      const gate = h.gate();
      const permit = await h.permit();
      const decisions = await Promise.all(Array.from({ length: 200 }, () => gate.check(h.input('echo', { token: permit.token }))));
      t.equal(decisions.filter((decision) => decision.action === 'forward').length, 1, 'exactly one forward');
      t.ok(
        decisions.every((decision) => decision.action === 'forward' || decision.verifyCode === 'PERMIT_ALREADY_USED'),
        'every other check was PERMIT_ALREADY_USED',
      );
      const records = await h.records();
      t.equal(records.filter((record) => record.kind === 'permit.verified').length, 1, 'one permit.verified');
      t.equal(records.filter((record) => record.code === 'PERMIT_ALREADY_USED').length, 199, 'and 199 permit.rejected');
    }),
  );
  t.test(`a replay's refusal reaches the stream after the batched execution of the permit's first use on ${backend.name}`, (t) =>
    withHarness(t, backend, async (h) => {
      // Regression: execution.observed records wait in a batch for up to 5 ms while refusals
      // are appended at once, so a quick replay's permit.rejected overtook the first use's
      // execution.observed in the stream (and so in the audit chain and the permit's proof).
      const backlog = createRecordBacklog({ store: h.store, stream: verificationStream(h.authority.acme.id), logger: createLogger({ name: 'proxy', level: 'silent' }), onAppendFailed: () => t.fail('no failed append expected') });
      const records = createExecutionRecords({ records: backlog, flushAfterMs: 60_000 });
      const gate = h.gate({ records: backlog, executionRecords: records });
      const permit = await h.permit();
      const first = await gate.check(h.input('echo', { token: permit.token }));
      if (first.action !== 'forward') throw new Error('the first use must forward');
      records.add(executionRecord({ route: routeOf(h.routes, 'echo'), mode: 'enforce', requestId: 'req-first', permitId: first.permitId, claims: first.claims, upstreamStatus: 200, durationMs: 3, atMs: h.clock.now() }));
      const replay = await gate.check(h.input('echo', { token: permit.token }));
      t.equal(replay.action === 'block' && replay.verifyCode, 'PERMIT_ALREADY_USED');
      await records.close();
      t.same((await h.records()).map((record) => record.kind), ['permit.verified', 'execution.observed', 'permit.rejected'], 'in the order they happened');
    }),
  );
}

if (realServersMissing()) t.comment(`the Postgres + Redis variant did not run: ${realServersMissing()}`);

t.test('executionRecord builds a valid execution.observed record', async (t) => {
  const route = { name: 'echo', action_type: 'demo.echo' };
  const fields = executionRecord({ route, mode: 'enforce', requestId: 'req-1', permitId: 'p'.repeat(22), claims: null, upstreamStatus: 201, durationMs: 12.6, atMs: Date.parse('2026-11-21T12:00:00Z') });
  t.match(VerificationRecord.parse(fields), { kind: 'execution.observed', gate: 'proxy:echo', upstream_status: '201', duration_ms: '13', code: '', action_type: 'demo.echo', at: '2026-11-21T12:00:00.000Z' });
  const failed = executionRecord({ route, mode: 'shadow', requestId: 'r'.repeat(500), permitId: null, claims: null, upstream: 'not_reached', upstreamStatus: null, durationMs: -1, atMs: 0, code: 'UPSTREAM_REFUSED', reason: 'ECONNREFUSED' });
  t.match(VerificationRecord.parse(failed), { upstream: 'not_reached', upstream_status: '', code: 'UPSTREAM_REFUSED', reason: 'ECONNREFUSED', duration_ms: '0', permit_id: '' });
  t.equal(failed.request_id?.length, 200, 'a long request id is cut to the schema, not a failure');
});
