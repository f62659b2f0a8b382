/**
 * The `execution.observed` records of permitted requests, handed to the record backlog
 * (record-backlog.ts) in small batches rather than one by one. The record is written after the
 * upstream answered, so it is not on any request's critical path; what it costs is the append and
 * its durability acknowledgement. Records collected over a few milliseconds go out together (one
 * write, and one acknowledgement for the whole batch), which takes most of that off the proxy at
 * moderate rates, where requests do not share event-loop turns and so do not share writes on
 * their own.
 *
 * `permit.verified` and `permit.rejected` are not batched: the first is appended in the same atomic
 * step as the consume, the second before the refusal is answered. The gate calls `flush()` just
 * before it appends a `permit.rejected`, so a permit's records keep the order things happened in
 * (its execution before a replay's refusal): the backlog writes in the order it is given records.
 *
 * A record waits at most `flushAfterMs` (or until `maxBatch` are waiting). An append the store
 * cannot take is held by the backlog and written once the store is back; it never affects an
 * answer. `close()` hands over what is waiting and resolves once every batch is written or held,
 * so a graceful stop loses nothing here (the backlog's own close decides what becomes of what it holds).
 *
 * @example
 *   const backlog = await openRecordBacklog({ store, stream: verificationStream(org), logger });
 *   const records = createExecutionRecords({ records: backlog });
 *   const gate = createGate({ ..., records: backlog, executionRecords: records });
 *   const proxy = createProxyServer({ ..., gate, executionRecords: records });
 *   recordExecution(records, { route, decision, requestId, result }); // what the server does after an answer
 *   await records.close(); // on shutdown (proxy.close() does it)
 */
import type { ExecutionOutcome } from './forward.js';
import { executionRecord, type ExecutionRecordInput } from './gate-records.js';
import type { RecordBacklog, RecordFields } from './record-backlog.js';

export interface ExecutionRecordsOptions {
  /** Where the batches go, in order with the gate's refusals: the process's record backlog. */
  records: Pick<RecordBacklog, 'append'>;
  /** The longest a record waits before it is appended; default 5 ms. */
  flushAfterMs?: number;
  /** A batch this large is appended at once; default 64. */
  maxBatch?: number;
}

export interface ExecutionRecords {
  /** Queues one record's fields; appended within `flushAfterMs`. */
  add(fields: RecordFields): void;
  /** Hands what is waiting now to the backlog (synchronously, in order); resolves once it is written or held. */
  flush(): Promise<void>;
  /** Hands over what is waiting and waits until every batch handed over is written or held. */
  close(): Promise<void>;
}

export function createExecutionRecords(options: ExecutionRecordsOptions): ExecutionRecords {
  const { records } = options;
  const flushAfterMs = options.flushAfterMs ?? 5;
  const maxBatch = options.maxBatch ?? 64;
  let waiting: RecordFields[] = [];
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
    const appended = records.append(batch);
    inFlight.add(appended);
    void appended.finally(() => inFlight.delete(appended));
    return appended;
  }

  return {
    add(fields) {
      waiting.push(fields);
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

/** What the server and the MCP gate know once a permitted request's upstream answered or failed. */
export type ObservedExecution = Omit<ExecutionRecordInput, 'mode' | 'permitId' | 'claims' | 'upstream' | 'upstreamStatus' | 'durationMs' | 'atMs' | 'code' | 'reason'> & {
  /** The gate's decision: its mode, permit and claims. */
  decision: Pick<ExecutionRecordInput, 'mode' | 'permitId' | 'claims'>;
  /** The forward's outcome (forward.ts). */
  result: ExecutionOutcome & { durationMs: number };
  /**
   * Said instead of the forward's code and reason when the answer's content tells more (the MCP
   * gate's tool result: tool-outcome.ts). Undefined: the forward's own.
   */
  outcome?: { code: string; reason: string } | undefined;
};

/** Adds the `execution.observed` record of one permitted request, stamped now. */
export function recordExecution(records: Pick<ExecutionRecords, 'add'>, observed: ObservedExecution): void {
  const { decision, result, outcome, ...rest } = observed;
  records.add(
    executionRecord({
      ...rest,
      mode: decision.mode,
      permitId: decision.permitId,
      claims: decision.claims,
      upstream: result.upstream,
      upstreamStatus: result.status,
      durationMs: result.durationMs,
      atMs: Date.now(),
      code: outcome?.code ?? result.code,
      reason: outcome?.reason ?? result.reason,
    }),
  );
}
