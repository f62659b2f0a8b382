/**
 * The guard in front of every non-public route: authenticate (401), draw from the
 * organization's rate-limit bucket (429, with X-RateLimit-* on every answer), then check the
 * route's permission (403). It runs before the body is parsed or validated, so nothing about a
 * route's input is revealed to a caller who may not use it.
 */
import type { FastifyInstance } from 'fastify';
import { CountersignError } from '../../shared/errors.js';
import type { Authenticator } from '../auth/authenticate.js';
import type { AuthorityMetrics } from '../metrics.js';
import type { RateLimiter } from '../ratelimit/limiter.js';
import { DEFAULT_LIMIT } from './route-access.js';

export interface GuardOptions {
  authenticate: Authenticator;
  limiter: RateLimiter;
  metrics: AuthorityMetrics;
}

export function installGuard(app: FastifyInstance, { authenticate, limiter, metrics }: GuardOptions): void {
  app.decorateRequest('principal', null);

  app.addHook('onRoute', (route) => {
    if (route.config?.access === undefined) {
      throw new Error(`route ${String(route.method)} ${route.url} must declare config.access`);
    }
  });

  app.addHook('onRequest', async (request, reply) => {
    if (request.is404) return;
    const { access, rateLimit = DEFAULT_LIMIT } = request.routeOptions.config;
    if (access === 'public') return;

    const principal = await authenticate({
      headers: request.headers,
      ip: request.ip,
      onDeprecatedHeader: () => void reply.header('deprecation', 'true'),
    });
    request.principal = principal;

    let decision;
    try {
      decision = await limiter.take(principal.org, rateLimit.bucket);
    } catch (error) {
      throw new CountersignError('service_unavailable', 'the rate-limit store is not reachable', { cause: error });
    }
    reply.header('x-ratelimit-limit', String(decision.limit));
    reply.header('x-ratelimit-remaining', String(decision.remaining));
    reply.header('x-ratelimit-reset', String(Math.ceil(decision.resetAtMs / 1000)));
    if (!decision.allowed) {
      metrics.rateLimited.inc({ bucket: rateLimit.bucket });
      const seconds = String(Math.max(1, Math.ceil(decision.retryAfterMs / 1000)));
      throw new CountersignError(rateLimit.exceeded, `rate limit of ${decision.limit} requests per minute exceeded`, {
        retryAfterMs: rateLimit.exceeded === 'unavailable' ? decision.retryAfterMs : undefined,
        headers: { 'retry-after': seconds },
      });
    }

    // `access` is always declared (see onRoute above); an undeclared one would be refused here.
    if (access === 'authenticated') return;
    const anyOf = access === undefined ? [] : typeof access === 'string' ? [access] : access;
    if (!anyOf.some((permission) => principal.permissions.has(permission))) {
      throw new CountersignError('forbidden', `this credential lacks the permission ${anyOf.join(' or ') || '(undeclared)'}`);
    }
  });
}
