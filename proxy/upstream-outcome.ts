/**
 * What the proxy can honestly say about a forwarded request whose upstream gave no answer: it was
 * `not_reached` (the request certainly never left the proxy, so nothing ran and a new permit may
 * be used for a retry), or the result is `unknown` (the request may have reached the upstream and
 * run, so the caller must check the effect before retrying). The error alone does not always
 * decide it: a request that undici never handed to a connection cannot have left, whatever ended
 * it, while a reset or a time-out after that may come after the upstream acted.
 *
 * Codes are stable (they go into the `execution.observed` record and the audit log); the reason is
 * for people.
 *
 * @example
 *   classifyUpstreamFailure(error, { dispatched: false, clientGone: false });
 *   // { upstream: 'not_reached', code: 'UPSTREAM_REFUSED', reason: 'the upstream refused the connection (ECONNREFUSED); …' }
 */
import type { UpstreamOutcome } from '../shared/wire/verification-records.js';

export interface UpstreamFailure {
  upstream: Exclude<UpstreamOutcome, 'answered'>;
  code: string;
  reason: string;
}

export interface FailureContext {
  /**
   * undici handed the request to a connection (its `onRequestStart`): from then on bytes may have
   * gone out. Before it, the request was only waiting for a connection.
   */
  dispatched: boolean;
  /** The client went away before the upstream answered (the proxy kept waiting for the answer). */
  clientGone: boolean;
}

/** The client's connection closed; also the abort reason the forwarding uses. */
export class ClientGone extends Error {
  readonly code = 'CLIENT_GONE';
  constructor() {
    super('the client went away');
  }
}

/** The proxy stopped while the request was in flight (past the drain); the abort reason on close. */
export class ProxyStopped extends Error {
  readonly code = 'PROXY_STOPPED';
  constructor() {
    super('the proxy stopped');
  }
}

type Class = readonly [code: string, what: string];

/** Errors that only happen while connecting: whatever `dispatched` says, nothing was sent. */
const CONNECT_ERRORS: Readonly<Record<string, Class>> = {
  ECONNREFUSED: ['UPSTREAM_REFUSED', 'the upstream refused the connection'],
  ENOTFOUND: ['UPSTREAM_DNS_FAILURE', "the upstream's host name did not resolve"],
  EAI_AGAIN: ['UPSTREAM_DNS_FAILURE', "the upstream's host name could not be resolved now"],
  EAI_FAIL: ['UPSTREAM_DNS_FAILURE', "the upstream's host name could not be resolved"],
  EAI_NODATA: ['UPSTREAM_DNS_FAILURE', "the upstream's host name has no address"],
  EAI_NONAME: ['UPSTREAM_DNS_FAILURE', "the upstream's host name did not resolve"],
  UND_ERR_CONNECT_TIMEOUT: ['UPSTREAM_CONNECT_TIMEOUT', 'connecting to the upstream timed out'],
  EHOSTUNREACH: ['UPSTREAM_NO_ROUTE', 'there is no route to the upstream'],
  ENETUNREACH: ['UPSTREAM_NO_ROUTE', "the upstream's network is unreachable"],
  EHOSTDOWN: ['UPSTREAM_NO_ROUTE', "the upstream's host is down"],
  ENETDOWN: ['UPSTREAM_NO_ROUTE', 'the network is down'],
};

/** Errors that may come after the request (or part of it) went out. */
const AFTER_SENDING: Readonly<Record<string, Class>> = {
  ECONNRESET: ['UPSTREAM_RESET', 'the upstream connection was reset before an answer'],
  EPIPE: ['UPSTREAM_RESET', 'the upstream connection was closed while the request was being sent'],
  UND_ERR_SOCKET: ['UPSTREAM_RESET', 'the upstream connection closed before an answer'],
  UND_ERR_HEADERS_TIMEOUT: ['UPSTREAM_HEADERS_TIMEOUT', 'the upstream did not answer in time'],
  UND_ERR_BODY_TIMEOUT: ['UPSTREAM_BODY_TIMEOUT', 'the upstream stopped sending in the middle of its answer'],
  ETIMEDOUT: ['UPSTREAM_TIMEOUT', 'the upstream connection timed out'],
  UND_ERR_ABORTED: ['CLIENT_GONE', 'the request was abandoned'],
  CLIENT_GONE: ['CLIENT_GONE', 'the client went away'],
  UND_ERR_DESTROYED: ['PROXY_STOPPED', 'the proxy stopped'],
  UND_ERR_CLOSED: ['PROXY_STOPPED', 'the proxy stopped'],
  PROXY_STOPPED: ['PROXY_STOPPED', 'the proxy stopped'],
};

/** Certificate and handshake errors of node:tls and OpenSSL. */
const TLS_CODE = /^(ERR_TLS_|ERR_SSL_|CERT_|UNABLE_TO_|DEPTH_ZERO_|SELF_SIGNED_|HOSTNAME_MISMATCH$|EPROTO$)/;
const PARSE_CODE = /^HPE_/;

const NEVER_LEFT = 'the request never left the proxy';
const MAY_HAVE_RUN = 'the request may have reached the upstream';

export function classifyUpstreamFailure(error: unknown, context: FailureContext): UpstreamFailure {
  const code = errorCode(error);
  const detail = code ?? describe(error);
  const connect = code === undefined ? undefined : CONNECT_ERRORS[code];
  if (connect !== undefined || !context.dispatched) {
    const [stable, what] = connect ?? connectClass(code, context.clientGone);
    return { upstream: 'not_reached', code: stable, reason: `${what} (${detail}); ${NEVER_LEFT}` };
  }
  const [stable, what] = afterSendingClass(code);
  if (context.clientGone && stable !== 'PROXY_STOPPED') {
    // The proxy keeps waiting for the upstream when the client leaves; if it then fails, what
    // the caller should know first is that it left while the upstream held the request.
    return { upstream: 'unknown', code: 'CLIENT_GONE', reason: `the client went away before the upstream answered, then ${detail}; ${MAY_HAVE_RUN}` };
  }
  return { upstream: 'unknown', code: stable, reason: `${what} (${detail}); ${MAY_HAVE_RUN}` };
}

function connectClass(code: string | undefined, clientGone: boolean): Class {
  if (code !== undefined && TLS_CODE.test(code)) return ['UPSTREAM_TLS_FAILURE', 'the TLS handshake with the upstream failed'];
  if (code === 'ETIMEDOUT') return ['UPSTREAM_CONNECT_TIMEOUT', 'connecting to the upstream timed out'];
  if (code !== undefined && AFTER_SENDING[code]?.[0] === 'PROXY_STOPPED') return ['PROXY_STOPPED', 'the proxy stopped before the request was sent'];
  if (clientGone || code === 'CLIENT_GONE' || code === 'UND_ERR_ABORTED') return ['CLIENT_GONE', 'the client went away before the request was sent'];
  return ['UPSTREAM_CONNECT_FAILED', 'the connection to the upstream failed'];
}

function afterSendingClass(code: string | undefined): Class {
  if (code === undefined) return ['UPSTREAM_ERROR', 'the upstream did not answer'];
  const known = AFTER_SENDING[code];
  if (known !== undefined) return known;
  if (TLS_CODE.test(code)) return ['UPSTREAM_TLS_FAILURE', 'the TLS connection to the upstream failed'];
  if (PARSE_CODE.test(code)) return ['UPSTREAM_INVALID_ANSWER', 'the upstream sent something that is not an HTTP answer'];
  return ['UPSTREAM_ERROR', 'the upstream did not answer'];
}

/**
 * The error's code; for an AggregateError without one (a connection tried on several addresses)
 * the first inner error's, and otherwise its cause's.
 */
function errorCode(error: unknown, depth = 0): string | undefined {
  if (typeof error !== 'object' || error === null || depth > 3) return undefined;
  const code = (error as { code?: unknown }).code;
  if (typeof code === 'string' && code !== '') return code.slice(0, 64);
  if (error instanceof AggregateError && error.errors.length > 0) return errorCode(error.errors[0], depth + 1);
  return errorCode((error as { cause?: unknown }).cause, depth + 1);
}

function describe(error: unknown): string {
  const text = error instanceof Error ? error.message : String(error);
  return text === '' ? 'no detail' : text.slice(0, 200);
}
