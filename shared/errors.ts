/**
 * The one catalogue of error codes in the error envelope `{error, message, status, request_id}`.
 * Every HTTP error the authority or the proxy answers comes from here, so a code always has the
 * same status and a client can rely on it. A 503 error carries `Retry-After` in its `headers`
 * (see `RETRY_AFTER_SECONDS`), as a 429 does; writers of the envelope send `headers`.
 *
 * @example
 *   throw new CountersignError('forbidden', 'this key lacks scope keys:write');
 */
export const ERROR_CATALOGUE = {
  invalid_request: { status: 400, message: 'The request is invalid.' },
  unauthorized: { status: 401, message: 'A valid credential is required.' },
  forbidden: { status: 403, message: 'The credential does not grant this operation.' },
  permit_required: { status: 403, message: 'This request needs a permit.' },
  permit_rejected: { status: 403, message: 'The permit was refused.' },
  not_found: { status: 404, message: 'Not found.' },
  method_not_allowed: { status: 405, message: 'Method not allowed on this path.' },
  conflict: { status: 409, message: 'The request conflicts with the current state.' },
  payload_too_large: { status: 413, message: 'The request body is too large.' },
  unsupported_media_type: { status: 415, message: 'Request bodies must be application/json.' },
  rate_limited: { status: 429, message: 'Rate limit exceeded.' },
  unavailable: { status: 429, message: 'Rate limit exceeded; retry later.' },
  internal: { status: 500, message: 'Internal error.' },
  upstream_unavailable: { status: 502, message: 'The protected upstream could not be reached.' },
  audit_unavailable: { status: 503, message: 'The audit log could not be written; nothing was decided.' },
  gate_unavailable: { status: 503, message: 'The permit could not be verified.' },
  service_unavailable: { status: 503, message: 'A dependency needed to answer is not reachable.' },
} as const satisfies Record<string, { status: number; message: string }>;

export type ErrorCode = keyof typeof ERROR_CATALOGUE;

/**
 * `Retry-After` seconds a 503 carries unless its thrower gives its own: the dependency or the
 * process it waited for is expected back soon, and a client (or a load balancer) should try again
 * rather than treat the answer as final. 429s take theirs from the rate-limit bucket instead.
 */
export const RETRY_AFTER_SECONDS: Partial<Record<ErrorCode, number>> = {
  audit_unavailable: 2,
  gate_unavailable: 1,
  service_unavailable: 2,
};

export interface ErrorDetail {
  path: string;
  message: string;
  /** 1-based position in a submitted document (policies), when known. */
  line?: number;
  column?: number;
}

export interface CountersignErrorOptions {
  /** Field-level problems, sent as `details` (400 only). */
  details?: ErrorDetail[];
  /** Sent as `retry_after_ms` in the body (429 from evaluate/verify-permit only). */
  retryAfterMs?: number;
  /**
   * Sent as the `Retry-After` header (whole seconds, at least 1) unless `headers` already carry
   * one. Defaults to `RETRY_AFTER_SECONDS[code]` (the 503 codes); 429s set their header from the
   * bucket through `headers`.
   */
  retryAfterSeconds?: number;
  /** A stable machine reason (proxy refusals, verification codes). */
  reason?: string;
  /** Extra response headers, such as `Allow` on 405. */
  headers?: Record<string, string>;
  cause?: unknown;
}

/** An error that carries its envelope code; `status` always comes from the catalogue. */
export class CountersignError extends Error {
  readonly code: ErrorCode;
  readonly status: number;
  readonly details: ErrorDetail[] | undefined;
  readonly retryAfterMs: number | undefined;
  readonly reason: string | undefined;
  /** Response headers to send with the envelope, `Retry-After` included when there is one. */
  readonly headers: Record<string, string>;

  constructor(code: ErrorCode, message?: string, options: CountersignErrorOptions = {}) {
    super(message ?? ERROR_CATALOGUE[code].message, { cause: options.cause });
    this.name = 'CountersignError';
    this.code = code;
    this.status = ERROR_CATALOGUE[code].status;
    this.details = options.details;
    this.retryAfterMs = options.retryAfterMs;
    this.reason = options.reason;
    const retryAfter = options.retryAfterSeconds ?? RETRY_AFTER_SECONDS[code];
    this.headers =
      retryAfter !== undefined && options.headers?.['retry-after'] === undefined
        ? Object.assign({}, options.headers, { 'retry-after': String(Math.max(1, Math.ceil(retryAfter))) })
        : (options.headers ?? {});
  }
}

/**
 * `ours` (the answer's own headers) with the error's headers (the catalogue's Retry-After on a 503
 * or 429) added beside them, never over them. Mutates and returns `ours`.
 *
 * @example
 *   res.writeHead(error.status, withErrorHeaders(error, { 'content-type': 'application/json', 'x-request-id': id }));
 */
export function withErrorHeaders<Headers extends Record<string, string | number>>(error: CountersignError, ours: Headers): Headers {
  for (const [name, value] of Object.entries(error.headers)) {
    if (!Object.hasOwn(ours, name)) (ours as Record<string, string | number>)[name] = value;
  }
  return ours;
}

export interface ErrorEnvelopeBody {
  error: ErrorCode;
  message: string;
  status: number;
  request_id: string;
  details?: ErrorDetail[];
  retry_after_ms?: number;
  reason?: string;
}

/** The wire body for an error. */
export function errorEnvelope(error: CountersignError, requestId: string): ErrorEnvelopeBody {
  const body: ErrorEnvelopeBody = {
    error: error.code,
    message: error.message,
    status: error.status,
    request_id: requestId,
  };
  if (error.details !== undefined) body.details = error.details;
  if (error.retryAfterMs !== undefined) body.retry_after_ms = error.retryAfterMs;
  if (error.reason !== undefined) body.reason = error.reason;
  return body;
}
