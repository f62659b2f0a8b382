/**
 * Route matching for the gate: which configured route (if any) a request is, and its path
 * parameters. Patterns are parsed once, at config load (`parsePathPattern`); a request costs one
 * split of its path, no regular expression, and the params object.
 *
 * Rules (first match in config order wins):
 * - the query string and fragment are ignored;
 * - empty segments are ignored, so a trailing slash (or `//`) changes nothing;
 * - each segment is percent-decoded before it is compared; `.` and `..` segments are resolved
 *   (also when encoded, `%2e%2e`), as an upstream would resolve them;
 * - literal segments compare ASCII case-insensitively;
 * - `:name` matches one non-empty segment, its decoded value becomes `params.name`;
 * - a trailing `*` matches zero or more segments, joined with `/` into `params['*']`;
 * - a trailing `**` protects the subtree: the route matches the pattern without it, and any other
 *   request (any method) whose path starts with those segments and matches no route is refused by
 *   the server (`protectedPrefix`), whatever `unmatched` says;
 * - `HEAD` matches `GET` routes.
 * Every one of these errs on the side of matching: upstream frameworks commonly decode, resolve
 * dot segments, ignore case and trailing slashes, and run GET handlers for HEAD (Express does all
 * of it by default). A request the gate fails to recognize but the upstream routes to a
 * consequential handler would pass without a permit; one the gate recognizes too eagerly only
 * asks for a permit. The server refuses the ambiguous forms (`//`, dot segments, encoded
 * separators, `;`, `\`) before matching (paths.ts); resolving them here stays as a second line.
 *
 * @example
 *   const table = compileRouteTable(config.routes);
 *   matchRoute(table, 'POST', '/payments/acme%20ltd/wire/?x=1');
 *   // { route: <payments route>, params: { account: 'acme ltd' } }
 */

export type PatternSegment = { readonly kind: 'literal'; readonly value: string } | { readonly kind: 'param'; readonly name: string };

export interface PathPattern {
  /** The pattern as written in the configuration. */
  readonly source: string;
  readonly segments: readonly PatternSegment[];
  /** A trailing `*`: the rest of the path, as `params['*']`. */
  readonly wildcard: boolean;
  /** A trailing `**`: the subtree under `segments` is protected (see the module comment). */
  readonly subtree?: boolean;
  /** Parameter names in order (`*` included when there is a wildcard). */
  readonly params: readonly string[];
}

export type RouteParams = Record<string, string>;

export interface RouteMatch<R extends MatchableRoute = MatchableRoute> {
  route: R;
  params: RouteParams;
}

/** The minimum a route needs to be matched; a configured route (config.ts) has it. */
export interface MatchableRoute {
  readonly methods: readonly string[];
  readonly pattern: PathPattern;
}

export interface RouteTable<R extends MatchableRoute> {
  /** Routes by method, each list in configuration order. */
  readonly byMethod: ReadonlyMap<string, readonly R[]>;
  /** The patterns whose subtree is protected (`/x/:id/**`), any method. */
  readonly protectedPrefixes: readonly PathPattern[];
}

const PARAM_NAME = /^[A-Za-z_][A-Za-z0-9_]*$/;

/**
 * Parses a pattern such as `/payments/:account/wire` or `/files/*`. Returns a message (not an
 * exception) so the config loader can report it under the field's path.
 */
export function parsePathPattern(pattern: string): PathPattern | { error: string } {
  if (typeof pattern !== 'string' || !pattern.startsWith('/')) return { error: 'a path pattern starts with /' };
  if (/[?#]/.test(pattern)) return { error: 'a path pattern has no query string or fragment (query facts are read from the request)' };
  if (pattern.includes('%')) return { error: 'write the pattern decoded (no %-escapes): requests are decoded before matching' };
  const raw = pattern.split('/').filter((segment) => segment.length > 0);
  const segments: PatternSegment[] = [];
  const params: string[] = [];
  let wildcard = false;
  let subtree = false;
  for (let i = 0; i < raw.length; i++) {
    const segment = raw[i]!;
    if (segment === '**') {
      if (i !== raw.length - 1) return { error: '** is only allowed as the last segment' };
      if (wildcard) return { error: 'a pattern ends with * or with **, not both' };
      subtree = true;
    } else if (segment === '*') {
      if (i !== raw.length - 1) return { error: '* is only allowed as the last segment' };
      wildcard = true;
      params.push('*');
    } else if (segment.startsWith(':')) {
      const name = segment.slice(1);
      if (!PARAM_NAME.test(name)) return { error: `parameter ${JSON.stringify(segment)}: a name is letters, digits and _ (not starting with a digit)` };
      if (params.includes(name)) return { error: `parameter :${name} appears twice` };
      segments.push({ kind: 'param', name });
      params.push(name);
    } else if (segment.includes('*') || segment.includes(':')) {
      return { error: `segment ${JSON.stringify(segment)}: * and : only begin a whole segment` };
    } else if (segment === '.' || segment === '..') {
      return { error: 'a path pattern has no . or .. segments' };
    } else {
      // ASCII only, to agree with equalsIgnoreAsciiCase.
      segments.push({ kind: 'literal', value: segment.replace(/[A-Z]/g, (c) => c.toLowerCase()) });
    }
  }
  return subtree ? { source: pattern, segments, wildcard, params, subtree } : { source: pattern, segments, wildcard, params };
}

/** Indexes routes by method once; HEAD shares GET's list (see the module comment). */
export function compileRouteTable<R extends MatchableRoute>(routes: readonly R[]): RouteTable<R> {
  const byMethod = new Map<string, R[]>();
  for (const route of routes) {
    for (const method of route.methods) {
      let list = byMethod.get(method);
      if (list === undefined) byMethod.set(method, (list = []));
      list.push(route);
    }
  }
  const get = byMethod.get('GET');
  if (get !== undefined) byMethod.set('HEAD', get);
  const protectedPrefixes = routes.map((route) => route.pattern).filter((pattern) => pattern.subtree === true);
  return { byMethod, protectedPrefixes };
}

/**
 * The first route matching `method` and `path` (a request target such as `req.url`), or null.
 * Never throws: a malformed escape leaves its segment undecoded.
 */
export function matchRoute<R extends MatchableRoute>(table: RouteTable<R>, method: string, path: string): RouteMatch<R> | null {
  const candidates = table.byMethod.get(method);
  if (candidates === undefined || typeof path !== 'string') return null;
  const segments = splitPath(path);
  for (const route of candidates) {
    const params = matchPattern(route.pattern, segments);
    if (params !== null) return { route, params };
  }
  return null;
}

/**
 * The `**` pattern whose subtree holds `path` (the path itself included), or null. Called only for a
 * request no route matched. A trailing slash counts as one more, empty, segment here, so `/echo/`
 * is under `/echo/:id/**`: prefix routers and find-my-way hand `/echo/` to an `/echo/:id` handler.
 */
export function protectedPrefix<R extends MatchableRoute>(table: RouteTable<R>, path: string): PathPattern | null {
  if (table.protectedPrefixes.length === 0 || typeof path !== 'string') return null;
  const segments = splitPath(path);
  const end = path.search(/[?#]/);
  if ((end < 0 ? path : path.slice(0, end)).endsWith('/')) segments.push('');
  for (const pattern of table.protectedPrefixes) {
    if (segments.length < pattern.segments.length) continue;
    const under = pattern.segments.every((want, i) => want.kind === 'param' || equalsIgnoreAsciiCase(segments[i]!, want.value));
    if (under) return pattern;
  }
  return null;
}

function matchPattern(pattern: PathPattern, segments: readonly string[]): RouteParams | null {
  const expected = pattern.segments;
  if (pattern.wildcard ? segments.length < expected.length : segments.length !== expected.length) return null;
  // Literals first: a mismatch costs nothing, and the params object is only made for a match.
  for (let i = 0; i < expected.length; i++) {
    const want = expected[i]!;
    if (want.kind === 'literal' && !equalsIgnoreAsciiCase(segments[i]!, want.value)) return null;
  }
  // Null prototype: a parameter may be called `__proto__` or `constructor`.
  const params = Object.create(null) as RouteParams;
  for (let i = 0; i < expected.length; i++) {
    const want = expected[i]!;
    if (want.kind === 'param') params[want.name] = segments[i]!;
  }
  if (pattern.wildcard) params['*'] = segments.slice(expected.length).join('/');
  return params;
}

/** The decoded, dot-resolved, non-empty segments of a request target's path. */
export function splitPath(target: string): string[] {
  let start = 0;
  // absolute-form (`GET http://host/path`), which node:http passes through as req.url.
  if (target.charCodeAt(0) !== 47 /* / */) {
    const scheme = target.indexOf('://');
    if (scheme > 0) {
      const slash = target.indexOf('/', scheme + 3);
      start = slash < 0 ? target.length : slash;
    }
  }
  let end = target.length;
  for (let i = start; i < end; i++) {
    const c = target.charCodeAt(i);
    if (c === 63 /* ? */ || c === 35 /* # */) end = i;
  }
  const segments: string[] = [];
  let from = start;
  for (let i = start; i <= end; i++) {
    if (i !== end && target.charCodeAt(i) !== 47) continue;
    if (i > from) {
      let segment = target.slice(from, i);
      if (segment.includes('%')) segment = safeDecode(segment);
      if (segment === '..') segments.pop();
      else if (segment !== '.' && segment.length > 0) segments.push(segment);
    }
    from = i + 1;
  }
  return segments;
}

function safeDecode(segment: string): string {
  try {
    return decodeURIComponent(segment);
  } catch {
    return segment;
  }
}

/** `lowerExpected` is already lower case; compares without allocating a lowered copy. */
function equalsIgnoreAsciiCase(actual: string, lowerExpected: string): boolean {
  if (actual.length !== lowerExpected.length) return false;
  for (let i = 0; i < actual.length; i++) {
    let c = actual.charCodeAt(i);
    if (c >= 65 && c <= 90) c += 32;
    if (c !== lowerExpected.charCodeAt(i)) return false;
  }
  return true;
}
