/**
 * `pass_through:` in proxy.yaml: the requests an operator declares non-consequential (health checks,
 * reads, static files, CORS preflights), forwarded untouched without a permit while `unmatched` is
 * `deny`. Everything else the gate cannot place is still refused, so adding a consequential
 * endpoint to the upstream never opens it by default. A pass-through entry never overrides a route
 * or a protected `**` subtree: those are checked first.
 *
 * @example
 *   pass_through:
 *     - { path: /healthz }                       # any method
 *     - { methods: [GET], path: /orders/:id }    # GET (and HEAD) only
 *     - { methods: [GET, OPTIONS], path: /static/* }
 */
import { z } from 'zod';
import { matchRoute, parsePathPattern, compileRouteTable, type PathPattern, type RouteTable } from './routes.js';

/** Methods a pass-through entry may name; HEAD follows GET, as for routes. */
const PASS_METHODS = ['GET', 'HEAD', 'OPTIONS', 'POST', 'PUT', 'PATCH', 'DELETE'] as const;

export interface PassThroughEntry {
  readonly methods: readonly string[];
  readonly pattern: PathPattern;
}

export const PassThroughSchema = z
  .array(
    z
      .object({
        methods: z.array(z.enum(PASS_METHODS)).min(1).optional(),
        path: z.string().min(1),
      })
      .strict(),
    { message: 'a list of {methods?, path}' },
  )
  .default([])
  .transform((entries, ctx) =>
    entries.flatMap((entry, index): PassThroughEntry[] => {
      const pattern = parsePathPattern(entry.path);
      if ('error' in pattern) {
        ctx.addIssue({ code: 'custom', path: [index, 'path'], message: pattern.error });
        return [];
      }
      if (pattern.subtree) {
        ctx.addIssue({ code: 'custom', path: [index, 'path'], message: '** protects a subtree; a pass-through path takes a trailing * instead' });
        return [];
      }
      return [{ methods: entry.methods ?? PASS_METHODS, pattern }];
    }),
  );

/** The entries as a route table (matchRoute gives HEAD to GET entries). */
export function compilePassThrough(entries: readonly PassThroughEntry[]): RouteTable<PassThroughEntry> {
  return compileRouteTable(entries);
}

/** Whether `method` `target` is declared pass-through. */
export function passesThrough(table: RouteTable<PassThroughEntry>, method: string, target: string): boolean {
  return matchRoute(table, method, target) !== null;
}
