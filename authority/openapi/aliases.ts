/**
 * Path aliases. An operation has one canonical slash path (`/v1/verify-permit`); the SDK's
 * function-style spellings (`/v1-verify-permit`, `/functions/v1/v1-verify-permit`) are aliases of
 * it, served by the same handler. The OpenAPI document describes the canonical path and lists the
 * aliases in `x-aliases`, so a client generator makes one method per operation.
 *
 * @example
 *   canonicalPath('/functions/v1/v1-evaluate'); // '/v1/evaluate'
 *   canonicalPath('/v1-audit/events');          // '/v1/audit/events'
 */

/** The slash spelling of a path; a path already in slash form is its own. */
export function canonicalPath(url: string): string {
  const functionStyle = /^\/functions\/v1\/v1-(.+)$/.exec(url);
  if (functionStyle) return `/v1/${functionStyle[1]}`;
  const dashed = /^\/v1-(.+)$/.exec(url);
  if (dashed) return `/v1/${dashed[1]}`;
  return url;
}

export interface RouteId {
  method: string;
  url: string;
}

/**
 * The aliases among `routes`: a route whose canonical path differs from its own and is itself
 * registered with the same method. Map from `METHOD alias` to the canonical path.
 */
export function aliasesOf(routes: readonly RouteId[]): Map<string, string> {
  const registered = new Set(routes.map((route) => `${route.method} ${route.url}`));
  const aliases = new Map<string, string>();
  for (const { method, url } of routes) {
    const canonical = canonicalPath(url);
    if (canonical !== url && registered.has(`${method} ${canonical}`)) aliases.set(`${method} ${url}`, canonical);
  }
  return aliases;
}

/** For each canonical `METHOD path`, its aliases, in registration order. */
export function aliasListsOf(routes: readonly RouteId[]): Map<string, string[]> {
  const lists = new Map<string, string[]>();
  for (const [key, canonical] of aliasesOf(routes)) {
    const [method, url] = key.split(' ') as [string, string];
    const canonicalKey = `${method} ${canonical}`;
    lists.set(canonicalKey, [...(lists.get(canonicalKey) ?? []), url]);
  }
  return lists;
}
