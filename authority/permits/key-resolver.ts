/**
 * The authority's own view of the published permit keys, for POST /v1-verify-permit: read from
 * the database, cached briefly, re-read on an unknown kid (at most once a second), so a key
 * rotated in by another replica is found without a restart.
 */
import { staticKeyResolver } from '../../shared/permits/static-keys.js';
import type { PermitKeyResolver } from '../../shared/permits/verify.js';
import type { SigningKeys } from '../signing/keys.js';
import type { Clock } from '../time.js';

const CACHE_MS = 10_000;
const REFRESH_COOLDOWN_MS = 1_000;

export class PublishedKeyResolver implements PermitKeyResolver {
  private resolver: PermitKeyResolver | null = null;
  private loadedAt = -Infinity;

  constructor(
    private readonly keys: SigningKeys,
    private readonly clock: Clock,
  ) {}

  async resolve(kid: string) {
    const now = this.clock.now();
    if (!this.resolver || now - this.loadedAt > CACHE_MS) await this.reload(now);
    const key = await this.resolver!.resolve(kid);
    if (key !== null || now - this.loadedAt < REFRESH_COOLDOWN_MS) return key;
    await this.reload(now);
    return this.resolver!.resolve(kid);
  }

  /** The JWKS as served at GET /v1/permit-keys. */
  async jwks(): Promise<{ keys: Array<Record<string, unknown>> }> {
    return { keys: (await this.keys.published('permit')).map((record) => ({ ...record.publicJwk })) };
  }

  private async reload(now: number): Promise<void> {
    this.resolver = staticKeyResolver((await this.jwks()) as never);
    this.loadedAt = now;
  }
}
