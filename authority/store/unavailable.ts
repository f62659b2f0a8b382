/**
 * Tells "the database cannot be reached" apart from every other failure, once, for every caller:
 * the central error handler answers these 503 (retry later) instead of 500 (our bug), whichever
 * route or the auth layer met them. A database that is stopped, restarting, out of connections
 * or unreachable is an outage of a dependency, not a fault of the request or of the code.
 *
 * Recognised, anywhere in the `cause` chain (and inside an AggregateError, which Node's
 * happy-eyeballs connect raises):
 * - Postgres SQLSTATEs of a lost or refused connection: class 08 (connection exception),
 *   57P01 admin_shutdown, 57P02 crash_shutdown, 57P03 cannot_connect_now, 57P05
 *   idle_session_timeout, 53300 too_many_connections;
 * - socket errors of the connection: ECONNREFUSED, ECONNRESET, ETIMEDOUT, EPIPE, EHOSTUNREACH,
 *   ENETUNREACH, ENOTFOUND, EAI_AGAIN;
 * - pg's own errors for a connection that ended, could not be made in time, or a pool that is
 *   ending (shutdown), and PGlite's "PGlite is closed".
 *
 * @example
 *   if (isDatabaseUnavailable(error)) throw new CountersignError('service_unavailable', …, { cause: error });
 */

const SQLSTATES = new Set(['57P01', '57P02', '57P03', '57P05', '53300']);
const SQLSTATE_CLASSES = ['08'];
const SOCKET_CODES = new Set(['ECONNREFUSED', 'ECONNRESET', 'ETIMEDOUT', 'EPIPE', 'EHOSTUNREACH', 'ENETUNREACH', 'ENOTFOUND', 'EAI_AGAIN']);

/** Messages of errors that carry no code: pg, pg-pool and PGlite name them only in words. */
const MESSAGES = [
  /^Connection terminated\b/, // "… unexpectedly", "… due to connection timeout", plain (pg, pg-pool)
  /^timeout exceeded when trying to connect$/, // pg-pool: connectionTimeoutMillis ran out
  /^Client has encountered a connection error and is not queryable$/,
  /^Client was closed and is not queryable$/,
  /^Cannot use a pool after calling end on the pool$/, // the process is shutting down
  /^Query read timeout$/,
  /^PGlite is closed$/,
];

/** How deep a `cause` chain is followed; wrappers rarely nest more than two or three. */
const MAX_DEPTH = 8;

function matches(error: object): boolean {
  const code = (error as { code?: unknown }).code;
  if (typeof code === 'string') {
    if (SQLSTATES.has(code) || SOCKET_CODES.has(code)) return true;
    if (/^[0-9A-Z]{5}$/.test(code) && SQLSTATE_CLASSES.includes(code.slice(0, 2))) return true;
  }
  const message = (error as { message?: unknown }).message;
  return typeof message === 'string' && MESSAGES.some((pattern) => pattern.test(message));
}

/** Whether `error` (or what caused it) means the database could not be reached or used. */
export function isDatabaseUnavailable(error: unknown, depth = 0): boolean {
  if (depth > MAX_DEPTH || typeof error !== 'object' || error === null) return false;
  if (matches(error)) return true;
  if (error instanceof AggregateError && error.errors.some((inner) => isDatabaseUnavailable(inner, depth + 1))) return true;
  return isDatabaseUnavailable((error as { cause?: unknown }).cause, depth + 1);
}
