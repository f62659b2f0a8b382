/**
 * Group commit: concurrent callers' writes share one transaction. One transaction is in flight
 * at a time; whatever arrives meanwhile waits and goes into the next one, so a lone request is
 * written at once and a busy authority writes many per commit (one head lock, one commit, one
 * WAL flush for a whole batch of audit appends).
 *
 * A batch that fails is retried item by item, each in its own transaction, so one bad item (a
 * fact that cannot be stored, say) fails alone and the others still commit.
 *
 * @example
 *   const writer = new GroupCommit(db, (tx, items) => storeEvaluations(tx, items), { maxBatch: 128 });
 *   const outcome = await writer.submit(item); // resolves after the commit that holds it
 */
import type { Db, Queryable } from './db.js';

export type BatchWriter<Item, Outcome> = (tx: Queryable, items: Item[]) => Promise<Outcome[]>;

interface Waiting<Item, Outcome> {
  item: Item;
  resolve: (outcome: Outcome) => void;
  reject: (error: unknown) => void;
}

export class GroupCommit<Item, Outcome> {
  private readonly queue: Array<Waiting<Item, Outcome>> = [];
  private flushing = false;

  constructor(
    private readonly db: Db,
    private readonly write: BatchWriter<Item, Outcome>,
    private readonly options: { maxBatch: number },
  ) {}

  /** Resolves with the item's outcome once the transaction holding it has committed. */
  submit(item: Item): Promise<Outcome> {
    return new Promise<Outcome>((resolve, reject) => {
      this.queue.push({ item, resolve, reject });
      if (!this.flushing) void this.flush();
    });
  }

  private async flush(): Promise<void> {
    this.flushing = true;
    try {
      while (this.queue.length > 0) {
        const batch = this.queue.splice(0, this.options.maxBatch);
        try {
          const outcomes = await this.db.transaction((tx) => this.write(tx, batch.map((waiting) => waiting.item)));
          batch.forEach((waiting, index) => waiting.resolve(outcomes[index] as Outcome));
        } catch (error) {
          if (batch.length === 1) batch[0]?.reject(error);
          else await this.oneByOne(batch);
        }
      }
    } finally {
      this.flushing = false;
    }
  }

  private async oneByOne(batch: Array<Waiting<Item, Outcome>>): Promise<void> {
    for (const waiting of batch) {
      try {
        const [outcome] = await this.db.transaction((tx) => this.write(tx, [waiting.item]));
        waiting.resolve(outcome as Outcome);
      } catch (error) {
        waiting.reject(error);
      }
    }
  }
}
