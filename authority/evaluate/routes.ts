/**
 * `POST /v1/evaluate`, `/v1-evaluate` and `/functions/v1/v1-evaluate` (scope evaluate:write; the
 * evaluate rate-limit bucket, 429 `unavailable` with retry_after_ms). The body is the wire form
 * or the agent helper form (shared/wire/evaluate.ts).
 */
import type { FastifyInstance } from 'fastify';
import type { ZodTypeProvider } from 'fastify-type-provider-zod';
import { z } from 'zod';
import { ATTR, genAiToolAttributes, SPAN, type SpanAttributes } from '../../shared/telemetry/attributes.js';
import { EvaluateResponse, parseEvaluateRequest } from '../../shared/wire/evaluate.js';
import type { Principal } from '../auth/principal.js';
import { invalidRequest } from '../http/errors.js';
import { EVALUATE_LIMIT } from '../http/route-access.js';
import { inRequestSpan } from '../http/tracing.js';
import { evaluateAction, type EvaluateDeps } from './evaluate.js';

export const EVALUATE_PATHS = ['/v1/evaluate', '/v1-evaluate', '/functions/v1/v1-evaluate'] as const;

/** What the decision was, for its span: never the permit token, the actor or the context's values. */
function evaluationAttributes(response: EvaluateResponse): SpanAttributes {
  const decision = response.decisionObject;
  return {
    [ATTR.decision]: response.decision,
    [ATTR.mode]: response.mode,
    [ATTR.permitId]: response.permit_id,
    [ATTR.evaluationId]: response.evaluation_id,
    [ATTR.reasonCodes]: decision.reason_codes,
    [ATTR.actionClass]: decision.action_class ?? undefined,
    [ATTR.policyVersion]: decision.policy.version ?? undefined,
    [ATTR.riskScore]: response.risk_score,
    [ATTR.approvalId]: response.approval_request_id,
    [ATTR.escalationId]: response.escalation_id,
  };
}

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
        return inRequestSpan(request, SPAN.evaluate, () => evaluateAction(deps, request.principal as Principal, parsed.data, request.id), () => ({
          attributes: { [ATTR.actionType]: parsed.data.action_type, ...genAiToolAttributes(parsed.data) },
          after: evaluationAttributes,
        }));
      },
    );
  }
}
