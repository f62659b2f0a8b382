/**
 * `POST /v1/evaluate`, `/v1-evaluate` and `/functions/v1/v1-evaluate` (scope evaluate:write; the
 * evaluate rate-limit bucket, 429 `unavailable` with retry_after_ms). The body is the wire form,
 * the agent helper form or the SDK's legacy names (shared/wire/evaluate.ts);
 * `?include=constraint_trace` adds the rule-by-rule trace (constraint-trace.ts). An API key asking
 * as an actor it may not speak for is refused (403) before anything is decided (api-keys/actors.ts).
 */
import type { FastifyInstance } from 'fastify';
import type { ZodTypeProvider } from 'fastify-type-provider-zod';
import { z } from 'zod';
import { EvaluateQuery, EvaluateResponse } from '../../shared/wire/evaluate.js';
import { assertMaySpeakFor } from '../api-keys/actors.js';
import type { Principal } from '../auth/principal.js';
import { EVALUATE_LIMIT } from '../http/route-access.js';
import { constraintTraceOf } from './constraint-trace.js';
import type { EvaluateDeps } from './evaluate.js';
import { evaluateInSpan, evaluationOf } from './in-request.js';

export const EVALUATE_PATHS = ['/v1/evaluate', '/v1-evaluate', '/functions/v1/v1-evaluate'] as const;

export function evaluateRoutes(app: FastifyInstance, deps: EvaluateDeps): void {
  const routes = app.withTypeProvider<ZodTypeProvider>();
  for (const url of EVALUATE_PATHS) {
    routes.post(
      url,
      {
        config: { access: 'evaluate:write', rateLimit: EVALUATE_LIMIT },
        // The form is decided by the body's shape, so it is validated in the handler.
        schema: { body: z.record(z.string(), z.unknown()), querystring: EvaluateQuery, response: { 200: EvaluateResponse } },
      },
      async (request) => {
        const traced = request.query.include.has('constraint_trace');
        const evaluation = evaluationOf(request.body, traced);
        assertMaySpeakFor(request.principal as Principal, evaluation.actor_id);
        const response = await evaluateInSpan(deps, request, evaluation);
        return traced ? Object.assign({}, response, { constraint_trace: constraintTraceOf(response) }) : response;
      },
    );
  }
}
