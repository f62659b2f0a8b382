/**
 * The `execution.observed` records of permitted requests, appended in small batches rather than
 * one by one. The record is written after the upstream answered, so it is not on any request's
 * critical path; what it costs is the append and its durability acknowledgement. Records
 * collected over a few milliseconds go out together (`appendRecords`: one write, and one
 * acknowledgement for the whole batch), which takes most of that off the proxy at moderate rates,
 * where requests do not share event-loop turns and so do not share writes on their own.
 *
 * `permit.verified` and `permit.rejected` are not batched: the first is appended in the same atomic
 * step as the consume, the second before the refusal is answered. The gate calls `flush()` just
 * before it appends a `permit.rejected`, so a permit's records keep the order things happened in
 * (its execution before a replay's refusal): the appends go out on one connection, in order.
 *
 * A record waits at most `flushAfterMs` (or until `maxBatch` are waiting). A failed append is
 * reported to `onError` with its request id and never affects an answer. `close()` appends what
 * is waiting and resolves when every append has settled, so a graceful stop loses nothing.
 *
 * @example
 *   const records = createExecutionRecords({ store, stream: verificationStream(org), onError: (error, requestId) => log(error, requestId) });
 *   const gate = createGate({ ..., executionRecords: records });
 *   const proxy = createProxyServer({ ..., gate, executionRecords: records });
 *   records.add(executionRecord({ ... }), requestId); // what the server does after an answer
 *   await records.close(); // on shutdown (proxy.close() does it)
 */
import type { SharedStore } from '../shared/store/types.js';

export interface ExecutionRecordsOptions {
  store: Pick<SharedStore, 'appendRecords'>;
  /** The organization's verification stream (the gate's). */
  stream: string;
  /** Called once per record whose append failed; must not throw. */
  onError: (error: unknown, requestId: string) => void;
  /** The longest a record waits before it is appended; default 5 ms. */
  flushAfterMs?: number;
  /** A batch this large is appended at once; default 64. */
  maxBatch?: number;
}

export interface ExecutionRecords {
  /** Queues one record's fields; appended within `flushAfterMs`. */
  add(fields: Record<string, string>, requestId: string): void;
  /** Issues the appends of what is waiting now (synchronously, in order); resolves when they have settled. */
  flush(): Promise<void>;
  /** Appends what is waiting and waits for every append still in flight. */
  close(): Promise<void>;
}

interface Waiting {
  fields: Record<string, string>;
  requestId: string;
}

export function createExecutionRecords(options: ExecutionRecordsOptions): ExecutionRecords {
  const { store, stream, onError } = options;
  const flushAfterMs = options.flushAfterMs ?? 5;
  const maxBatch = options.maxBatch ?? 64;
  let waiting: Waiting[] = [];
  let timer: NodeJS.Timeout | undefined;
  const inFlight = new Set<Promise<void>>();

  function flush(): Promise<void> {
    if (timer !== undefined) {
      clearTimeout(timer);
      timer = undefined;
    }
    if (waiting.length === 0) return Promise.resolve();
    const batch = waiting;
    waiting = [];
    const report = (error: unknown, requestId: string) => {
      try {
        onError(error, requestId);
      } catch {
        // onError must not throw; if it does, the other records of the batch are still reported.
      }
    };
    const appended = store.appendRecords(stream, batch.map(({ fields }) => fields)).then(
      (outcomes) => outcomes.forEach((outcome, i) => outcome.status === 'rejected' && report(outcome.reason, batch[i]!.requestId)),
      (error: unknown) => batch.forEach(({ requestId }) => report(error, requestId)),
    );
    inFlight.add(appended);
    void appended.finally(() => inFlight.delete(appended));
    return appended;
  }

  return {
    add(fields, requestId) {
      waiting.push({ fields, requestId });
      if (waiting.length >= maxBatch) void flush();
      else timer ??= setTimeout(() => void flush(), flushAfterMs);
    },
    flush,
    async close() {
      await flush();
      await Promise.allSettled([...inFlight]);
    },
  };
}
