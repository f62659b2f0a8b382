/**
 * Per-organization token buckets, kept in the shared store so every replica draws from one
 * bucket. Two buckets per organization: `evaluate` (flat, 100/min by default) and `api` (every
 * other endpoint, by plan tier, with a per-organization override). An organization is charged
 * only for requests that passed authentication and the route's permission check; everything
 * refused before that is charged to the client's address instead (`addresses`, in process).
 *
 * @example
 *   const limiter = new RateLimiter(store, config.rate_limits, clock);
 *   const decision = await limiter.take(org, 'evaluate');
 *   if (!decision.allowed) … decision.retryAfterMs …
 */
import type { SharedStore } from '../../shared/store/types.js';
import type { AuthorityConfig, BucketConfig } from '../config.js';
import type { Organization } from '../orgs/organizations.js';
import type { Clock } from '../time.js';
import { AddressLimiter, type RateDecision } from './address-limiter.js';

export type { RateDecision };

export type RateBucket = 'evaluate' | 'api';

export class RateLimiter {
  /** Unauthenticated, failed-authentication and unpermitted requests, per client address. */
  readonly addresses: AddressLimiter;

  constructor(
    private readonly store: SharedStore,
    private readonly config: AuthorityConfig['rate_limits'],
    private readonly clock: Clock,
  ) {
    this.addresses = new AddressLimiter(config.unauthenticated, clock);
  }

  bucketFor(org: Pick<Organization, 'id' | 'plan'>, bucket: RateBucket): BucketConfig {
    const override = this.config.organizations[org.id]?.[bucket];
    if (override) return override;
    return bucket === 'evaluate' ? this.config.evaluate : this.config.plans[org.plan];
  }

  async take(org: Pick<Organization, 'id' | 'plan'>, bucket: RateBucket): Promise<RateDecision> {
    const spec = this.bucketFor(org, bucket);
    const result = await this.store.takeToken(
      `ratelimit:{${org.id}}:${bucket}`,
      { capacity: spec.burst, refillPerMinute: spec.per_minute },
      this.clock.now(),
    );
    return { limit: spec.per_minute, ...result };
  }
}
