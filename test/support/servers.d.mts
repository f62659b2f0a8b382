/** Types for servers.mjs, for TypeScript test helpers. Only what TypeScript callers use is declared. */
export type Log = (line: string) => void;

export type NotStarted =
  /** Nothing to start: no binaries. */
  | { ok: false; failed: false; reason: string }
  /** Binaries found, but the servers did not start; logTail holds each server's last log lines. */
  | { ok: false; failed: true; reason: string; logTail: string };

export function freePort(): Promise<number>;
export function stopServers(): Promise<void>;
