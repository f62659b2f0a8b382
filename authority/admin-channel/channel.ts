/**
 * The admin channel's rendezvous: while an authority holds the embedded database, the
 * administration commands cannot open it (PGlite admits one process), so the authority takes
 * them instead, on its admin listener, from whoever can read `<data dir>/admin-channel.json`.
 * That file (mode 0600, in the data directory, which is 0700) names the listener and holds a
 * random token; reading it needs the same access as opening the database itself would. It is
 * written once the listener listens and removed when the authority stops; one left behind by a
 * server that was killed names a PID that no longer holds the database, and is never used.
 *
 * @example
 *   await writeChannelFile('.countersign', { pid: process.pid, url: 'http://127.0.0.1:7071', token });
 *   const channel = await readChannelFile('.countersign'); // null when there is none
 */
import { randomBytes, timingSafeEqual, hash } from 'node:crypto';
import { chmod, readFile, rename, unlink, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { z } from 'zod';

export const CHANNEL_FILE = 'admin-channel.json';
/** Where the listener takes commands. */
export const CHANNEL_PATH = '/admin/commands';

const ChannelFile = z.object({ pid: z.number().int().positive(), url: z.url(), token: z.string().min(32) });
export type ChannelFile = z.infer<typeof ChannelFile>;

export function newChannelToken(): string {
  return randomBytes(32).toString('base64url');
}

/** Whether `presented` is `token`, in constant time whatever their lengths. */
export function tokenMatches(presented: string, token: string): boolean {
  return timingSafeEqual(hash('sha256', presented, 'buffer'), hash('sha256', token, 'buffer'));
}

/** Written to a private file first and renamed into place, so a reader never sees half of it. */
export async function writeChannelFile(dataDir: string, channel: ChannelFile): Promise<string> {
  const file = join(dataDir, CHANNEL_FILE);
  const partial = `${file}.${process.pid}.tmp`;
  await writeFile(partial, `${JSON.stringify(channel, null, 2)}\n`, { mode: 0o600 });
  await chmod(partial, 0o600);
  await rename(partial, file);
  return file;
}

/** The channel a running server announced; null when there is none or it cannot be read. */
export async function readChannelFile(dataDir: string): Promise<ChannelFile | null> {
  try {
    const parsed = ChannelFile.safeParse(JSON.parse(await readFile(join(dataDir, CHANNEL_FILE), 'utf8')));
    return parsed.success ? parsed.data : null;
  } catch {
    return null;
  }
}

/** Removes the file if it is still this server's (another server may have written its own since). */
export async function removeChannelFile(dataDir: string, token: string): Promise<void> {
  const current = await readChannelFile(dataDir);
  if (current === null || !tokenMatches(current.token, token)) return;
  await unlink(join(dataDir, CHANNEL_FILE)).catch(() => undefined);
}
