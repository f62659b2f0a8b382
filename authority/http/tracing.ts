/**
 * The authority's spans, when tracing is on (shared/telemetry): a SERVER span per HTTP request,
 * joining the caller's W3C `traceparent`, named by the route template (`POST /v1/evaluate`,
 * `POST /v1/approvals/:id/resolve`), never by the raw URL; and `inRequestSpan` for the operations
 * inside a request (evaluate, verify-permit, approvals, escalations), children of that span.
 * When tracing is off, `installTracing` is not called and `inRequestSpan` just runs the operation.
 *
 * Install first, before the other hooks: the span then covers authentication, rate limiting and
 * the drain answer too.
 *
 * @example
 *   if (tracing !== null) installTracing(app, tracing);
 *   return inRequestSpan(request, SPAN.evaluate, () => evaluateAction(…), () => ({ after: evaluationAttributes }));
 */
import type { FastifyInstance, FastifyRequest } from 'fastify';
import { ATTR } from '../../shared/telemetry/attributes.js';
import { tracing, type SpanOptions, type Tracing } from '../../shared/telemetry/index.js';

export function installTracing(app: FastifyInstance, traced: Tracing): void {
  app.addHook('onRequest', (request, reply, done) => {
    const span = traced.startRequest(request.raw, request.routeOptions.url, {
      [ATTR.httpRoute]: request.routeOptions.url,
      [ATTR.urlScheme]: request.protocol,
      [ATTR.requestId]: request.id,
    });
    // 'close' comes for every response, answered or cut off.
    reply.raw.once('close', () => span.end(reply.raw.headersSent ? reply.raw.statusCode : undefined));
    done();
  });
}

/**
 * Runs `fn` in a child span of the request's server span; just runs it when tracing is off (the
 * span's options are then not even built).
 */
export function inRequestSpan<T>(request: FastifyRequest, name: string, fn: () => Promise<T>, options?: () => Omit<SpanOptions<T>, 'request' | 'root'>): Promise<T> {
  const traced = tracing;
  return traced === null ? fn() : traced.inSpan(name, fn, { request: request.raw, ...options?.() });
}
