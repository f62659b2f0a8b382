/**
 * `GET /v1/gates/readiness`: the proxies' shadow-mode records, drained into the audit log, counted
 * per route and refusal code over the window; a route is ready only after `quiet_days` of shadow
 * traffic without an unexpected would-block. Enforce-mode records and records older than the
 * window are not counted.
 */
import t from 'tap';
import { drainVerificationRecords } from '../../authority/verifications/drain.js';
import { verificationStream } from '../../shared/permits/store-keys.js';
import { ReadinessResponse } from '../../shared/wire/readiness.js';
import { verificationRecordFields, type VerificationRecord } from '../../shared/wire/verification-records.js';
import { type TestAuthority, withTestAuthority } from '../helpers/authority.js';
import { appBackends } from '../helpers/backends.js';

const DAY = 86_400_000;

interface Seen {
  route: string;
  daysAgo: number;
  kind: 'permit.verified' | 'permit.rejected';
  code?: string;
  mode?: 'shadow' | 'enforce';
}

/** What the proxies recorded, by route and age. */
const HISTORY: Seen[] = [
  // wires: traffic for 6 days, a MISSING_PERMIT yesterday, a PERMIT_EXPIRED before the window.
  { route: 'wires', daysAgo: 10, kind: 'permit.rejected', code: 'PERMIT_EXPIRED' },
  { route: 'wires', daysAgo: 6, kind: 'permit.verified' },
  { route: 'wires', daysAgo: 1, kind: 'permit.verified' },
  { route: 'wires', daysAgo: 1, kind: 'permit.rejected', code: 'MISSING_PERMIT' },
  { route: 'wires', daysAgo: 1.5, kind: 'permit.rejected', code: 'MISSING_PERMIT' },
  // deploys: its only would-block was 4 days ago.
  { route: 'deploys', daysAgo: 5, kind: 'permit.verified' },
  { route: 'deploys', daysAgo: 4, kind: 'permit.rejected', code: 'BINDING_MISMATCH' },
  { route: 'deploys', daysAgo: 0.5, kind: 'permit.verified' },
  // fresh: only seen since yesterday. silent: nothing for 6 days.
  { route: 'fresh', daysAgo: 1, kind: 'permit.verified' },
  { route: 'silent', daysAgo: 6, kind: 'permit.verified' },
  // enforced: not in shadow mode, so not about readiness.
  { route: 'enforced', daysAgo: 1, kind: 'permit.rejected', code: 'MISSING_PERMIT', mode: 'enforce' },
];

async function record(authority: TestAuthority): Promise<void> {
  const { db, store } = authority.backend;
  const stream = verificationStream(authority.acme.id);
  const now = authority.clock.now();
  for (const [i, seen] of HISTORY.entries()) {
    const fields: VerificationRecord = {
      kind: seen.kind,
      gate: `proxy:${seen.route}`,
      mode: seen.mode ?? 'shadow',
      at: new Date(now - seen.daysAgo * DAY).toISOString(),
      request_id: `req-${i}`,
      permit_id: '',
      action_type: 'demo.echo',
      actor_id: 'demo-agent',
      code: seen.code ?? '',
      reason: seen.code ? 'as recorded' : '',
      upstream_status: '',
      duration_ms: '',
    };
    await store.appendRecord(stream, verificationRecordFields(fields));
    // Stream ids follow the store's clock: each append its own millisecond.
    authority.clock.advance(1);
  }
  await drainVerificationRecords({ db, store, clock: authority.clock });
}

async function readiness(authority: TestAuthority, query = '') {
  const response = await authority.app.inject({ method: 'GET', url: `/v1/gates/readiness${query}`, headers: authority.bearer(authority.acmeAdmin) });
  return { status: response.statusCode, body: response.json() };
}

for (const backend of appBackends()) {
  t.test(`gate readiness on ${backend.name}`, (t) =>
    withTestAuthority(t, backend, async (authority) => {
      await record(authority);
      const { status, body } = await readiness(authority);
      t.equal(status, 200);
      const answer = ReadinessResponse.parse(body);
      t.match(answer, { window: { days: 7 }, quiet_days: 3, expected: [] });
      t.same(answer.routes.map((route) => route.route), ['deploys', 'fresh', 'silent', 'wires'], 'every route seen in shadow mode, and only those');

      const byRoute = new Map(answer.routes.map((route) => [route.route, route]));
      t.match(byRoute.get('wires'), {
        gate: 'proxy:wires',
        verified: 2,
        would_block: 2,
        by_reason: [{ reason: 'MISSING_PERMIT', count: 2, expected: false }],
        ready: false,
        summary: /MISSING_PERMIT/,
      }, 'wires would have blocked twice yesterday (the older refusal is outside the window)');
      t.match(byRoute.get('deploys'), { verified: 2, would_block: 1, by_reason: [{ reason: 'BINDING_MISMATCH', count: 1 }], ready: true }, 'deploys has been quiet for 3 days');
      t.match(byRoute.get('fresh'), { ready: false, summary: /less than 3 days/ }, 'a route seen only since yesterday is not ready yet');
      t.match(byRoute.get('silent'), { ready: false, summary: /No shadow traffic/ }, 'nor is one nobody called lately');

      const expecting = ReadinessResponse.parse((await readiness(authority, '?expected=MISSING_PERMIT')).body);
      t.match(expecting.routes.find((route) => route.route === 'wires'), { ready: true, last_unexpected_at: null, by_reason: [{ reason: 'MISSING_PERMIT', expected: true }] }, 'an expected refusal does not count against readiness');

      const narrow = ReadinessResponse.parse((await readiness(authority, '?window_days=2&quiet_days=1')).body);
      t.same(narrow.routes.map((route) => route.route), ['deploys', 'fresh', 'wires'], 'a shorter window sees fewer routes');
      t.match(narrow.routes.find((route) => route.route === 'deploys'), { would_block: 0, ready: false, summary: /less than 1 day/ }, 'readiness knows only what the window shows');

      const bad = await readiness(authority, '?window_days=2&quiet_days=5');
      t.equal(bad.status, 400, 'quiet days beyond the window are refused');
      t.match(bad.body, { error: 'invalid_request', details: [{ path: 'query.quiet_days' }] });
      t.equal((await readiness(authority, '?expected=not-a-code')).status, 400, 'so is an expected code that is not one');

      const viewer = await authority.key(['evaluate:write']);
      const forbidden = await authority.app.inject({ method: 'GET', url: '/v1/gates/readiness', headers: authority.bearer(viewer) });
      t.equal(forbidden.statusCode, 403, 'it needs audit:read');
    }),
  );
}
