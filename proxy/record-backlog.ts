/**
 * The gate's records on their way to the organization's verification stream: the refusals'
 * `permit.rejected` (gate.ts) and the batched `execution.observed` (execution-records.ts). Every
 * front door (the forwarding listener and both ext_authz transports) appends through the one
 * backlog of its process, so a record the store cannot take is not lost: it is held, and written
 * once the store is back. (`permit.verified` is not here: it is appended in the consume's atomic
 * step, and without the store there is no consume.)
 *
 * - Order: records are written in the order they were appended, one append in flight at a time
 *   (what arrives meanwhile goes out together in the next one). While anything is held, new
 *   records go behind it, so a permit's execution never lands after a later refusal of the same
 *   permit.
 * - Held: a failed append keeps its records and everything behind them, and is tried again after
 *   100 ms, doubling up to `retryMaxMs`. An append that failed may still have been written (a
 *   time-out after Redis took it): each record carries its own `gate_record_id`
 *   (gate-records.ts), and the authority's drain records a record appended twice once.
 * - Never waits for an answer: `append` resolves once its records are written, or held. While
 *   records are held it resolves at once.
 * - Bounded: at most `maxHeld` records; one arriving past the bound is dropped, counted
 *   (`onDropped`) and logged with its request id, never silently.
 * - On disk (`file`, optional): held records are also appended to the file as JSON lines, one
 *   write and one fdatasync per group of records held together (only while the store is failing,
 *   so the healthy path never touches the disk); a crash of the process or of the machine then
 *   keeps what was held. The file is reloaded at start (a line cut short by a crash is counted as
 *   unreadable and skipped) and emptied once everything is written. A record both written and
 *   still in the file after a crash is appended again at the next start: the drain skips it.
 * - `close(timeoutMs)` tries to write what is held for up to `timeoutMs`; what is left stays in
 *   the file, or without one is dropped (`shutdown`) and logged.
 *
 * @example
 *   const records = await openRecordBacklog({ store, stream: verificationStream(org), maxHeld: 10_000,
 *     file: '/var/lib/countersign/records.jsonl', logger,
 *     onAppendFailed: (count) => metrics.recordAppendFailures.inc(count),
 *     onDropped: (count, reason) => metrics.recordsDropped.inc({ reason }, count) });
 *   await records.append([gateRecord({ ... })]); // written, or held (never waits for the store to come back)
 *   records.size(); // records not written yet
 *   await records.close(5_000); // on shutdown
 */
import type { SharedStore } from '../shared/store/types.js';
import { openBacklogFile, type BacklogFile, type BackloggedRecord, type RecordFields } from './record-backlog-file.js';

export type { RecordFields };

/**
 * backlog_full: past `maxHeld`; unreadable: a line of the backlog file that is not a record;
 * shutdown: still held when the proxy stopped, with no file to keep it in.
 */
export type RecordDropReason = 'backlog_full' | 'unreadable' | 'shutdown';

export interface RecordBacklogOptions {
  store: Pick<SharedStore, 'appendRecords'>;
  /** The organization's verification stream. */
  stream: string;
  /** The most records held at once; default 10 000. */
  maxHeld?: number;
  /** Held records are kept in this file too (JSON lines), and reloaded from it at start. */
  file?: string;
  /** The longest wait between two attempts while the store is failing; default 5 s. */
  retryMaxMs?: number;
  /** The most records in one append; default 500. */
  maxBatch?: number;
  logger: BacklogLogger;
  /** Records whose append failed when they were made (each is held): for a counter. Must not throw. */
  onAppendFailed?: (count: number) => void;
  /** Records dropped, and why: for a counter. Must not throw. */
  onDropped?: (count: number, reason: RecordDropReason) => void;
}

/** What the backlog logs with (a pino logger). */
export interface BacklogLogger {
  info(details: object, message: string): void;
  warn(details: object, message: string): void;
  error(details: object, message: string): void;
}

export interface RecordBacklog {
  /** Appends in order, behind anything held; resolves once these records are written or held. Never rejects. */
  append(records: ReadonlyArray<RecordFields>): Promise<void>;
  /** Records appended and not written yet (held, or on their way). */
  size(): number;
  /** Writes what it can within `timeoutMs`, then keeps the rest in the file or drops it (logged). */
  close(timeoutMs: number): Promise<void>;
}

interface Entry extends BackloggedRecord {
  /** Resolves the `append` whose last record this is. */
  settle: (() => void) | null;
}

const FIRST_RETRY_MS = 100;
/** Request ids named in one log line about dropped records, at most. */
const LOGGED_REQUEST_IDS = 20;

/** Opens the backlog, reloading the records an earlier run left in `file`. Rejects when `file` cannot be read or written. */
export async function openRecordBacklog(options: RecordBacklogOptions): Promise<RecordBacklog> {
  const { file, logger } = options;
  const disk =
    file === undefined ? null : await openBacklogFile(file, (error) => logger.error({ err: error, file }, 'cannot write the record backlog file; the records stay held in memory'));
  return createRecordBacklog(options, disk);
}

/** The backlog over an opened file (`openRecordBacklog`), or in memory only (`disk` null). */
export function createRecordBacklog(options: RecordBacklogOptions, disk: BacklogFile | null = null): RecordBacklog {
  const { store, stream, logger } = options;
  const maxHeld = options.maxHeld ?? 10_000;
  const maxBatch = options.maxBatch ?? 500;
  const retryMaxMs = options.retryMaxMs ?? 5_000;
  /** Counted and logged (with up to 20 request ids), never silent. */
  const dropped = (records: ReadonlyArray<RecordFields>, reason: RecordDropReason, count = records.length) => {
    if (count === 0) return;
    report(() => options.onDropped?.(count, reason));
    const requestIds = records.slice(0, LOGGED_REQUEST_IDS).map((fields) => fields.request_id ?? '');
    logger.error({ records: count, reason, request_ids: requestIds, stream }, 'verification records dropped: they will not reach the audit log');
  };

  let queue: Entry[] = [];
  let heldCount = 0;
  if (disk !== null) {
    dropped([], 'unreadable', disk.unreadable);
    const reloaded = disk.reloaded.map((fields): Entry => ({ fields, held: true, onDisk: true, settle: null }));
    dropped(reloaded.slice(maxHeld).map((entry) => entry.fields), 'backlog_full');
    queue = reloaded.slice(0, maxHeld);
    heldCount = queue.length;
    if (queue.length > 0) logger.warn({ records: queue.length, file: options.file }, 'verification records held by an earlier run were reloaded; writing them to the verification stream');
  }

  let pumping: Promise<void> | null = null;
  let retryTimer: NodeJS.Timeout | undefined;
  let retryDelayMs = 0;
  let closed = false;

  const settle = (entries: Entry[]) => {
    for (const entry of entries) {
      entry.settle?.();
      entry.settle = null;
    }
  };

  /** These records (not held yet) are held from now on: counted, their appends resolved, kept on disk. */
  const hold = (entries: Entry[]) => {
    if (entries.length === 0) return;
    for (const entry of entries) entry.held = true;
    heldCount += entries.length;
    report(() => options.onAppendFailed?.(entries.length));
    settle(entries);
    disk?.persist(() => queue);
  };

  /** One append of the queue's head; resolves whether it was all written. */
  async function writeHead(): Promise<{ ok: true } | { ok: false; error: unknown }> {
    const batch = queue.slice(0, maxBatch);
    let outcomes: PromiseSettledResult<string>[];
    try {
      outcomes = await store.appendRecords(stream, batch.map((entry) => entry.fields));
    } catch (error) {
      outcomes = batch.map(() => ({ status: 'rejected', reason: error }));
    }
    const failedAt = outcomes.findIndex((outcome) => outcome.status === 'rejected');
    // Everything from the first failed record on is held and appended again, in order. A record
    // that failed only as far as the gate can tell (a time-out after Redis took it, durability
    // not acknowledged) lands twice, and the drain skips the second copy. Only when Redis refused
    // one record of a batch and took the ones after it do those land before its retry.
    const written = queue.splice(0, failedAt < 0 ? batch.length : failedAt);
    heldCount -= written.filter((entry) => entry.held).length;
    settle(written);
    if (written.some((entry) => entry.onDisk)) disk?.compact(() => queue);
    if (failedAt < 0) return { ok: true };
    return { ok: false, error: (outcomes[failedAt] as PromiseRejectedResult).reason };
  }

  /** Writes the queue until it is empty or an append fails (then holds it and schedules a retry). */
  function pump(): Promise<void> {
    pumping ??= (async () => {
      const heldBefore = heldCount;
      while (queue.length > 0) {
        const result = await writeHead();
        if (result.ok) {
          retryDelayMs = 0;
          continue;
        }
        if (heldCount === 0) logger.warn({ err: result.error, stream }, 'cannot append verification records to the store: holding them and trying again');
        hold(queue.filter((entry) => !entry.held));
        scheduleRetry();
        return;
      }
      // After any write of the file still under way: what it added has been written by now.
      disk?.compact(() => queue);
      if (heldBefore > 0) logger.info({ records: heldBefore }, 'verification records held while the store could not take them are written');
    })().finally(() => {
      pumping = null;
      // An append made after the loop found the queue empty, but before this, joined this writer
      // and left its records to it: write them now, or they would wait, and their caller with them.
      if (queue.some((entry) => !entry.held)) void pump();
    });
    return pumping;
  }

  function scheduleRetry(): void {
    if (closed) return;
    retryDelayMs = retryDelayMs === 0 ? FIRST_RETRY_MS : Math.min(retryDelayMs * 2, retryMaxMs);
    retryTimer = setTimeout(() => {
      retryTimer = undefined;
      void pump();
    }, retryDelayMs);
    retryTimer.unref();
  }

  if (queue.length > 0) void pump();

  return {
    append(records) {
      if (records.length === 0) return Promise.resolve();
      if (closed) {
        dropped(records, 'shutdown');
        return Promise.resolve();
      }
      const room = Math.max(0, maxHeld - queue.length);
      dropped(records.slice(room), 'backlog_full');
      const entries = records.slice(0, room).map((fields): Entry => ({ fields, held: false, onDisk: false, settle: null }));
      if (entries.length === 0) return Promise.resolve();
      queue.push(...entries);
      if (heldCount > 0) {
        // Behind records that are held: held too, and the caller does not wait for the store.
        hold(entries);
        return Promise.resolve();
      }
      const done = new Promise<void>((resolve) => ((entries[entries.length - 1] as Entry).settle = resolve));
      if (retryTimer === undefined) void pump();
      return done;
    },
    size: () => queue.length,
    async close(timeoutMs) {
      closed = true;
      const deadline = Date.now() + timeoutMs;
      let timer: NodeJS.Timeout | undefined;
      const expired = new Promise<void>((resolve) => (timer = setTimeout(resolve, Math.max(0, timeoutMs))));
      // Attempts until everything is written or the time is up; no new retry is scheduled (closed).
      while (queue.length > 0 && Date.now() < deadline) {
        clearTimeout(retryTimer);
        retryTimer = undefined;
        await Promise.race([pump(), expired]);
        if (queue.length === 0 || Date.now() >= deadline) break;
        await Promise.race([new Promise((resolve) => setTimeout(resolve, Math.max(FIRST_RETRY_MS, retryDelayMs)).unref()), expired]);
      }
      clearTimeout(timer);
      clearTimeout(retryTimer);
      const left = [...queue];
      settle(left);
      if (left.length === 0) return disk?.close();
      if (disk === null) {
        dropped(left.map((entry) => entry.fields), 'shutdown');
        return;
      }
      hold(left.filter((entry) => !entry.held));
      disk.persist(() => left);
      await disk.close();
      logger.warn({ records: left.length, file: options.file }, 'verification records are kept in the backlog file; the next start writes them');
    },
  };
}

/** A counting or logging callback must not break the backlog. */
function report(callback: () => void): void {
  try {
    callback();
  } catch {
    // ignored: see the option's contract
  }
}
