/**
 * Where a request stands before any permit is looked at: refused outright, passed without a
 * permit, or handed to the gate on a route. Every front door places requests here (the forwarding
 * server, server.ts, and the Envoy external authorizer, ext-authz/check.ts), so one configuration
 * answers the same request the same way whichever door it came through.
 *
 * In order:
 * 1. paths.ts refuses a target or method override the gate and the upstream could read
 *    differently (400 `invalid_request`, outcome `refused_ambiguous`).
 * 2. A matched route goes to the gate, except a connection upgrade, which is refused on a gated
 *    route (403 `forbidden`, `UPGRADE_ON_GATED_ROUTE`): the gate verifies HTTP requests, and an
 *    upgraded connection would carry any number of unverified actions.
 * 3. Unmatched: under a protected `**` subtree → 403 `PROTECTED_PREFIX`; `unmatched: deny` and not
 *    declared pass-through → 403 `UNMATCHED_ROUTE` (not `permit_required`: no permit can ever open
 *    a path that is not a configured route); otherwise it passes without a permit.
 *
 * @example
 *   const state = gateState(config);
 *   const placed = placeRequest(state, 'POST', '/echo/1?x=2', req.headers);
 *   if (placed.kind === 'refuse') return sendError(res, requestId, placed.error);
 *   if (placed.kind === 'gate') await gate.check({ route: placed.route, params: placed.params, … });
 */
import type { IncomingHttpHeaders } from 'node:http';
import { CountersignError } from '../shared/errors.js';
import type { ProxyConfig, ProxyRoute } from './config.js';
import { protectedPrefixError, unmatchedError } from './http-messages.js';
import { UNMATCHED_ROUTE, type RequestOutcome } from './metrics.js';
import { checkedTarget } from './paths.js';
import { compilePassThrough, passesThrough, type PassThroughEntry } from './pass-through.js';
import { compileRouteTable, matchRoute, protectedPrefix, type RouteParams, type RouteTable } from './routes.js';

/** What placing needs of a configuration, compiled once per (re)load. */
export interface GateState {
  config: ProxyConfig;
  table: RouteTable<ProxyRoute>;
  /** config.pass_through, compiled once. */
  passThrough: RouteTable<PassThroughEntry>;
}

export function gateState(config: ProxyConfig): GateState {
  return { config, table: compileRouteTable(config.routes), passThrough: compilePassThrough(config.pass_through) };
}

export type Placement =
  /** Answer `error` and count `outcome` under `route` (a route name, or `unmatched`). */
  | { kind: 'refuse'; route: string; outcome: Extract<RequestOutcome, 'refused_ambiguous' | 'denied_unmatched' | 'blocked'>; error: CountersignError }
  /** No permit needed: `unmatched: pass` or a `pass_through` entry. `target` is what was checked. */
  | { kind: 'pass'; target: string }
  /** A configured route: the gate decides. */
  | { kind: 'gate'; target: string; route: ProxyRoute; params: RouteParams };

/**
 * Places `method` `url` (the request target as received: origin-form or absolute-form).
 * `upgrade`: the request asks to switch protocols (an `Upgrade` header); it never reaches the gate.
 */
export function placeRequest(state: GateState, method: string, url: string | undefined, headers: IncomingHttpHeaders, options: { upgrade: true }): Exclude<Placement, { kind: 'gate' }>;
export function placeRequest(state: GateState, method: string, url: string | undefined, headers: IncomingHttpHeaders, options?: { upgrade?: boolean }): Placement;
export function placeRequest(state: GateState, method: string, url: string | undefined, headers: IncomingHttpHeaders, options: { upgrade?: boolean } = {}): Placement {
  // The same string is matched and forwarded: see paths.ts for what is refused and why.
  const checked = checkedTarget(url, headers);
  if ('error' in checked) return { kind: 'refuse', route: UNMATCHED_ROUTE, outcome: 'refused_ambiguous', error: checked.error };
  const { target } = checked;
  const match = matchRoute(state.table, method, target);
  if (match !== null) {
    if (options.upgrade === true) {
      const error = new CountersignError('forbidden', 'Connection upgrades are not allowed on a gated route.', { reason: 'UPGRADE_ON_GATED_ROUTE' });
      return { kind: 'refuse', route: match.route.name, outcome: 'blocked', error };
    }
    return { kind: 'gate', target, route: match.route, params: match.params };
  }
  const prefix = protectedPrefix(state.table, target);
  if (prefix !== null) return { kind: 'refuse', route: UNMATCHED_ROUTE, outcome: 'denied_unmatched', error: protectedPrefixError(prefix.source) };
  if (state.config.unmatched === 'deny' && !passesThrough(state.passThrough, method, target)) {
    return { kind: 'refuse', route: UNMATCHED_ROUTE, outcome: 'denied_unmatched', error: unmatchedError() };
  }
  return { kind: 'pass', target };
}
