/**
 * How the Redis store talks to its client: every call waits for the connection and completes
 * within its timeout, waiting included, or rejects with a `StoreError`; nothing is queued for a
 * Redis that is not there. The commands of one round of I/O callbacks leave in one write.
 *
 * @example
 *   const connection = new RedisConnection(createRedisClient(topology, timeouts), { onReady: () => forgetClock() });
 *   const exists = await connection.run(1000, (client) => client.exists('countersign:revoked:abc')); // or STORE_UNAVAILABLE
 *   await connection.close();
 */
import type { RedisClient } from './redis-topology.js';
import { abandonedError, StoreError } from './store-errors.js';

export interface RedisConnectionOptions {
  /** Called on every (re)connection: it may lead to another server (a failover). */
  onReady?: () => void;
}

export class RedisConnection<Client extends RedisClient> {
  readonly client: Client;
  #closed = false;
  /** Why the last connection attempt failed; the cause of STORE_UNAVAILABLE rejections. */
  #lastError: Error | undefined;
  /** Settles on the next 'ready' (or on close); shared so waiters add no listeners each. */
  #readySignal: { promise: Promise<void>; resolve: () => void } | undefined;
  /** The connection's socket is corked until the next setImmediate (#coalesceWrites). */
  #corked = false;

  constructor(client: Client, options: RedisConnectionOptions = {}) {
    // Without a listener, an unreachable Redis would crash the process with an 'error' event.
    client.on('error', (error: Error) => {
      this.#lastError = error;
    });
    client.on('ready', () => {
      this.#lastError = undefined;
      options.onReady?.();
      this.#readySignal?.resolve();
      this.#readySignal = undefined;
    });
    this.client = client;
  }

  /**
   * Runs one call once the connection is ready, all of it (waiting included) within `timeoutMs`,
   * mapping failures to `StoreError`s. `giveUp.onGiveUp` runs the moment the caller is given up
   * on: at the timeout, or when `giveUp.signal` aborts (the call then rejects with STORE_ABANDONED).
   */
  async run<T>(timeoutMs: number, command: (client: Client) => Promise<T>, giveUp: { onGiveUp?: () => void; signal?: AbortSignal } = {}): Promise<T> {
    let timer: NodeJS.Timeout | undefined;
    let expired = false;
    let stopListening = () => {};
    const given = new Promise<never>((_, reject) => {
      const stop = (error: StoreError) => {
        if (expired) return;
        expired = true;
        giveUp.onGiveUp?.();
        reject(error);
      };
      timer = setTimeout(
        () =>
          stop(
            new StoreError(
              'STORE_UNAVAILABLE',
              `Redis did not answer within ${timeoutMs} ms${this.#lastError ? `: ${this.#lastError.message}` : ''}`,
              { cause: this.#lastError },
            ),
          ),
        timeoutMs,
      );
      const { signal } = giveUp;
      if (signal === undefined) return;
      const onAbort = () => stop(abandonedError());
      if (signal.aborted) return onAbort();
      signal.addEventListener('abort', onAbort, { once: true });
      stopListening = () => signal.removeEventListener('abort', onAbort);
    });
    const work = (async () => {
      await this.#ready();
      // A caller that gave up while the connection came back must not have its command sent later.
      if (expired) throw new StoreError('STORE_UNAVAILABLE', 'given up before Redis was reachable');
      this.#coalesceWrites();
      return command(this.client);
    })();
    // The losing side's rejection is handled here, so it never surfaces as unhandled.
    work.catch(() => undefined);
    try {
      return await Promise.race([work, given]);
    } catch (error) {
      throw this.translate(error);
    } finally {
      clearTimeout(timer);
      stopListening();
    }
  }

  /**
   * A failure as the store reports it: a `StoreError` as it is, Redis's own answer to a command (a
   * script or type error: a bug or a misconfiguration, not an outage) as it is, anything else
   * STORE_UNAVAILABLE, or STORE_CLOSED after close.
   */
  translate(error: unknown): Error {
    if (error instanceof StoreError) return error;
    if (this.#closed) return closedError(error);
    if (error instanceof Error && error.name === 'ReplyError') return error;
    const message = error instanceof Error ? error.message : String(error);
    return new StoreError('STORE_UNAVAILABLE', `Redis command failed: ${message}`, { cause: error });
  }

  /** Quits cleanly (disconnects if that fails). Idempotent; every later `run` rejects with STORE_CLOSED. */
  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    this.#readySignal?.resolve();
    this.#readySignal = undefined;
    if (this.client.status === 'ready') {
      try {
        await this.client.quit();
        return;
      } catch {
        // fall through to a hard disconnect
      }
    }
    this.client.disconnect();
  }

  /**
   * Commands issued while the event loop runs one round of I/O callbacks leave in one write, as
   * ioredis's auto-pipelining would send them, but without the Pipeline object it builds per batch
   * (createRedisClient says why): the socket is corked until setImmediate. A Cluster has a socket
   * per node and keeps ioredis's own auto-pipelining.
   */
  #coalesceWrites(): void {
    if (this.#corked) return;
    const stream = 'stream' in this.client ? this.client.stream : undefined;
    if (stream === undefined || typeof stream.cork !== 'function') return;
    this.#corked = true;
    stream.cork();
    setImmediate(() => {
      this.#corked = false;
      stream.uncork();
    });
  }

  /** Waits for the connection (a store used right after construction, or during a brief reconnect). */
  async #ready(): Promise<void> {
    if (this.#closed) throw closedError();
    if (this.client.status === 'ready') return;
    if (!this.#readySignal) {
      let resolve!: () => void;
      const promise = new Promise<void>((r) => (resolve = r));
      this.#readySignal = { promise, resolve };
    }
    await this.#readySignal.promise;
    if (this.#closed) throw closedError();
  }
}

function closedError(cause?: unknown): StoreError {
  return new StoreError('STORE_CLOSED', 'the shared store is closed', { cause });
}
