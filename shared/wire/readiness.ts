/**
 * `GET /v1/gates/readiness` (audit:read): for each gate route seen in shadow mode, what it would
 * have blocked over a window, by reason, and whether it is ready for enforce: no unexpected
 * would-block for `quiet_days`, with shadow traffic in that time (a route nobody called is not
 * shown ready). An MCP route lists the same per tool, since its tool table sets the mode per tool.
 * Read from the `permit.verified` and `permit.rejected` events the proxies' records become in the
 * audit log.
 *
 * @example
 *   GET /v1/gates/readiness?window_days=7&quiet_days=3&expected=PERMIT_EXPIRED
 *   → { "routes": [{ "gate": "proxy:wires", "route": "wires", "ready": false, "would_block": 4,
 *        "by_reason": [{ "reason": "MISSING_PERMIT", "count": 4, "expected": false, "last_at": "…" }],
 *        "tools": [], … }], … }
 */
import { z } from 'zod';
import { queryList } from './query-list.js';

export const MAX_READINESS_DAYS = 90;
/** Tools listed per MCP route at most: tool names come from the calls, so a caller could make up any number. */
export const MAX_READINESS_TOOLS = 100;

/** `expected=A,B` or `expected=A&expected=B`: refusal codes the operator expects and does not count against readiness. */
const CodeList = queryList(z.string().regex(/^[A-Z][A-Z0-9_]{0,63}$/, { message: 'a refusal code such as MISSING_PERMIT' }), 50);

export const ReadinessQuery = z
  .object({
    /** How far back the counts go, in days. */
    window_days: z.coerce.number().int().min(1).max(MAX_READINESS_DAYS).default(7),
    /** A route is ready after this many days without an unexpected would-block. */
    quiet_days: z.coerce.number().int().min(1).max(MAX_READINESS_DAYS).default(3),
    expected: CodeList.optional(),
  })
  .strict();
export type ReadinessQuery = z.infer<typeof ReadinessQuery>;

export const ReasonCount = z.object({
  /** The refusal code (MISSING_PERMIT, BINDING_MISMATCH, …). */
  reason: z.string(),
  count: z.number().int(),
  /** Listed in `expected`: counted, but not against readiness. */
  expected: z.boolean(),
  last_at: z.string(),
});

/** What a route, or one MCP tool of it, verified and would have blocked, and whether it is ready. */
const shadowVerdict = {
  /** Shadow requests that carried a valid permit, in the window. */
  verified: z.number().int(),
  /** Shadow requests the gate would have blocked, in the window. */
  would_block: z.number().int(),
  by_reason: z.array(ReasonCount),
  last_would_block_at: z.string().nullable(),
  last_unexpected_at: z.string().nullable(),
  /** The first shadow request of any kind in the window. */
  first_seen_at: z.string(),
  /** The latest shadow request of any kind. */
  last_seen_at: z.string(),
  ready: z.boolean(),
  /** Why it is, or is not, ready, in words. */
  summary: z.string(),
};

/** One tool of an MCP route, judged by its own calls alone (its `mode` is set in the route's tool table). */
export const ToolReadiness = z.object({
  /** The tool's name, as the calls named it. */
  tool: z.string(),
  ...shadowVerdict,
});
export type ToolReadiness = z.infer<typeof ToolReadiness>;

export const RouteReadiness = z.object({
  /** As the records name it: `proxy:<route name>`. */
  gate: z.string(),
  /** The route's name in the proxy's configuration. */
  route: z.string(),
  /** Totals of the whole route: on an MCP route, every tool's calls and the refusals that concern no single tool. */
  ...shadowVerdict,
  /**
   * An MCP route: each tool called in shadow mode in the window, by name; empty for HTTP routes.
   * At most 100, those with the most shadow calls.
   */
  tools: z.array(ToolReadiness),
  /** Tools of the route seen in the window but not listed (beyond the 100). */
  tools_left_off: z.number().int(),
});
export type RouteReadiness = z.infer<typeof RouteReadiness>;

export const ReadinessResponse = z.object({
  window: z.object({ from: z.string(), to: z.string(), days: z.number().int() }),
  quiet_days: z.number().int(),
  expected: z.array(z.string()),
  routes: z.array(RouteReadiness),
});
export type ReadinessResponse = z.infer<typeof ReadinessResponse>;
