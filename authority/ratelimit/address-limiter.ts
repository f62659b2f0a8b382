/**
 * Token buckets per client address, for requests that no organization can be charged for: no
 * credential, a credential that failed authentication, or one that lacks the route's permission.
 * They are kept in this process only (a bounded LRU), not in the shared store: they guard this
 * process's work (a credential lookup, a signature check), they must cost less than what they
 * protect, and a round trip to Redis per failed request would not. With N replicas an address
 * gets N times the burst at most.
 *
 * IPv6 clients are keyed by their /64, the smallest block a single subscriber is usually given, so
 * rotating through one's own /64 does not yield fresh buckets; IPv4-mapped IPv6 counts as IPv4.
 *
 * @example
 *   const addresses = new AddressLimiter({ per_minute: 60, burst: 120 }, clock);
 *   addresses.refusal(request.ip); // null while the address has a token left (nothing is taken)
 *   addresses.take(request.ip); // after a failed authentication
 */
import { isIPv4 } from 'node:net';
import ipaddr from 'ipaddr.js';
import { LRUCache } from 'lru-cache';
import { bucketResult, takeFromBucket, type TokenBucketState } from '../../shared/store/token-bucket.js';
import type { TokenBucketResult, TokenBucketSpec } from '../../shared/store/types.js';
import type { BucketConfig } from '../config.js';
import type { Clock } from '../time.js';

/** A bucket's answer, with the limit the X-RateLimit-* headers name (both limiters give one). */
export interface RateDecision extends TokenBucketResult {
  /** Sustained requests per minute: the X-RateLimit-Limit header. */
  limit: number;
}

/** Addresses remembered at most. An entry is ~200 bytes: 50,000 is ~10 MB. */
const DEFAULT_MAX_ADDRESSES = 50_000;

/** The bucket key of a client address: IPv4 as is, IPv6 by its /64, anything else verbatim. */
export function addressKey(ip: string): string {
  // A dotted quad (what a socket gives for an IPv4 client) is its own key: ipaddr.js would parse
  // it and write the same text back, on every request.
  if (isIPv4(ip)) return ip;
  if (!ipaddr.isValid(ip)) return `raw:${ip}`;
  const parsed = ipaddr.process(ip);
  if (parsed.kind() === 'ipv4') return parsed.toString();
  const parts = (parsed as ipaddr.IPv6).parts.slice(0, 4).map((part) => part.toString(16));
  return `${parts.join(':')}::/64`;
}

export class AddressLimiter {
  readonly #buckets: LRUCache<string, TokenBucketState>;
  readonly #spec: TokenBucketSpec;
  readonly #perMinute: number;

  constructor(
    config: BucketConfig,
    private readonly clock: Clock,
    max = DEFAULT_MAX_ADDRESSES,
  ) {
    // Evicting the least recently used address forgets a bucket that has had the longest to
    // refill; an address being refused right now is used often and stays.
    this.#buckets = new LRUCache({ max });
    this.#spec = { capacity: config.burst, refillPerMinute: config.per_minute };
    this.#perMinute = config.per_minute;
  }

  /** The refusal `ip` would get now, without taking a token: null while it has one left. */
  refusal(ip: string): RateDecision | null {
    // No address has failed lately: every bucket is full (burst >= 1), so nobody is refused.
    if (this.#buckets.size === 0) return null;
    const step = takeFromBucket(this.#buckets.get(addressKey(ip)), this.#spec, this.clock.now());
    return step.allowed ? null : { limit: this.#perMinute, ...bucketResult(step, this.#spec) };
  }

  /** Takes a token from `ip`'s bucket: one failed request. */
  take(ip: string): RateDecision {
    const key = addressKey(ip);
    const step = takeFromBucket(this.#buckets.get(key), this.#spec, this.clock.now());
    this.#buckets.set(key, step.state);
    return { limit: this.#perMinute, ...bucketResult(step, this.#spec) };
  }
}
