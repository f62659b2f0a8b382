/**
 * The guard in front of every non-public route, in this order:
 *
 * 1. Authenticate (401, or 403 for a key used outside its allowlist).
 * 2. Check the route's permission (403).
 * 3. Draw from the organization's rate-limit bucket (429, X-RateLimit-* on every answer from here).
 *
 * The organization is charged only for requests it is answerable for: a key lacking a scope must
 * not drain the bucket its organization's other keys live on. Everything refused at 1 or 2 is
 * charged to the client's address instead (`limiter.addresses`, in process); an address out of
 * tokens gets 429 `rate_limited` for such requests, and before its credential costs a lookup.
 *
 * It runs before the body is parsed or validated, so nothing about a route's input is revealed to
 * a caller who may not use it.
 */
import type { FastifyInstance, FastifyReply } from 'fastify';
import { CountersignError } from '../../shared/errors.js';
import type { Authenticator } from '../auth/authenticate.js';
import type { AuthorityMetrics } from '../metrics.js';
import type { RateDecision, RateLimiter } from '../ratelimit/limiter.js';
import { DEFAULT_LIMIT, type RateLimitPolicy } from './route-access.js';

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

  const refuseAddress = (decision: RateDecision): CountersignError => {
    metrics.rateLimited.inc({ bucket: 'address' });
    return new CountersignError('rate_limited', `too many failed or unauthenticated requests from this address (${decision.limit} per minute)`, {
      headers: { 'retry-after': String(Math.max(1, Math.ceil(decision.retryAfterMs / 1000))) },
    });
  };

  /** Charges a refusal to the address: the refusal itself, or 429 once the address has no token left. */
  const chargeAddress = (ip: string, refusal: unknown): unknown => {
    const decision = limiter.addresses.take(ip);
    return decision.allowed ? refusal : refuseAddress(decision);
  };

  app.addHook('onRequest', async (request, reply) => {
    if (request.is404) return;
    const { access, rateLimit = DEFAULT_LIMIT } = request.routeOptions.config;
    if (access === 'public') return;

    // Read once, not taken: only a failure takes a token. Null while the address may still fail.
    const over = limiter.addresses.refusal(request.ip);
    let principal;
    try {
      principal = await authenticate({
        headers: request.headers,
        ip: request.ip,
        method: request.method,
        onDeprecatedHeader: () => void reply.header('deprecation', 'true'),
        beforeLookup: over === null ? undefined : () => {
          throw refuseAddress(over);
        },
      });
    } catch (error) {
      // A refused credential is the address's doing; an outage (503 from the JWKS) is not.
      if (error instanceof CountersignError && (error.code === 'unauthorized' || error.code === 'forbidden')) {
        throw chargeAddress(request.ip, error);
      }
      throw error;
    }
    request.principal = principal;

    // `access` is always declared (see onRoute above); an undeclared one would be refused here.
    if (access !== 'authenticated') {
      const anyOf = access === undefined ? [] : typeof access === 'string' ? [access] : access;
      if (!anyOf.some((permission) => principal.permissions.has(permission))) {
        throw chargeAddress(
          request.ip,
          new CountersignError('forbidden', `this credential lacks the permission ${anyOf.join(' or ') || '(undeclared)'}`),
        );
      }
    }

    let decision;
    try {
      decision = await limiter.take(principal.org, rateLimit.bucket);
    } catch (error) {
      throw new CountersignError('service_unavailable', 'the rate-limit store is not reachable', { cause: error });
    }
    setRateLimitHeaders(reply, decision);
    if (!decision.allowed) throw rateLimitExceeded(decision, rateLimit, metrics);
  });
}

/** `X-RateLimit-Limit/Remaining/Reset` from the latest draw on the organization's bucket. */
export function setRateLimitHeaders(reply: FastifyReply, decision: RateDecision): void {
  reply.header('x-ratelimit-limit', String(decision.limit));
  reply.header('x-ratelimit-remaining', String(decision.remaining));
  reply.header('x-ratelimit-reset', String(Math.ceil(decision.resetAtMs / 1000)));
}

/**
 * The 429 of an organization's empty bucket (counted): the route's code, `retry_after_ms` with
 * `unavailable`, and `Retry-After`. Also for routes that draw more than the guard's one token (a
 * batch of AuthZEN evaluations draws one per evaluation).
 */
export function rateLimitExceeded(decision: RateDecision, rateLimit: RateLimitPolicy, metrics: AuthorityMetrics): CountersignError {
  metrics.rateLimited.inc({ bucket: rateLimit.bucket });
  const seconds = String(Math.max(1, Math.ceil(decision.retryAfterMs / 1000)));
  return new CountersignError(rateLimit.exceeded, `rate limit of ${decision.limit} requests per minute exceeded`, {
    retryAfterMs: rateLimit.exceeded === 'unavailable' ? decision.retryAfterMs : undefined,
    headers: { 'retry-after': seconds },
  });
}
