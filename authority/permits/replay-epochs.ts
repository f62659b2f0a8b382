/**
 * The replay store's epoch per organization, as the authority sees it before it issues permits.
 *
 * Gates refuse a permit issued before the store's current epoch began (`REPLAY_STATE_RESET`),
 * because a store that lost its state may have lost that permit's consumption. So the epoch must
 * exist before a permit is issued; else the first consume after issuance would create it and
 * fence the very permit it checks. `ensure` creates it when missing, and asks again at most every
 * `recheckMs`, so that after a loss the authority's new permits follow the new epoch within that
 * long (permits issued in between are refused by the gates: fail closed, and the caller evaluates
 * again). A new epoch is logged: it means the store lost its state.
 *
 * A permit signed after `ensure` resolved was issued after the epoch began, whatever the clocks
 * say; so its `iat_ms` is at least the epoch (an authority clock behind Redis's would otherwise date
 * it before the epoch, and every gate would refuse it).
 *
 * @example
 *   const epochs = new ReplayEpochs(store, logger);
 *   const issuedAtMs = Math.max(clock.now(), await epochs.ensure(org.id)); // before signing a permit for org
 */
import type { Logger } from 'pino';
import { replayEpochKey } from '../../shared/permits/store-keys.js';
import type { SharedStore } from '../../shared/store/types.js';

export interface ReplayEpochsOptions {
  /** How long a known epoch is trusted before it is read again. Default 5 s. */
  recheckMs?: number;
  /** Called when an organization's epoch changed: the store lost its state. */
  onReset?: (orgId: string) => void;
  now?: () => number;
}

export class ReplayEpochs {
  readonly #store: Pick<SharedStore, 'ensureEpoch'>;
  readonly #logger: Pick<Logger, 'warn'>;
  readonly #recheckMs: number;
  readonly #onReset: (orgId: string) => void;
  readonly #now: () => number;
  readonly #known = new Map<string, { epochMs: number; checkedAtMs: number }>();
  /** One read per organization at a time, however many evaluations wait for it. */
  readonly #pending = new Map<string, Promise<number>>();

  constructor(store: Pick<SharedStore, 'ensureEpoch'>, logger: Pick<Logger, 'warn'>, options: ReplayEpochsOptions = {}) {
    this.#store = store;
    this.#logger = logger;
    this.#recheckMs = options.recheckMs ?? 5_000;
    this.#onReset = options.onReset ?? (() => undefined);
    this.#now = options.now ?? Date.now;
  }

  /** The organization's epoch (ms), once it exists; rejects when the store cannot be reached. */
  ensure(orgId: string): Promise<number> {
    const known = this.#known.get(orgId);
    if (known && this.#now() - known.checkedAtMs < this.#recheckMs) return Promise.resolve(known.epochMs);
    let pending = this.#pending.get(orgId);
    if (!pending) {
      pending = this.#read(orgId, known?.epochMs).finally(() => this.#pending.delete(orgId));
      this.#pending.set(orgId, pending);
    }
    return pending;
  }

  async #read(orgId: string, previousMs: number | undefined): Promise<number> {
    const epochMs = await this.#store.ensureEpoch(replayEpochKey(orgId));
    if (previousMs !== undefined && epochMs !== previousMs) {
      this.#logger.warn(
        { organization_id: orgId, previous_epoch: new Date(previousMs).toISOString(), epoch: new Date(epochMs).toISOString() },
        'the replay store lost its state (new epoch): permits issued before the new epoch are refused until they expire',
      );
      this.#onReset(orgId);
    }
    this.#known.set(orgId, { epochMs, checkedAtMs: this.#now() });
    return epochMs;
  }
}
