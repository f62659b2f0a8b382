/**
 * What every evaluate front door does with a request (`POST /v1/evaluate` and its streaming
 * form): the body in any form as the evaluation to make, then the evaluate core inside the
 * request's span, whose attributes say what was decided.
 *
 * @example
 *   const response = await evaluateInSpan(deps, request, evaluationOf(request.body, false));
 */
import type { FastifyRequest } from 'fastify';
import { ATTR, genAiToolAttributes, SPAN, type SpanAttributes } from '../../shared/telemetry/attributes.js';
import { parseEvaluateRequest, type EvaluateResponse, type EvaluateWireRequest } from '../../shared/wire/evaluate.js';
import type { Principal } from '../auth/principal.js';
import { invalidRequest } from '../http/errors.js';
import { inRequestSpan } from '../http/tracing.js';
import { evaluateAction, type EvaluateDeps } from './evaluate.js';

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

/**
 * A request body in any form, as the evaluation to make: the caller's 400 before anything is
 * decided. With the constraint trace asked for, the evaluation is explained (the trace is that
 * explanation).
 */
export function evaluationOf(body: unknown, traced: boolean): EvaluateWireRequest {
  const parsed = parseEvaluateRequest(body);
  if (!parsed.success) throw invalidRequest(parsed.error);
  return traced ? Object.assign({}, parsed.data, { explain: true }) : parsed.data;
}

/** Evaluates in the request's span: the one path from a route to the evaluate core. */
export function evaluateInSpan(deps: EvaluateDeps, request: FastifyRequest, evaluation: EvaluateWireRequest): Promise<EvaluateResponse> {
  return inRequestSpan(request, SPAN.evaluate, () => evaluateAction(deps, request.principal as Principal, evaluation, request.id), () => ({
    attributes: { [ATTR.actionType]: evaluation.action_type, ...genAiToolAttributes(evaluation) },
    after: evaluationAttributes,
  }));
}
