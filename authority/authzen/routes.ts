/**
 * The AuthZEN 1.0 facade (docs/api.md, "AuthZEN"):
 *
 *   POST /access/v1/evaluation           one access evaluation → {decision, context}
 *   POST /access/v1/evaluations          a batch → {evaluations: [...]}, or one evaluation when it
 *                                        lists none
 *   GET  /.well-known/authzen-configuration   the Policy Decision Point metadata
 *
 * The two evaluation routes are evaluate's in every respect but the answer's shape and the
 * permit: scope `evaluate:write`, the organization's `evaluate` bucket (429 `unavailable` with
 * retry_after_ms), the bounded-input rules, and the error envelope for every refusal. A batch of
 * N evaluations draws N tokens, all before the first is decided, so a batch is never cut short by
 * the rate limit halfway. Bodies are validated by the route's schema (400 with the path of each
 * bad field) after the guard, so nothing about them is revealed to a caller who may not evaluate.
 *
 * The metadata document holds URLs and nothing else, so, like /openapi.json, it is served without
 * a credential: discovery happens before a client holds one.
 *
 * @example
 *   authzenRoutes(app, { ...deps, writer, epochs, limiter }); // in buildAuthorityApp
 *   // curl -s $BASE/access/v1/evaluation -H "Authorization: Bearer $KEY" -H 'Content-Type: application/json' \
 *   //   -d '{"subject":{"type":"service","id":"finance-bot"},"action":{"name":"payments.wire"},"resource":{"type":"account","id":"OPS-001"}}'
 */
import type { FastifyInstance, FastifyReply } from 'fastify';
import type { ZodTypeProvider } from 'fastify-type-provider-zod';
import { z } from 'zod';
import { CountersignError } from '../../shared/errors.js';
import {
  AuthzenConfiguration,
  AuthzenDecision,
  AuthzenEvaluationRequest,
  AuthzenEvaluationsRequest,
  AuthzenEvaluationsResponse,
} from '../../shared/wire/authzen.js';
import type { Principal } from '../auth/principal.js';
import type { EvaluateDeps } from '../evaluate/evaluate.js';
import { rateLimitExceeded, setRateLimitHeaders } from '../http/guard.js';
import { configuredOrigin, publicOrigin } from '../http/public-origin.js';
import { EVALUATE_LIMIT } from '../http/route-access.js';
import type { RateLimiter } from '../ratelimit/limiter.js';
import { decideAccess, decideEvaluations } from './decide.js';
import { planEvaluations } from './mapping.js';

export const AUTHZEN_EVALUATION_PATH = '/access/v1/evaluation';
export const AUTHZEN_EVALUATIONS_PATH = '/access/v1/evaluations';
export const AUTHZEN_CONFIGURATION_PATH = '/.well-known/authzen-configuration';

export interface AuthzenDeps extends EvaluateDeps {
  /** For the tokens a batch draws beyond the one the guard took. */
  limiter: RateLimiter;
}

/** Draws `count` more tokens from the organization's evaluate bucket; 429 once one is refused. */
async function drawEvaluateTokens(deps: AuthzenDeps, principal: Principal, reply: FastifyReply, count: number): Promise<void> {
  for (let drawn = 0; drawn < count; drawn++) {
    let decision;
    try {
      decision = await deps.limiter.take(principal.org, EVALUATE_LIMIT.bucket);
    } catch (error) {
      throw new CountersignError('service_unavailable', 'the rate-limit store is not reachable', { cause: error });
    }
    setRateLimitHeaders(reply, decision);
    if (!decision.allowed) throw rateLimitExceeded(decision, EVALUATE_LIMIT, deps.metrics);
  }
}

export function authzenRoutes(app: FastifyInstance, deps: AuthzenDeps): void {
  const routes = app.withTypeProvider<ZodTypeProvider>();
  const evaluateAccess = { access: 'evaluate:write', rateLimit: EVALUATE_LIMIT } as const;

  routes.post(
    AUTHZEN_EVALUATION_PATH,
    { config: evaluateAccess, schema: { body: AuthzenEvaluationRequest, response: { 200: AuthzenDecision } } },
    async (request) => decideAccess(deps, request.principal as Principal, request.body, request.id),
  );

  routes.post(
    AUTHZEN_EVALUATIONS_PATH,
    { config: evaluateAccess, schema: { body: AuthzenEvaluationsRequest, response: { 200: z.union([AuthzenEvaluationsResponse, AuthzenDecision]) } } },
    async (request, reply) => {
      const principal = request.principal as Principal;
      const plan = planEvaluations(request.body);
      if (plan.form === 'single') return decideAccess(deps, principal, plan.evaluation, request.id);
      // The guard drew the first entry's token.
      await drawEvaluateTokens(deps, principal, reply, plan.evaluations.length - 1);
      return { evaluations: await decideEvaluations(deps, principal, plan, request.id) };
    },
  );

  routes.get(
    AUTHZEN_CONFIGURATION_PATH,
    { config: { access: 'public' }, schema: { response: { 200: AuthzenConfiguration } } },
    async (request, reply) => {
      const base = publicOrigin(deps.config, request);
      // Built from the request's Host unless configured: no shared cache may hand one caller's
      // answer to another.
      reply.header('cache-control', configuredOrigin(deps.config) === null ? 'no-store' : 'public, max-age=3600');
      return {
        policy_decision_point: base,
        access_evaluation_endpoint: `${base}${AUTHZEN_EVALUATION_PATH}`,
        access_evaluations_endpoint: `${base}${AUTHZEN_EVALUATIONS_PATH}`,
      };
    },
  );
}
