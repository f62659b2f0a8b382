/** Types for servers.mjs, for TypeScript test helpers. Only what TypeScript callers use is declared. */
export type Log = (line: string) => void;

export type NotStarted =
  /** Nothing to start: no binaries. */
  | { ok: false; failed: false; reason: string }
  /** Binaries found, but the servers did not start; logTail holds each server's last log lines. */
  | { ok: false; failed: true; reason: string; logTail: string };

export function freePort(): Promise<number>;
/** Whether a Redis server answers PING on this loopback port. */
export function redisPing(port: number): Promise<boolean>;
/** Runs a command to its end, its output collected: like spawnSync's result, without blocking. */
export function runToEnd(
  command: string,
  args: string[],
  options?: import('node:child_process').SpawnOptions,
): Promise<{ status: number | null; stdout: string; stderr: string; error: Error | undefined }>;
/** The folder holding both initdb and postgres, or undefined when not installed. */
export function findPostgresBin(): string | undefined;
/** uid, gid and home of a system user, from /etc/passwd. */
export function systemUser(name: string): { uid: number; gid: number; home: string } | undefined;
export function stopServers(): Promise<void>;
