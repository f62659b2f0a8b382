/**
 * `GET /v1/gates/readiness`: the proxies' shadow-mode records, drained into the audit log, counted
 * per route and refusal code over the window; a route is ready only after `quiet_days` of shadow
 * traffic without an unexpected would-block. Enforce-mode records and records older than the
 * window are not counted. An MCP route's records name the tool called: each tool gets the same
 * verdict from its own calls alone, beside the route's totals, and at most MAX_READINESS_TOOLS
 * tools (the busiest) are listed.
 */
import t from 'tap';
import { drainVerificationRecords } from '../../authority/verifications/drain.js';
import { verificationStream } from '../../shared/permits/store-keys.js';
import { MAX_READINESS_TOOLS, ReadinessResponse } from '../../shared/wire/readiness.js';
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
  /** An MCP route's tools/call. */
  tool?: string;
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
  // helpdesk, an MCP route: get_ticket quiet for 5 days; issue_refund would have blocked a call
  // yesterday; a method the gate does not understand, refused 4 days ago, concerns no tool.
  { route: 'helpdesk', daysAgo: 5, kind: 'permit.verified', tool: 'get_ticket' },
  { route: 'helpdesk', daysAgo: 2, kind: 'permit.verified', tool: 'get_ticket' },
  { route: 'helpdesk', daysAgo: 0.5, kind: 'permit.verified', tool: 'get_ticket' },
  { route: 'helpdesk', daysAgo: 5, kind: 'permit.verified', tool: 'issue_refund' },
  { route: 'helpdesk', daysAgo: 1, kind: 'permit.rejected', code: 'BINDING_MISMATCH', tool: 'issue_refund' },
  { route: 'helpdesk', daysAgo: 4, kind: 'permit.rejected', code: 'MCP_METHOD_NOT_ALLOWED' },
  // crowded, an MCP route called with more tool names than are listed: one busy tool, and one call
  // each of as many made-up names as are listed.
  { route: 'crowded', daysAgo: 1, kind: 'permit.verified', tool: 'busy' },
  { route: 'crowded', daysAgo: 1, kind: 'permit.verified', tool: 'busy' },
  ...Array.from({ length: MAX_READINESS_TOOLS }, (_, i): Seen => ({ route: 'crowded', daysAgo: 1, kind: 'permit.rejected', code: 'TOOL_NOT_CONFIGURED', tool: `made_up_${i}` })),
];

/** Appends HISTORY and drains it; resolves with each entry's `at`, in HISTORY's order. */
async function record(authority: TestAuthority): Promise<string[]> {
  const { db, store } = authority.backend;
  const stream = verificationStream(authority.acme.id);
  const now = authority.clock.now();
  const ats: string[] = [];
  for (const [i, seen] of HISTORY.entries()) {
    const fields: VerificationRecord = {
      kind: seen.kind,
      gate: `proxy:${seen.route}`,
      mode: seen.mode ?? 'shadow',
      at: new Date(now - seen.daysAgo * DAY + i).toISOString(),
      request_id: `req-${i}`,
      permit_id: '',
      action_type: 'demo.echo',
      actor_id: 'demo-agent',
      code: seen.code ?? '',
      reason: seen.code ? 'as recorded' : '',
      upstream_status: '',
      duration_ms: '',
      ...(seen.tool !== undefined ? { tool: seen.tool } : {}),
    };
    ats.push(fields.at);
    await store.appendRecord(stream, verificationRecordFields(fields));
    // Stream ids follow the store's clock: each append its own millisecond.
    authority.clock.advance(1);
  }
  await drainVerificationRecords({ db, store, clock: authority.clock });
  return ats;
}

async function readiness(authority: TestAuthority, query = '') {
  const response = await authority.app.inject({ method: 'GET', url: `/v1/gates/readiness${query}`, headers: authority.bearer(authority.acmeAdmin) });
  return { status: response.statusCode, body: response.json() };
}

for (const backend of appBackends()) {
  t.test(`gate readiness on ${backend.name}`, (t) =>
    withTestAuthority(t, backend, async (authority) => {
      const ats = await record(authority);
      const atOf = (route: string, tool: string, which: 'first' | 'last') => {
        const times = HISTORY.flatMap((seen, i) => (seen.route === route && seen.tool === tool ? [ats[i] as string] : [])).sort();
        return which === 'first' ? times[0] : times[times.length - 1];
      };
      const { status, body } = await readiness(authority);
      t.equal(status, 200);
      const answer = ReadinessResponse.parse(body);
      t.match(answer, { window: { days: 7 }, quiet_days: 3, expected: [] });
      t.same(answer.routes.map((route) => route.route), ['crowded', 'deploys', 'fresh', 'helpdesk', 'silent', 'wires'], 'every route seen in shadow mode, and only those');

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
      t.match(byRoute.get('wires'), { tools: [], tools_left_off: 0 }, 'an HTTP route lists no tools');

      const helpdesk = byRoute.get('helpdesk');
      t.match(
        helpdesk,
        { verified: 4, would_block: 2, by_reason: [{ reason: 'BINDING_MISMATCH', count: 1 }, { reason: 'MCP_METHOD_NOT_ALLOWED', count: 1 }], ready: false, tools_left_off: 0 },
        "the MCP route's totals count every tool and the refusal that concerns none",
      );
      t.same(helpdesk?.tools.map((tool) => tool.tool), ['get_ticket', 'issue_refund'], 'each tool seen in shadow mode, by name');
      const [getTicket, issueRefund] = helpdesk?.tools ?? [];
      t.match(getTicket, { verified: 3, would_block: 0, by_reason: [], last_would_block_at: null, ready: true, summary: /ready for enforce/ }, 'get_ticket is ready');
      t.match(getTicket, { first_seen_at: atOf('helpdesk', 'get_ticket', 'first'), last_seen_at: atOf('helpdesk', 'get_ticket', 'last') }, 'with its own first and last call');
      t.match(
        issueRefund,
        { verified: 1, would_block: 1, by_reason: [{ reason: 'BINDING_MISMATCH', count: 1, expected: false }], ready: false, summary: /would have blocked calls in the last 3 days \(BINDING_MISMATCH\)/ },
        'issue_refund is not: an unexpected would-block yesterday',
      );
      t.match(issueRefund, { first_seen_at: atOf('helpdesk', 'issue_refund', 'first'), last_seen_at: atOf('helpdesk', 'issue_refund', 'last') }, 'so has issue_refund');

      const crowded = byRoute.get('crowded');
      t.equal(crowded?.tools.length, MAX_READINESS_TOOLS, 'at most MAX_READINESS_TOOLS tools are listed');
      t.equal(crowded?.tools_left_off, 1, 'and the others counted');
      t.ok(crowded?.tools.some((tool) => tool.tool === 'busy' && tool.ready === false && tool.verified === 2), 'the busiest tool is among them');
      t.match(crowded, { verified: 2, would_block: MAX_READINESS_TOOLS }, "the route's totals count every tool");

      const expecting = ReadinessResponse.parse((await readiness(authority, '?expected=MISSING_PERMIT')).body);
      t.match(expecting.routes.find((route) => route.route === 'wires'), { ready: true, last_unexpected_at: null, by_reason: [{ reason: 'MISSING_PERMIT', expected: true }] }, 'an expected refusal does not count against readiness');
      const refunds = ReadinessResponse.parse((await readiness(authority, '?expected=BINDING_MISMATCH')).body).routes.find((route) => route.route === 'helpdesk');
      t.match(refunds?.tools, [{ tool: 'get_ticket', ready: true }, { tool: 'issue_refund', ready: true, by_reason: [{ reason: 'BINDING_MISMATCH', expected: true }] }], 'nor against a tool’s');

      const narrow = ReadinessResponse.parse((await readiness(authority, '?window_days=2&quiet_days=1')).body);
      t.same(narrow.routes.map((route) => route.route), ['crowded', 'deploys', 'fresh', 'helpdesk', 'wires'], 'a shorter window sees fewer routes');
      t.match(
        narrow.routes.find((route) => route.route === 'helpdesk')?.tools,
        [{ tool: 'get_ticket', verified: 1, ready: false, summary: /less than 1 day/ }, { tool: 'issue_refund', would_block: 1, ready: false }],
        'and fewer calls of each tool',
      );
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
