/**
 * `POST /v1/evaluate-stream` (and the SDK's `/v1-evaluate-stream`, `/functions/v1/v1-evaluate-
 * stream`): evaluate, answered as Server-Sent Events in the shape the @atlasent/sdk's
 * `protectStream` parses. The same scope, rate-limit bucket, bounded input, body forms and
 * evaluate core as `POST /v1/evaluate` (in-request.ts), so the decision, its permit and its audit
 * record are made exactly as there.
 *
 * Everything refused before the stream starts (credential, scope, rate limit, a malformed body, an
 * actor the API key may not speak for) is an ordinary error envelope with its status. Once it has
 * started (200, `text/event-stream`):
 *
 *   event: progress   data: {"stage":"evaluating","request_id":…}
 *   event: decision   data: {"permitted":…,"decision":…,"decision_id":…,"is_final":true,"evaluation":{…}}
 *   event: done       data: {}
 *
 * or, when the evaluation fails (503 `audit_unavailable`, 409, …), `event: error` with the error
 * envelope as its data, and the stream ends. `decision_id` is the permit token on allow (the SDK
 * passes it on to verify as the permit), else the evaluation id.
 *
 * @example
 *   evaluateStreamRoutes(app, deps);
 */
import { PassThrough } from 'node:stream';
import type { FastifyInstance } from 'fastify';
import type { ZodTypeProvider } from 'fastify-type-provider-zod';
import { z } from 'zod';
import { errorEnvelope } from '../../shared/errors.js';
import type { EvaluateResponse } from '../../shared/wire/evaluate.js';
import { assertMaySpeakFor } from '../api-keys/actors.js';
import type { Principal } from '../auth/principal.js';
import { toCountersignError } from '../http/errors.js';
import { EVALUATE_LIMIT } from '../http/route-access.js';
import type { EvaluateDeps } from './evaluate.js';
import { evaluateInSpan, evaluationOf } from './in-request.js';

/** The slash path first; the function-style aliases are the SDK's. */
export const EVALUATE_STREAM_PATHS = ['/v1/evaluate-stream', '/v1-evaluate-stream', '/functions/v1/v1-evaluate-stream'] as const;

/** One event; its data on one `data:` line (JSON has no raw newline), as the SDK reads it. */
function sseEvent(event: string, data: unknown): string {
  return `event: ${event}\ndata: ${JSON.stringify(data)}\n\n`;
}

/** The SDK's decision event: its legacy `permitted`/`decision_id` names, and the whole answer. */
export function decisionEvent(response: EvaluateResponse, at: Date) {
  return {
    permitted: response.decision === 'allow',
    decision: response.decision,
    decision_id: response.permit_token ?? response.evaluation_id,
    permit_token: response.permit_token ?? null,
    permit_id: response.permit_id ?? null,
    evaluation_id: response.evaluation_id,
    request_id: response.request_id,
    reason: response.decisionObject.reason_codes.join(', '),
    timestamp: at.toISOString(),
    is_final: true,
    evaluation: response,
  };
}

export function evaluateStreamRoutes(app: FastifyInstance, deps: EvaluateDeps): void {
  const routes = app.withTypeProvider<ZodTypeProvider>();
  for (const url of EVALUATE_STREAM_PATHS) {
    routes.post(
      url,
      {
        config: { access: 'evaluate:write', rateLimit: EVALUATE_LIMIT },
        // The form is decided by the body's shape, so it is validated in the handler.
        schema: { body: z.record(z.string(), z.unknown()) },
      },
      async (request, reply) => {
        // Before the stream starts: a malformed body is the caller's 400 in the envelope, an actor
        // the key may not speak for its 403.
        const evaluation = evaluationOf(request.body, false);
        assertMaySpeakFor(request.principal as Principal, evaluation.actor_id);
        const events = new PassThrough();
        // A caller that hung up leaves nothing to write to; the evaluation still completes and is recorded.
        events.on('error', () => undefined);
        const send = (event: string, data: unknown) => {
          if (!events.destroyed && !events.writableEnded) events.write(sseEvent(event, data));
        };
        void reply.type('text/event-stream; charset=utf-8').header('cache-control', 'no-store').send(events);
        send('progress', { stage: 'evaluating', request_id: evaluation.request_id ?? request.id });
        try {
          const response = await evaluateInSpan(deps, request, evaluation);
          send('decision', decisionEvent(response, new Date(deps.clock.now())));
          send('done', {});
        } catch (error) {
          const mapped = toCountersignError(error);
          if (mapped.code === 'internal') request.log.error({ err: error }, 'unhandled error answered with an error event');
          else if (mapped.status >= 500) request.log.warn({ err: error, code: mapped.code }, 'dependency failure');
          send('error', errorEnvelope(mapped, request.id));
        } finally {
          events.end();
        }
        return reply;
      },
    );
  }
}
