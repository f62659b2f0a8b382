/**
 * The one request target the gate decides on and the upstream receives. The gate matches a path
 * against its routes, and the upstream's router then reads the same bytes again; whenever the two
 * readings can differ (a router that collapses `//`, resolves `..`, decodes `%2f` into a separator,
 * strips `;params`, turns `\` into `/`, or takes its method from a header), a request the gate
 * placed as unprotected could reach a protected handler without a permit. Rather than guess every
 * upstream's rules, the proxy refuses those forms (400 `invalid_request`) before matching, and
 * forwards exactly the string it matched: `checkedTarget` is the only source of both.
 *
 * Refused in the path (raw or percent-encoded): empty segments other than one trailing slash
 * (`//`), `.` and `..` segments, `%2f` and `%5c` (an encoded separator), `\`, `;`, `%00`, malformed
 * escapes, a fragment, and any target not in origin-form or absolute-form. Refused anywhere: the
 * method-override headers (`X-HTTP-Method-Override`, `X-HTTP-Method`, `X-Method-Override`) and a
 * `_method` query parameter (Express's method-override reads both), since the upstream would run a
 * handler for a method the gate did not check. A body `_method` cannot be seen without buffering
 * every body; the docs tell operators not to enable it.
 *
 * What stays allowed, because the matcher already errs on the side of matching it (routes.ts):
 * letter case, percent-encoded ordinary characters (`/%65cho`), one trailing slash, HEAD for GET.
 *
 * @example
 *   checkedTarget('/echo/1?x=2', headers);  // { target: '/echo/1?x=2' }
 *   checkedTarget('/x/../echo/1', headers); // CountersignError invalid_request, reason AMBIGUOUS_PATH
 */
import type { IncomingHttpHeaders } from 'node:http';
import { CountersignError } from '../shared/errors.js';

export const METHOD_OVERRIDE_HEADERS = ['x-http-method-override', 'x-http-method', 'x-method-override'] as const;

export type CheckedTarget = { readonly target: string } | { readonly error: CountersignError };

/** Escapes that decode to a separator, a backslash or NUL: upstreams disagree on whether they split. */
const ENCODED_SEPARATOR = /%(2f|5c|00)/i;
/** Every `%` must start a two-hex-digit escape; a lone `%` is decoded by some routers and not others. */
const MALFORMED_ESCAPE = /%(?![0-9a-f]{2})/i;

export function checkedTarget(url: string | undefined, headers: IncomingHttpHeaders): CheckedTarget {
  for (const name of METHOD_OVERRIDE_HEADERS) {
    if (headers[name] !== undefined) {
      return refuse('METHOD_OVERRIDE', `The ${name} header is refused: the upstream would run a method the gate did not check.`);
    }
  }
  const target = originTarget(url);
  if (target === null) return refuse('INVALID_TARGET', 'The request target must be a path (origin-form).');
  if (target.includes('#')) return refuse('AMBIGUOUS_PATH', 'The request target has a fragment.');
  const question = target.indexOf('?');
  const path = question < 0 ? target : target.slice(0, question);
  const problem = pathProblem(path);
  if (problem !== null) return refuse('AMBIGUOUS_PATH', `The request path is ambiguous (${problem}); send it in its plain form.`);
  if (question >= 0 && hasMethodParameter(target.slice(question + 1))) {
    return refuse('METHOD_OVERRIDE', 'The _method query parameter is refused: the upstream would run a method the gate did not check.');
  }
  return { target };
}

/** Why a path (no query) is ambiguous, or null when upstream routers agree on how to read it. */
export function pathProblem(path: string): string | null {
  if (!path.startsWith('/')) return 'it does not start with /';
  if (path.includes('\\')) return 'a backslash';
  if (path.includes(';')) return 'a ; path parameter';
  if (ENCODED_SEPARATOR.test(path)) return 'an encoded /, \\ or NUL';
  if (MALFORMED_ESCAPE.test(path)) return 'a malformed %-escape';
  const segments = path.split('/');
  // segments[0] is the empty string before the leading slash; the last may be empty (a trailing slash).
  for (let i = 1; i < segments.length; i++) {
    const segment = segments[i]!;
    if (segment === '') {
      if (i === segments.length - 1) continue; // one trailing slash (or the root path `/`)
      return 'an empty segment (//)';
    }
    const decoded = segment.includes('%') ? decodeURIComponentSafe(segment) : segment;
    if (decoded === null) return 'a segment that is not valid UTF-8 once decoded';
    if (decoded === '.' || decoded === '..') return 'a . or .. segment';
  }
  return null;
}

/** The path and query of a request target as the client sent them (no normalization), or null. */
function originTarget(url: string | undefined): string | null {
  if (url === undefined || url === '') return null;
  if (url.startsWith('/')) return url;
  // absolute-form (`GET http://host/path`): the raw path and query, not `new URL`'s resolved
  // pathname, so that `http://h/a/../b` is refused like `/a/../b` instead of silently rewritten.
  const scheme = /^https?:\/\/[^/?#]*/i.exec(url);
  if (scheme === null) return null;
  const rest = url.slice(scheme[0].length);
  if (rest === '') return '/';
  return rest.startsWith('?') ? `/${rest}` : rest.startsWith('/') ? rest : null;
}

function hasMethodParameter(query: string): boolean {
  for (const pair of query.split('&')) {
    const equals = pair.indexOf('=');
    const rawName = (equals < 0 ? pair : pair.slice(0, equals)).replace(/\+/g, ' ');
    const name = decodeURIComponentSafe(rawName) ?? rawName;
    if (name.trim().toLowerCase() === '_method') return true;
  }
  return false;
}

function decodeURIComponentSafe(text: string): string | null {
  try {
    return decodeURIComponent(text);
  } catch {
    return null;
  }
}

function refuse(reason: string, message: string): CheckedTarget {
  return { error: new CountersignError('invalid_request', message, { reason }) };
}
