/**
 * The record backlog's file (record-backlog.ts): the records held while the store cannot take
 * them, one JSON object of stream fields per line, so that a restarted proxy still writes them.
 *
 * - Writes happen one at a time, in order; requests for a write that is already waiting are
 *   folded into it. Each write is one `write` and one `fdatasync`: a record counts as kept once
 *   both returned (the file is only written while the store fails, never on the healthy path).
 * - Held records are appended, never rewritten in place. Once most of the file's records have
 *   been written to the stream, the file is replaced by one holding only the rest (a new file
 *   fsynced, renamed over the old one, the directory fsynced), so it stays near the size of what
 *   is held.
 * - At open, the file's records are read back; a line that is not an object of strings (one cut
 *   short by a crash mid-write) is counted as unreadable and skipped. The file is created when
 *   missing, so a path the proxy cannot write stops the start rather than the first outage.
 *
 * @example
 *   const file = await openBacklogFile('/var/lib/countersign/records.jsonl', (error) => logger.warn({ err: error }));
 *   file.reloaded;   // the records an earlier run left, oldest first
 *   file.persist(() => queue);  // appends the held records of the queue not in the file yet
 *   file.compact(() => queue);  // after some were written: drops them from the file when most are
 *   await file.close();
 */
import { open, readFile, rename } from 'node:fs/promises';
import { dirname } from 'node:path';

/** One record's stream fields. */
export type RecordFields = Record<string, string>;

/** A record in the backlog, as this file sees it. */
export interface BackloggedRecord {
  fields: RecordFields;
  /** Could not be written to the stream when it came (or came behind one that could not). */
  held: boolean;
  /** In the file. */
  onDisk: boolean;
}

export interface BacklogFile {
  /** The records an earlier run left, oldest first. */
  readonly reloaded: RecordFields[];
  /** Lines of the file that were not records. */
  readonly unreadable: number;
  /** Appends the held records of `current()` that are not in the file yet. */
  persist(current: () => ReadonlyArray<BackloggedRecord>): void;
  /** Replaces the file with the records of `current()` it holds, once most of its lines are records written since. */
  compact(current: () => ReadonlyArray<BackloggedRecord>): void;
  /** Resolves once the writes asked for so far are done. */
  close(): Promise<void>;
}

export async function openBacklogFile(path: string, onError: (error: unknown) => void): Promise<BacklogFile> {
  const text = await readFile(path, 'utf8').catch((error: NodeJS.ErrnoException) => {
    if (error.code === 'ENOENT') return '';
    throw error;
  });
  // Created now when missing: a path that cannot be written fails here, at start.
  await (await open(path, 'a')).close();
  const reloaded: RecordFields[] = [];
  let unreadable = 0;
  for (const line of text.split('\n')) {
    if (line.trim() === '') continue;
    const fields = parseLine(line);
    if (fields === null) unreadable += 1;
    else reloaded.push(fields);
  }
  let lines = reloaded.length + unreadable;

  let chain: Promise<void> = Promise.resolve();
  const waiting = new Set<'persist' | 'compact'>();
  let steps = 0;
  /** Runs `step` after the writes before it; a step already waiting is not queued twice. */
  const enqueue = (kind: 'persist' | 'compact', step: () => Promise<void>) => {
    if (waiting.has(kind)) return;
    waiting.add(kind);
    steps += 1;
    chain = chain.then(() => {
      waiting.delete(kind);
      return step()
        .catch(onError)
        .finally(() => (steps -= 1));
    });
  };

  return {
    reloaded,
    unreadable,
    persist(current) {
      enqueue('persist', async () => {
        const fresh = current().filter((record) => record.held && !record.onDisk);
        if (fresh.length === 0) return;
        await writeSynced(path, 'a', fresh);
        for (const record of fresh) record.onDisk = true;
        lines += fresh.length;
      });
    },
    compact(current) {
      // The healthy path: nothing in the file and nothing on its way to it, so no work at all.
      if (lines === 0 && steps === 0) return;
      enqueue('compact', async () => {
        const kept = current().filter((record) => record.onDisk);
        if (lines === 0 || (kept.length > 0 && lines <= 2 * kept.length)) return;
        const next = `${path}.next`;
        await writeSynced(next, 'w', kept);
        await rename(next, path);
        await syncDirectory(dirname(path));
        lines = kept.length;
      });
    },
    close: () => chain,
  };
}

async function writeSynced(path: string, flags: 'a' | 'w', records: ReadonlyArray<BackloggedRecord>): Promise<void> {
  const handle = await open(path, flags);
  try {
    if (records.length > 0) await handle.write(records.map((record) => `${JSON.stringify(record.fields)}\n`).join(''));
    await handle.datasync();
  } finally {
    await handle.close();
  }
}

/** Makes a rename durable; where a directory cannot be opened for that (not Linux), the rename stands as is. */
async function syncDirectory(dir: string): Promise<void> {
  try {
    const handle = await open(dir, 'r');
    try {
      await handle.sync();
    } finally {
      await handle.close();
    }
  } catch {
    // best effort, as above
  }
}

/** A line's record: a JSON object with at least one field, every value a string; null otherwise. */
function parseLine(line: string): RecordFields | null {
  let value: unknown;
  try {
    value = JSON.parse(line);
  } catch {
    return null;
  }
  if (typeof value !== 'object' || value === null || Array.isArray(value)) return null;
  const entries = Object.entries(value);
  if (entries.length === 0 || !entries.every(([, field]) => typeof field === 'string')) return null;
  return Object.fromEntries(entries) as RecordFields;
}
