/**
 * Every error leaves the authority as the envelope `{error, message, status, request_id}`:
 * our own `CountersignError`s, zod validation failures (400 with `details`), fastify's body
 * errors (413, 415, bad JSON), the router's URL errors (a bad percent-encoding, a path parameter
 * longer than the router admits: 400), unknown paths (404) and methods (405, with `Allow`), a database that
 * cannot be reached, wherever it was met (503 `service_unavailable` with `Retry-After`, see
 * store/unavailable.ts), and anything unexpected as a 500 `internal` whose message never carries
 * a stack or internals.
 */
import type { FastifyError, FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { hasZodFastifySchemaValidationErrors } from 'fastify-type-provider-zod';
import FindMyWay, { type HTTPVersion } from 'find-my-way';
import type { z } from 'zod';
import { CountersignError, errorEnvelope, type ErrorDetail } from '../../shared/errors.js';
import { isDatabaseUnavailable } from '../store/unavailable.js';
import { ROUTER_MAX_PARAM_LENGTH } from './bounded-input.js';

const BODY_ERRORS: Record<string, () => CountersignError> = {
  FST_ERR_CTP_BODY_TOO_LARGE: () => new CountersignError('payload_too_large', 'request bodies are limited to 64 KiB'),
  FST_ERR_CTP_INVALID_MEDIA_TYPE: () =>
    new CountersignError('unsupported_media_type', 'request bodies must be sent as Content-Type: application/json'),
  FST_ERR_CTP_EMPTY_JSON_BODY: () => new CountersignError('invalid_request', 'the JSON body is empty'),
  FST_ERR_CTP_INVALID_CONTENT_LENGTH: () => new CountersignError('invalid_request', 'Content-Length does not match the body'),
};

function validationDetails(error: { validation: Array<{ instancePath: string; message?: string }>; validationContext?: string }): ErrorDetail[] {
  const context = error.validationContext;
  const prefix = context === 'querystring' ? 'query' : context === 'params' ? 'params' : context === 'headers' ? 'headers' : '';
  return error.validation.map((issue) => {
    const path = issue.instancePath.split('/').filter(Boolean).join('.');
    return { path: [prefix, path].filter(Boolean).join('.') || '(body)', message: issue.message ?? 'invalid' };
  });
}

/** A zod failure from a schema applied by hand (not by the route's schema), as a 400. */
export function invalidRequest(error: z.ZodError, message = 'the request does not match the schema'): CountersignError {
  return new CountersignError('invalid_request', message, {
    details: error.issues.map((issue) => ({ path: issue.path.map(String).join('.') || '(body)', message: issue.message })),
  });
}

/** A database outage met anywhere (the auth layer included): retryable, never our 500. */
function databaseUnavailable(cause: unknown): CountersignError {
  return new CountersignError('service_unavailable', 'the database is not reachable; retry later', { cause });
}

/** Maps anything thrown while answering to the envelope's error. */
export function toCountersignError(error: unknown): CountersignError {
  if (error instanceof CountersignError) {
    // Code that wrapped a failure as `internal` without knowing what it was.
    return error.code === 'internal' && isDatabaseUnavailable(error.cause) ? databaseUnavailable(error) : error;
  }
  if (hasZodFastifySchemaValidationErrors(error)) {
    return new CountersignError('invalid_request', 'the request does not match the schema', {
      details: validationDetails(error as never),
    });
  }
  const fastifyError = error as Partial<FastifyError>;
  const known = fastifyError.code ? BODY_ERRORS[fastifyError.code] : undefined;
  if (known) return known();
  const status = fastifyError.statusCode;
  if (status === 400) {
    const message = error instanceof SyntaxError ? 'the body is not valid JSON' : 'the request is malformed';
    return new CountersignError('invalid_request', message);
  }
  if (status === 413) return BODY_ERRORS.FST_ERR_CTP_BODY_TOO_LARGE!();
  if (status === 415) return BODY_ERRORS.FST_ERR_CTP_INVALID_MEDIA_TYPE!();
  if (status === 404) return new CountersignError('not_found');
  if (status !== undefined && status >= 400 && status < 500) return new CountersignError('invalid_request', 'the request is malformed');
  // After the client errors: a client that hung up mid-body is an ECONNRESET too (fastify marks it 400).
  if (isDatabaseUnavailable(error)) return databaseUnavailable(error);
  return new CountersignError('internal', undefined, { cause: error });
}

/**
 * Fastify's `frameworkErrors` option: the URL errors its router raises before any route, hook or
 * error handler runs, which it would otherwise answer with a body of its own (400 FST_ERR_BAD_URL,
 * 414 FST_ERR_MAX_PARAM_LENGTH).
 *
 * @example
 *   const app = Fastify({ frameworkErrors: answerFrameworkError });
 */
export function answerFrameworkError(error: FastifyError, request: FastifyRequest, reply: FastifyReply): void {
  const mapped =
    error.code === 'FST_ERR_MAX_PARAM_LENGTH'
      ? new CountersignError('invalid_request', `a path segment is longer than ${ROUTER_MAX_PARAM_LENGTH} characters`)
      : error.code === 'FST_ERR_BAD_URL'
        ? new CountersignError('invalid_request', 'the path is not a valid URL (bad percent-encoding)')
        : toCountersignError(error);
  if (mapped.code === 'internal') request.log.error({ err: error }, 'unhandled framework error answered with 500');
  void reply
    .code(mapped.status)
    .header('x-request-id', request.id)
    .type('application/json; charset=utf-8')
    .send(errorEnvelope(mapped, request.id));
}

/**
 * The error handler: `error` answered in the envelope, logged when it is ours. `reword` lets a
 * route's own error handler change what a mapped error says (the AuthZEN routes answer a body
 * that is not JSON with 400, as AuthZEN asks, where the rest of the API answers 415).
 *
 * @example
 *   routes.post(path, { errorHandler: (error, request, reply) => answerError(error, request, reply, reword) }, handler);
 */
export function answerError(error: unknown, request: FastifyRequest, reply: FastifyReply, reword: (mapped: CountersignError) => CountersignError = (mapped) => mapped): FastifyReply {
  const mapped = reword(toCountersignError(error));
  if (mapped.code === 'internal') request.log.error({ err: error }, 'unhandled error answered with 500');
  else if (mapped.status >= 500) request.log.warn({ err: error, code: mapped.code }, 'dependency failure');
  for (const [name, value] of Object.entries(mapped.headers)) reply.header(name, value);
  return reply.code(mapped.status).type('application/json; charset=utf-8').send(errorEnvelope(mapped, request.id));
}

const METHODS = ['GET', 'HEAD', 'POST', 'PUT', 'PATCH', 'DELETE', 'OPTIONS'] as const;

/** Installs the error handler and the 404/405 handler. Call before registering routes. */
export function installErrorHandling(app: FastifyInstance): void {
  // fastify answers an unknown method on a known path with 404; a shadow router of every
  // registered route tells the two apart so the caller gets 405 and the Allow header.
  const known = FindMyWay<HTTPVersion.V1>();
  app.addHook('onRoute', (route) => {
    for (const method of [route.method].flat()) {
      if (!known.hasRoute(method as never, route.url)) known.on(method as never, route.url, () => undefined);
    }
  });

  app.setErrorHandler((error, request, reply) => answerError(error, request, reply));

  app.setNotFoundHandler((request, reply) => {
    const path = request.url.split('?')[0] ?? '/';
    const allowed = METHODS.filter((method) => method !== request.method && known.find(method, path) !== null);
    const error =
      allowed.length > 0
        ? new CountersignError('method_not_allowed', `${request.method} is not allowed on this path`, {
            headers: { allow: allowed.join(', ') },
          })
        : new CountersignError('not_found', `no such endpoint: ${request.method} ${path}`);
    for (const [name, value] of Object.entries(error.headers)) reply.header(name, value);
    return reply.code(error.status).type('application/json; charset=utf-8').send(errorEnvelope(error, request.id));
  });
}
