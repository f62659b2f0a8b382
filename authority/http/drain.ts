/**
 * Shutdown answers in the envelope. Once `close()` begins (SIGTERM), the listener stops accepting
 * connections and idle ones are closed, but a client on a kept-alive connection can still send a
 * request (pipelined, or in the moment before its connection is reaped). Such a request gets
 * 503 `service_unavailable` in the error envelope, with `request_id`, `X-Request-ID`,
 * `Retry-After` and `Connection: close`, instead of fastify's own body (so `return503OnClosing`
 * is off). Requests already in flight complete, and their responses carry `Connection: close` too:
 * the client moves to another replica, and the drain ends when the last one is answered instead
 * of when a kept-alive connection times out.
 *
 * Install before the guard: a refused request costs no authentication query.
 *
 * @example
 *   const app = Fastify({ return503OnClosing: false, … });
 *   installDrainAnswer(app);
 */
import type { FastifyInstance } from 'fastify';
import { CountersignError, errorEnvelope, withErrorHeaders } from '../../shared/errors.js';

export function installDrainAnswer(app: FastifyInstance): void {
  let draining = false;
  // preClose runs as close() begins, before the listener stops: nothing arrives unseen.
  app.addHook('preClose', async () => {
    draining = true;
  });
  app.addHook('onRequest', async (request, reply) => {
    if (!draining) return;
    // Answered here rather than thrown: the error handler would log a shutdown as a failure.
    const error = new CountersignError('service_unavailable', 'the authority is shutting down; retry, another replica will answer', { retryAfterSeconds: 1 });
    return reply
      .code(error.status)
      .headers(withErrorHeaders(error, { 'x-request-id': request.id, connection: 'close' }))
      .type('application/json; charset=utf-8')
      .send(errorEnvelope(error, request.id));
  });
  app.addHook('onSend', async (_request, reply) => {
    if (draining) reply.header('connection', 'close');
  });
}
