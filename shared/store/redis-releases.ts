/**
 * Undos the store still owes. A consume that did not count (its caller was answered 503) must
 * leave neither its marker nor its `permit.verified` record; when the undo itself cannot reach
 * Redis (the connection dropped mid-consume, as in a failover), it is kept here and sent again,
 * every half second and at each reconnection, until Redis has run it: on the old primary if it
 * is back, or on the new one, which holds the consume if it was replicated before the change.
 * An undo counts once it is as durable as the consume was meant to be (the store waits for the
 * same acknowledgement after it): one the old primary took but no replica did would be lost in a
 * failover. The release script only removes the marker that carries the consume's nonce, so running
 * it late or twice never undoes another consume.
 *
 * @example
 *   const owed = new PendingReleases((release) => runReleaseScript(client, release));
 *   owed.add({ keys: [marker, stream], nonce });
 *   owed.size; // 1 until Redis has run it
 */

export interface PendingRelease {
  /** The marker, then the record stream when the consume appended a record. */
  keys: string[];
  nonce: string;
}

/** Beyond this many owed undos, the oldest are given up (counted in `givenUp`). */
const MAX_PENDING = 10_000;
const RETRY_INTERVAL_MS = 500;

export class PendingReleases {
  readonly #send: (release: PendingRelease) => Promise<unknown>;
  #pending: PendingRelease[] = [];
  #timer: NodeJS.Timeout | undefined;
  #flushing = false;
  /** Of the owed undos, how many a flush is sending now. */
  #sending = 0;
  /** Undos dropped past the bound: their permits may stay marked as used. */
  givenUp = 0;

  constructor(send: (release: PendingRelease) => Promise<unknown>) {
    this.#send = send;
  }

  /** Undos owed, those being sent again included. */
  get size(): number {
    return this.#pending.length + this.#sending;
  }

  add(release: PendingRelease): void {
    this.#pending.push(release);
    if (this.#pending.length > MAX_PENDING) {
      this.#pending.shift();
      this.givenUp++;
    }
    this.#timer ??= setInterval(() => void this.flush(), RETRY_INTERVAL_MS).unref();
  }

  /** Sends every owed undo once; those Redis did not run stay owed. */
  async flush(): Promise<void> {
    if (this.#flushing || this.#pending.length === 0) return;
    this.#flushing = true;
    try {
      const batch = this.#pending;
      this.#pending = [];
      this.#sending = batch.length;
      const outcomes = await Promise.allSettled(batch.map((release) => this.#send(release)));
      const failed = batch.filter((_, i) => outcomes[i]!.status === 'rejected');
      this.#pending = [...failed, ...this.#pending];
    } finally {
      this.#sending = 0;
      this.#flushing = false;
      if (this.#pending.length === 0) this.stop();
    }
  }

  stop(): void {
    clearInterval(this.#timer);
    this.#timer = undefined;
  }
}
