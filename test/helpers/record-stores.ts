/**
 * Stand-ins for the record backlog's tests (proxy/record-backlog.ts): a verification stream that
 * can be switched down, or made to fail after writing (an append whose outcome the gate cannot
 * know), a logger that keeps what it was told, and bounded polling.
 *
 * @example
 *   const store = switchableStore();
 *   store.up = false;            // every append rejects, nothing is written
 *   store.ambiguous = 1;         // the next append writes, then rejects as a time-out would
 *   store.written;               // every record written, in order (duplicates included)
 *   await waitFor('the backlog to empty', () => backlog.size() === 0);
 */
import type { SharedStore } from '../../shared/store/types.js';

export interface SwitchableStore extends Pick<SharedStore, 'appendRecords'> {
  /** false: appends reject and write nothing. */
  up: boolean;
  /** How many of the next appends write their records and then reject (time-out after the write). */
  ambiguous: number;
  /** Every record written, in order. */
  written: Array<Record<string, string>>;
  /** How many appends were asked for. */
  attempts: number;
}

export function switchableStore(): SwitchableStore {
  const store: SwitchableStore = {
    up: true,
    ambiguous: 0,
    written: [],
    attempts: 0,
    async appendRecords(_stream, batch) {
      store.attempts += 1;
      if (!store.up) throw new Error('connect ECONNREFUSED 127.0.0.1:6379');
      store.written.push(...batch);
      if (store.ambiguous > 0) {
        store.ambiguous -= 1;
        return batch.map(() => ({ status: 'rejected', reason: new Error('Command timed out') }));
      }
      return batch.map((_, i) => ({ status: 'fulfilled', value: `${store.written.length - batch.length + i + 1}-0` }));
    },
  };
  return store;
}

export interface LogLine {
  level: 'info' | 'warn' | 'error';
  details: Record<string, unknown>;
  message: string;
}

/** A logger that keeps its lines in `lines` and prints nothing. */
export function recordingLogger(): { lines: LogLine[]; info: (d: object, m: string) => void; warn: (d: object, m: string) => void; error: (d: object, m: string) => void } {
  const lines: LogLine[] = [];
  const at = (level: LogLine['level']) => (details: object, message: string) => void lines.push({ level, details: details as Record<string, unknown>, message });
  return { lines, info: at('info'), warn: at('warn'), error: at('error') };
}

/** Polls every 20 ms, for up to about 15 s; no timing is asserted. */
export async function waitFor(what: string, done: () => boolean | Promise<boolean>): Promise<void> {
  for (let i = 0; i < 750; i++) {
    if (await done()) return;
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
  throw new Error(`gave up waiting for ${what}`);
}
