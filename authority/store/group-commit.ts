/**
 * Group commit: concurrent callers' writes share transactions. Up to `maxInFlight` transactions
 * run at once, each on its own connection; whatever arrives while all of them are busy waits and
 * goes into the next one. So a lone request is written at once, and a busy authority writes many
 * per commit (one head lock, one commit, one WAL flush for a whole batch of audit appends) while
 * the next batch already inserts its rows: an audit append holds its organizations' chain heads
 * only from the lock to the commit, and the work before the lock overlaps.
 *
 * A batch that fails is retried item by item, each in its own transaction, so one bad item (a
 * fact that cannot be stored, say) fails alone and the others still commit.
 *
 * @example
 *   const writer = new GroupCommit(db, storeEvaluations, { maxBatch: 128, maxInFlight: 3, transaction: false });
 *   const outcome = await writer.submit(item); // resolves after the commit that holds it
 */
import { ATTR, SPAN } from '../../shared/telemetry/attributes.js';
import { tracing, type SpanRef } from '../../shared/telemetry/index.js';
import type { Db, Queryable } from './db.js';

/** Writes a batch with `tx`: a transaction's connection, or (with `transaction: false`) the database itself. */
export type BatchWriter<Item, Outcome> = (tx: Queryable, items: Item[]) => Promise<Outcome[]>;

export interface GroupCommitOptions {
  /** Most items in one transaction. */
  maxBatch: number;
  /** Most transactions at once; keep it below the database pool size. Default 1. */
  maxInFlight?: number;
  /**
   * Wrap each batch in a transaction (default true). False when `write` issues one statement,
   * which is a transaction of its own: BEGIN and COMMIT would be two more round trips.
   */
  transaction?: boolean;
}

interface Waiting<Item, Outcome> {
  item: Item;
  resolve: (outcome: Outcome) => void;
  reject: (error: unknown) => void;
  /** Tracing on: the span that submitted the item (the request's evaluate span), to link to its batch. */
  origin: SpanRef | undefined;
}

export class GroupCommit<Item, Outcome> {
  private readonly queue: Array<Waiting<Item, Outcome>> = [];
  private readonly maxInFlight: number;
  private inFlight = 0;

  constructor(
    private readonly db: Db,
    private readonly write: BatchWriter<Item, Outcome>,
    private readonly options: GroupCommitOptions,
  ) {
    this.maxInFlight = options.maxInFlight ?? 1;
    if (!Number.isInteger(this.maxInFlight) || this.maxInFlight < 1) throw new RangeError('maxInFlight must be a positive integer');
  }

  /** Resolves with the item's outcome once the transaction holding it has committed. */
  submit(item: Item): Promise<Outcome> {
    const traced = tracing;
    const origin = traced === null ? undefined : traced.activeSpan();
    return new Promise<Outcome>((resolve, reject) => {
      this.queue.push({ item, resolve, reject, origin });
      this.startBatches();
    });
  }

  private startBatches(): void {
    while (this.inFlight < this.maxInFlight && this.queue.length > 0) {
      const batch = this.queue.splice(0, this.options.maxBatch);
      this.inFlight++;
      let released = false;
      const release = (): void => {
        if (released) return;
        released = true;
        this.inFlight--;
        this.startBatches();
      };
      void this.commit(batch, release).finally(release);
    }
  }

  private run(items: Item[]): Promise<Outcome[]> {
    return this.options.transaction === false ? this.write(this.db, items) : this.db.transaction((tx) => this.write(tx, items));
  }

  /**
   * Tracing on: one span per batch, a trace of its own (one batch serves many requests' traces),
   * linked to the span of each request it serves, and each of those linked back to it. A batch
   * whose requests are all unsampled gets none.
   */
  private commit(batch: Array<Waiting<Item, Outcome>>, release: () => void): Promise<boolean> {
    const traced = tracing;
    if (traced === null || batch.every((waiting) => waiting.origin === undefined)) return this.commitBatch(batch, release);
    return traced.inSpan(SPAN.groupCommit, () => this.commitBatch(batch, release), {
      root: true,
      links: batch.map((waiting) => waiting.origin),
      attributes: { [ATTR.batchSize]: batch.length },
      after: (retried) => (retried ? { [ATTR.batchRetriedOneByOne]: true } : undefined),
    });
  }

  /**
   * Writes the batch; true when it failed as a whole and its items were written one by one. Once
   * the batch has committed, `release` frees its slot before the callers are resumed: the next
   * batch is on its way to the database while this one's callers build their answers.
   */
  private async commitBatch(batch: Array<Waiting<Item, Outcome>>, release: () => void): Promise<boolean> {
    let outcomes: Outcome[];
    try {
      outcomes = await this.run(batch.map((waiting) => waiting.item));
    } catch (error) {
      if (batch.length === 1) {
        batch[0]?.reject(error);
        return false;
      }
      await this.oneByOne(batch);
      return true;
    }
    // Outside the try: whatever starting the next batch throws must not retry this committed one.
    release();
    batch.forEach((waiting, index) => waiting.resolve(outcomes[index] as Outcome));
    return false;
  }

  private async oneByOne(batch: Array<Waiting<Item, Outcome>>): Promise<void> {
    for (const waiting of batch) {
      try {
        const [outcome] = await this.run([waiting.item]);
        waiting.resolve(outcome as Outcome);
      } catch (error) {
        waiting.reject(error);
      }
    }
  }
}
