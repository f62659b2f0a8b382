/**
 * Shadow → enforce readiness, per gate route: what a route in shadow mode would have blocked, by
 * reason, over a window of days, read from the `permit.verified` and `permit.rejected` events the
 * proxies' records become (authority/verifications/drain.ts). A route is ready when, for the last
 * `quiet_days`, it had shadow traffic throughout and no would-block the operator did not expect.
 * An MCP route's events name the tool called (`details.tool`), and its tool table sets the mode
 * per tool, so each tool seen in shadow gets the same verdict from its own calls alone, beside the
 * route's totals.
 *
 * @example
 *   const answer = await gateReadiness(db, org.id, { window_days: 7, quiet_days: 3, expected: ['PERMIT_EXPIRED'] }, Date.now());
 *   answer.routes[0]; // { route: 'wires', would_block: 4, ready: false, summary: 'An unexpected would-block …', tools: [] }
 *   answer.routes[1].tools[0]; // { tool: 'issue_refund', would_block: 2, ready: false, … }
 */
import { MAX_READINESS_TOOLS, type ReadinessQuery, type ReadinessResponse, type RouteReadiness, type ToolReadiness } from '../../shared/wire/readiness.js';
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

type ToolRow = Row & { tool: string; tools: number };

const SHADOW_EVENTS = `
  FROM audit_events
  WHERE org_id = $1 AND occurred_at >= $2 AND occurred_at <= $3
    AND type IN ('permit.verified', 'permit.rejected')
    AND payload->'details'->>'mode' = 'shadow'`;

/** One group per gate, kind and refusal code; shadow-mode events only (the records say which mode). */
const SHADOW_COUNTS = `
  SELECT payload->'details'->>'gate' AS gate,
         type,
         COALESCE(payload->'details'->>'verify_error_code', '') AS reason,
         count(*)::int AS count,
         min(occurred_at) AS first_at,
         max(occurred_at) AS last_at
  ${SHADOW_EVENTS}
  GROUP BY 1, 2, 3`;

/**
 * The same per tool, for the events that name one, and only for each gate's $4 busiest tools
 * (a caller names the tool, so a route may see any number of made-up names); `tools` is how many
 * tools the gate saw in all.
 */
const SHADOW_TOOL_COUNTS = `
  WITH shadow AS (
    SELECT payload->'details'->>'gate' AS gate,
           payload->'details'->>'tool' AS tool,
           type,
           COALESCE(payload->'details'->>'verify_error_code', '') AS reason,
           occurred_at
    ${SHADOW_EVENTS}
      AND payload->'details'->>'tool' IS NOT NULL
  ), ranked AS (
    SELECT gate, tool,
           count(*) OVER (PARTITION BY gate) AS tools,
           row_number() OVER (PARTITION BY gate ORDER BY count(*) DESC, tool) AS rank
    FROM shadow
    GROUP BY gate, tool
  )
  SELECT shadow.gate, shadow.tool, shadow.type, shadow.reason,
         count(*)::int AS count,
         min(shadow.occurred_at) AS first_at,
         max(shadow.occurred_at) AS last_at,
         ranked.tools::int AS tools
  FROM shadow JOIN ranked ON ranked.gate = shadow.gate AND ranked.tool = shadow.tool
  WHERE ranked.rank <= $4
  GROUP BY shadow.gate, shadow.tool, shadow.type, shadow.reason, ranked.tools`;

export async function gateReadiness(db: Queryable, orgId: string, query: ReadinessQuery, nowMs: number): Promise<ReadinessResponse> {
  const expected = [...new Set(query.expected ?? [])].sort();
  const from = new Date(nowMs - query.window_days * DAY_MS);
  const to = new Date(nowMs);
  const rows = await db.query<Row>(SHADOW_COUNTS, [orgId, from, to]);
  const toolRows = await db.query<ToolRow>(SHADOW_TOOL_COUNTS, [orgId, from, to, MAX_READINESS_TOOLS]);
  const judge = { expected: new Set(expected), quietDays: query.quiet_days, nowMs };
  const routes = [...groupBy(rows, (row) => row.gate).entries()]
    .map(([gate, groups]) => {
      const tools = [...groupBy(toolRows.filter((row) => row.gate === gate), (row) => row.tool).entries()]
        .map(([tool, toolGroups]): ToolReadiness => ({ tool, ...shadowVerdict(toolGroups, judge, 'calls') }))
        .sort((a, b) => a.tool.localeCompare(b.tool));
      const seen = toolRows.find((row) => row.gate === gate)?.tools ?? 0;
      const route: RouteReadiness = {
        gate,
        route: gate.startsWith('proxy:') ? gate.slice('proxy:'.length) : gate,
        tools,
        tools_left_off: seen - tools.length,
        ...shadowVerdict(groups, judge, 'requests'),
      };
      return route;
    })
    .sort((a, b) => a.route.localeCompare(b.route));
  return { window: { from: from.toISOString(), to: to.toISOString(), days: query.window_days }, quiet_days: query.quiet_days, expected, routes };
}

interface Judge {
  expected: ReadonlySet<string>;
  quietDays: number;
  nowMs: number;
}

/** The counts and the verdict of a route's, or a tool's, groups (the same rules for both). */
function shadowVerdict(groups: Row[], { expected, quietDays, nowMs }: Judge, what: 'requests' | 'calls'): Omit<ToolReadiness, 'tool'> {
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
    summary = `It would have blocked ${what} in the last ${days} (${reasons.join(', ')}): not ready.`;
  } else if (firstSeen.getTime() > quietSince) {
    summary = `Shadow traffic has been seen for less than ${days} (since ${firstSeen.toISOString()}): not ready yet.`;
  } else if (lastSeen.getTime() < quietSince) {
    summary = `No shadow traffic in the last ${days}: nothing shows how enforce would behave.`;
  } else {
    ready = true;
    summary = `No unexpected would-block in the last ${days}, with shadow traffic throughout: ready for enforce.`;
  }
  return {
    verified: groups.filter((group) => group.type === 'permit.verified').reduce((sum, group) => sum + group.count, 0),
    would_block: rejected.reduce((sum, group) => sum + group.count, 0),
    by_reason: rejected
      .map((group) => ({ reason: group.reason, count: group.count, expected: expected.has(group.reason), last_at: group.last_at.toISOString() }))
      .sort((a, b) => b.count - a.count || a.reason.localeCompare(b.reason)),
    last_would_block_at: latest(rejected)?.toISOString() ?? null,
    last_unexpected_at: lastUnexpected?.toISOString() ?? null,
    first_seen_at: firstSeen.toISOString(),
    last_seen_at: lastSeen.toISOString(),
    ready,
    summary,
  };
}

function groupBy<T>(rows: T[], key: (row: T) => string): Map<string, T[]> {
  const groups = new Map<string, T[]>();
  for (const row of rows) {
    const group = groups.get(key(row));
    if (group === undefined) groups.set(key(row), [row]);
    else group.push(row);
  }
  return groups;
}
