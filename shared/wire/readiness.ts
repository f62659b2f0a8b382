/**
 * `GET /v1/gates/readiness` (audit:read): for each gate route seen in shadow mode, what it would
 * have blocked over a window, by reason, and whether it is ready for enforce: no unexpected
 * would-block for `quiet_days`, with shadow traffic in that time (a route nobody called is not
 * shown ready). Read from the `permit.verified` and `permit.rejected` events the proxies'
 * records become in the audit log.
 *
 * @example
 *   GET /v1/gates/readiness?window_days=7&quiet_days=3&expected=PERMIT_EXPIRED
 *   → { "routes": [{ "gate": "proxy:wires", "route": "wires", "ready": false, "would_block": 4,
 *        "by_reason": [{ "reason": "MISSING_PERMIT", "count": 4, "expected": false, "last_at": "…" }], … }], … }
 */
import { z } from 'zod';
import { queryList } from './query-list.js';

export const MAX_READINESS_DAYS = 90;

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

export const RouteReadiness = z.object({
  /** As the records name it: `proxy:<route name>`. */
  gate: z.string(),
  /** The route's name in the proxy's configuration. */
  route: z.string(),
  /** Shadow requests that carried a valid permit, in the window. */
  verified: z.number().int(),
  /** Shadow requests the gate would have blocked, in the window. */
  would_block: z.number().int(),
  by_reason: z.array(ReasonCount),
  last_would_block_at: z.string().nullable(),
  last_unexpected_at: z.string().nullable(),
  /** The latest shadow request of any kind on the route. */
  last_seen_at: z.string(),
  ready: z.boolean(),
  /** Why it is, or is not, ready, in words. */
  summary: z.string(),
});
export type RouteReadiness = z.infer<typeof RouteReadiness>;

export const ReadinessResponse = z.object({
  window: z.object({ from: z.string(), to: z.string(), days: z.number().int() }),
  quiet_days: z.number().int(),
  expected: z.array(z.string()),
  routes: z.array(RouteReadiness),
});
export type ReadinessResponse = z.infer<typeof ReadinessResponse>;
