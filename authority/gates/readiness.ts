/**
 * Shadow → enforce readiness, per gate route: what a route in shadow mode would have blocked, by
 * reason, over a window of days, read from the `permit.verified` and `permit.rejected` events the
 * proxies' records become (authority/verifications/drain.ts). A route is ready when, for the last
 * `quiet_days`, it had shadow traffic throughout and no would-block the operator did not expect.
 *
 * @example
 *   const answer = await gateReadiness(db, org.id, { window_days: 7, quiet_days: 3, expected: ['PERMIT_EXPIRED'] }, Date.now());
 *   answer.routes[0]; // { route: 'wires', would_block: 4, ready: false, summary: 'An unexpected would-block …' }
 */
import type { ReadinessQuery, ReadinessResponse, RouteReadiness } from '../../shared/wire/readiness.js';
import type { Queryable } from '../store/db.js';

const DAY_MS = 86_400_000;

interface Row {
  gate: string;
  type: 'permit.verified' | 'permit.rejected';
  reason: string;
  count: number;
  first_at: Date;
  last_at: Date;
}

/** One group per gate, kind and refusal code; shadow-mode events only (the records say which mode). */
const SHADOW_COUNTS = `
  SELECT payload->'details'->>'gate' AS gate,
         type,
         COALESCE(payload->'details'->>'verify_error_code', '') AS reason,
         count(*)::int AS count,
         min(occurred_at) AS first_at,
         max(occurred_at) AS last_at
  FROM audit_events
  WHERE org_id = $1 AND occurred_at >= $2 AND occurred_at <= $3
    AND type IN ('permit.verified', 'permit.rejected')
    AND payload->'details'->>'mode' = 'shadow'
  GROUP BY 1, 2, 3`;

export async function gateReadiness(db: Queryable, orgId: string, query: ReadinessQuery, nowMs: number): Promise<ReadinessResponse> {
  const expected = [...new Set(query.expected ?? [])].sort();
  const from = new Date(nowMs - query.window_days * DAY_MS);
  const to = new Date(nowMs);
  const rows = await db.query<Row>(SHADOW_COUNTS, [orgId, from, to]);
  const byGate = new Map<string, Row[]>();
  for (const row of rows) byGate.set(row.gate, [...(byGate.get(row.gate) ?? []), row]);
  const routes = [...byGate.entries()]
    .map(([gate, groups]) => routeReadiness(gate, groups, new Set(expected), query.quiet_days, nowMs))
    .sort((a, b) => a.route.localeCompare(b.route));
  return { window: { from: from.toISOString(), to: to.toISOString(), days: query.window_days }, quiet_days: query.quiet_days, expected, routes };
}

function routeReadiness(gate: string, groups: Row[], expected: ReadonlySet<string>, quietDays: number, nowMs: number): RouteReadiness {
  const rejected = groups.filter((group) => group.type === 'permit.rejected');
  const unexpected = rejected.filter((group) => !expected.has(group.reason));
  const latest = (list: Row[]) => (list.length === 0 ? null : new Date(Math.max(...list.map((group) => group.last_at.getTime()))));
  const firstSeen = new Date(Math.min(...groups.map((group) => group.first_at.getTime())));
  const lastSeen = latest(groups) as Date;
  const lastUnexpected = latest(unexpected);
  const quietSince = nowMs - quietDays * DAY_MS;
  const days = `${quietDays} day${quietDays === 1 ? '' : 's'}`;

  let ready = false;
  let summary: string;
  if (lastUnexpected !== null && lastUnexpected.getTime() >= quietSince) {
    const reasons = unexpected.filter((group) => group.last_at.getTime() >= quietSince).map((group) => group.reason);
    summary = `It would have blocked requests in the last ${days} (${reasons.join(', ')}): not ready.`;
  } else if (firstSeen.getTime() > quietSince) {
    summary = `Shadow traffic has been seen for less than ${days} (since ${firstSeen.toISOString()}): not ready yet.`;
  } else if (lastSeen.getTime() < quietSince) {
    summary = `No shadow traffic in the last ${days}: nothing shows how enforce would behave.`;
  } else {
    ready = true;
    summary = `No unexpected would-block in the last ${days}, with shadow traffic throughout: ready for enforce.`;
  }
  return {
    gate,
    route: gate.startsWith('proxy:') ? gate.slice('proxy:'.length) : gate,
    verified: groups.filter((group) => group.type === 'permit.verified').reduce((sum, group) => sum + group.count, 0),
    would_block: rejected.reduce((sum, group) => sum + group.count, 0),
    by_reason: rejected
      .map((group) => ({ reason: group.reason, count: group.count, expected: expected.has(group.reason), last_at: group.last_at.toISOString() }))
      .sort((a, b) => b.count - a.count || a.reason.localeCompare(b.reason)),
    last_would_block_at: latest(rejected)?.toISOString() ?? null,
    last_unexpected_at: lastUnexpected?.toISOString() ?? null,
    last_seen_at: lastSeen.toISOString(),
    ready,
    summary,
  };
}
