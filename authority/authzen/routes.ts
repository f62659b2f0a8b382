/**
 * The AuthZEN 1.0 facade (docs/api.md, "AuthZEN"):
 *
 *   POST /access/v1/evaluation           one access evaluation → {decision, context}
 *   POST /access/v1/evaluations          a batch → {evaluations: [...]}, or one evaluation when it
 *                                        lists none
 *   POST /access/v1/search/subject       the policy's actors that may do the action (search.ts)
 *   POST /access/v1/search/action        the actions the subject may do (search.ts)
 *   GET  /.well-known/authzen-configuration   the Policy Decision Point metadata
 *
 * The evaluation routes are evaluate's in every respect but the answer's shape and the permit:
 * scope `evaluate:write`, the organization's `evaluate` bucket (429 `unavailable` with
 * retry_after_ms), the bounded-input rules, and the error envelope for every refusal. A batch of
 * N entries draws N tokens (one per decision, as on evaluate), all before the first is decided, so
 * a batch is never cut short by the rate limit halfway. Bodies are validated by the route's schema
 * after the guard, so nothing about them is revealed to a caller who may not evaluate. A body that
 * is not JSON (or not sent as application/json) is 400 `invalid_request` here, as AuthZEN asks,
 * where the rest of the API answers 415.
 *
 * The metadata document holds URLs and nothing else, so, like /openapi.json, it is served without
 * a credential: discovery happens before a client holds one.
 *
 * @example
 *   authzenRoutes(app, { ...deps, writer, epochs, limiter }); // in buildAuthorityApp
 *   // curl -s $BASE/access/v1/evaluation -H "Authorization: Bearer $KEY" -H 'Content-Type: application/json' \
 *   //   -d '{"subject":{"type":"service","id":"finance-bot"},"action":{"name":"payments.wire"},"resource":{"type":"account","id":"OPS-001"}}'
 */
import type { FastifyError, FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import type { ZodTypeProvider } from 'fastify-type-provider-zod';
import { z } from 'zod';
import { CountersignError } from '../../shared/errors.js';
import { AuthzenActionSearchRequest, AuthzenActionSearchResponse, AuthzenSubjectSearchRequest, AuthzenSubjectSearchResponse } from '../../shared/wire/authzen-search.js';
import {
  AuthzenConfiguration,
  AuthzenDecision,
  AuthzenEvaluationRequest,
  AuthzenEvaluationsRequest,
  AuthzenEvaluationsResponse,
} from '../../shared/wire/authzen.js';
import type { Principal } from '../auth/principal.js';
import type { EvaluateDeps } from '../evaluate/evaluate.js';
import { answerError } from '../http/errors.js';
import { rateLimitExceeded, setRateLimitHeaders } from '../http/guard.js';
import { configuredOrigin, publicOrigin } from '../http/public-origin.js';
import { EVALUATE_LIMIT } from '../http/route-access.js';
import type { RateLimiter } from '../ratelimit/limiter.js';
import { actionNameMapping } from './action-names.js';
import { decideAccess, decideEvaluations, type AuthzenDecideDeps } from './decide.js';
import { planEvaluations } from './mapping.js';
import { searchActions, searchSubjects } from './search.js';

export const AUTHZEN_EVALUATION_PATH = '/access/v1/evaluation';
export const AUTHZEN_EVALUATIONS_PATH = '/access/v1/evaluations';
export const AUTHZEN_SUBJECT_SEARCH_PATH = '/access/v1/search/subject';
export const AUTHZEN_ACTION_SEARCH_PATH = '/access/v1/search/action';
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

/** AuthZEN answers a body that is not JSON, whatever its Content-Type says, with 400. */
function notJsonIsBadRequest(mapped: CountersignError): CountersignError {
  if (mapped.code !== 'unsupported_media_type') return mapped;
  return new CountersignError('invalid_request', 'AuthZEN request bodies must be JSON, sent as Content-Type: application/json');
}

function authzenErrorHandler(error: FastifyError, request: FastifyRequest, reply: FastifyReply): FastifyReply {
  return answerError(error, request, reply, notJsonIsBadRequest);
}

export function authzenRoutes(app: FastifyInstance, deps: AuthzenDeps): void {
  const routes = app.withTypeProvider<ZodTypeProvider>();
  const decideDeps: AuthzenDecideDeps & AuthzenDeps = Object.assign({}, deps, { names: actionNameMapping(deps.config.authzen) });
  const evaluateAccess = { access: 'evaluate:write', rateLimit: EVALUATE_LIMIT } as const;

  routes.post(
    AUTHZEN_EVALUATION_PATH,
    { config: evaluateAccess, errorHandler: authzenErrorHandler, schema: { body: AuthzenEvaluationRequest, response: { 200: AuthzenDecision } } },
    async (request) => decideAccess(decideDeps, request.principal as Principal, request.body, request.id),
  );

  routes.post(
    AUTHZEN_EVALUATIONS_PATH,
    {
      config: evaluateAccess,
      errorHandler: authzenErrorHandler,
      schema: { body: AuthzenEvaluationsRequest, response: { 200: z.union([AuthzenEvaluationsResponse, AuthzenDecision]) } },
    },
    async (request, reply) => {
      const principal = request.principal as Principal;
      const plan = planEvaluations(request.body);
      if (plan.form === 'single') return decideAccess(decideDeps, principal, plan.evaluation, request.id);
      // The guard drew the first entry's token.
      await drawEvaluateTokens(deps, principal, reply, plan.entries.length - 1);
      return { evaluations: await decideEvaluations(decideDeps, principal, plan, request.id) };
    },
  );

  routes.post(
    AUTHZEN_SUBJECT_SEARCH_PATH,
    { config: evaluateAccess, errorHandler: authzenErrorHandler, schema: { body: AuthzenSubjectSearchRequest, response: { 200: AuthzenSubjectSearchResponse } } },
    async (request) => searchSubjects(decideDeps, request.principal as Principal, request.body),
  );

  routes.post(
    AUTHZEN_ACTION_SEARCH_PATH,
    { config: evaluateAccess, errorHandler: authzenErrorHandler, schema: { body: AuthzenActionSearchRequest, response: { 200: AuthzenActionSearchResponse } } },
    async (request) => searchActions(decideDeps, request.principal as Principal, request.body),
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
        search_subject_endpoint: `${base}${AUTHZEN_SUBJECT_SEARCH_PATH}`,
        search_action_endpoint: `${base}${AUTHZEN_ACTION_SEARCH_PATH}`,
      };
    },
  );
}
