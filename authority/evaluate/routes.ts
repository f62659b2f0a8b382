/**
 * `POST /v1/evaluate`, `/v1-evaluate` and `/functions/v1/v1-evaluate` (scope evaluate:write; the
 * evaluate rate-limit bucket, 429 `unavailable` with retry_after_ms). The body is the wire form
 * or the agent helper form (shared/wire/evaluate.ts).
 */
import type { FastifyInstance } from 'fastify';
import type { ZodTypeProvider } from 'fastify-type-provider-zod';
import { z } from 'zod';
import { EvaluateResponse, parseEvaluateRequest } from '../../shared/wire/evaluate.js';
import type { Principal } from '../auth/principal.js';
import { invalidRequest } from '../http/errors.js';
import { EVALUATE_LIMIT } from '../http/route-access.js';
import { evaluateAction, type EvaluateDeps } from './evaluate.js';

export const EVALUATE_PATHS = ['/v1/evaluate', '/v1-evaluate', '/functions/v1/v1-evaluate'] as const;

export function evaluateRoutes(app: FastifyInstance, deps: EvaluateDeps): void {
  const routes = app.withTypeProvider<ZodTypeProvider>();
  for (const url of EVALUATE_PATHS) {
    routes.post(
      url,
      {
        config: { access: 'evaluate:write', rateLimit: EVALUATE_LIMIT },
        // The form is decided by the body's shape, so it is validated in the handler.
        schema: { body: z.record(z.string(), z.unknown()), response: { 200: EvaluateResponse } },
      },
      async (request) => {
        const parsed = parseEvaluateRequest(request.body);
        if (!parsed.success) throw invalidRequest(parsed.error);
        return evaluateAction(deps, request.principal as Principal, parsed.data, request.id);
      },
    );
  }
}
