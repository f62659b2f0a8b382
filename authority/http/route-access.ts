/**
 * What each route declares about who may call it and which rate-limit bucket it draws from.
 * Every route must declare `access` (the guard refuses to register one that doesn't), so no
 * endpoint is ever open by omission.
 *
 * @example
 *   app.post('/v1/api-keys', { config: { access: 'keys:write' } }, handler);
 *   app.post('/v1/evaluate', { config: { access: 'evaluate:write', rateLimit: EVALUATE_LIMIT } }, handler);
 */
import type { Scope } from '../../shared/wire/scopes.js';
import type { Principal } from '../auth/principal.js';
import type { RateBucket } from '../ratelimit/limiter.js';

/**
 * `public`: no credential (health only). `authenticated`: any valid credential. A scope: that
 * permission. A list of scopes: any one of them (reads that a write permission also grants).
 */
export type Access = 'public' | 'authenticated' | Scope | readonly Scope[];

export interface RateLimitPolicy {
  bucket: RateBucket;
  /** The 429 code: `unavailable` (with retry_after_ms) on evaluate and verify-permit, else `rate_limited`. */
  exceeded: 'unavailable' | 'rate_limited';
}

export const DEFAULT_LIMIT: RateLimitPolicy = { bucket: 'api', exceeded: 'rate_limited' };
export const EVALUATE_LIMIT: RateLimitPolicy = { bucket: 'evaluate', exceeded: 'unavailable' };
export const VERIFY_LIMIT: RateLimitPolicy = { bucket: 'api', exceeded: 'unavailable' };

declare module 'fastify' {
  interface FastifyContextConfig {
    access?: Access;
    rateLimit?: RateLimitPolicy;
  }
  interface FastifyRequest {
    /** Set by the guard on every non-public route; null only on public routes and 404s. */
    principal: Principal | null;
  }
}
