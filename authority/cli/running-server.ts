/**
 * Where an administration command runs: on the configured database, opened by the command
 * itself (Postgres, or the embedded data directory when no server holds it); or, while a server
 * holds the embedded data directory, in that server, through its admin listener
 * (authority/admin-channel/). Either way the same operation runs (admin-operations.ts) and the
 * command prints the same output. When the server cannot take it (one that does not offer the
 * channel, or is stopping), the command fails as before with DATA_DIR_LOCKED, which the CLI turns
 * into exit 3 and what to do instead.
 *
 * @example
 *   const output = await runAdminCommandOn(config, 'keys list', { org: 'default' }, { notify: console.error });
 */
import { CHANNEL_PATH, readChannelFile } from '../admin-channel/channel.js';
import type { AuthorityConfig } from '../config.js';
import type { SecretBox } from '../signing/secret-box.js';
import { openSigning } from '../signing/open.js';
import type { Db } from '../store/db.js';
import { migrate } from '../store/migrate.js';
import { openDb } from '../store/open.js';
import { systemClock } from '../time.js';
import { UsageError } from '../../shared/usage-error.js';
import { runAdminOperation, type AdminCommand, type AdminInput } from './admin-operations.js';

/** How long the CLI waits for the running server: far longer than any of these commands takes. */
const CHANNEL_TIMEOUT_MS = 60_000;

export interface RunOptions {
  /** Opens the signing keys locally (`keys rotate-signing`); a server uses its own. */
  box?: SecretBox | undefined;
  /** Told, for a person, when the command ran in a running server. */
  notify?: ((line: string) => void) | undefined;
}

type LockedError = Error & { code: 'DATA_DIR_LOCKED'; pid: number };

/** The embedded data directory is held by another, live process (store/pglite.ts). */
function lockedByAnotherProcess(error: unknown): error is LockedError {
  const locked = error as Partial<LockedError> | null;
  return locked?.code === 'DATA_DIR_LOCKED' && typeof locked.pid === 'number' && locked.pid !== process.pid;
}

const connectionRefused = (error: unknown): boolean => (error as { cause?: { code?: unknown } }).cause?.code === 'ECONNREFUSED';

/** Sends the command to the server holding the data directory; rethrows `locked` when it cannot take it. */
async function runInServer(config: AuthorityConfig, locked: LockedError, command: AdminCommand, input: unknown, notify?: (line: string) => void): Promise<unknown> {
  const channel = await readChannelFile(config.data_dir);
  // No channel, or one another process left behind: the holder does not take commands.
  if (channel === null || channel.pid !== locked.pid) throw locked;
  let response: Response;
  try {
    response = await fetch(new URL(CHANNEL_PATH, channel.url), {
      method: 'POST',
      headers: { authorization: `Bearer ${channel.token}`, 'content-type': 'application/json' },
      body: JSON.stringify({ command, input }),
      signal: AbortSignal.timeout(CHANNEL_TIMEOUT_MS),
    });
  } catch (error) {
    // Nothing listened (the server is stopping): nothing was sent, so nothing ran.
    if (connectionRefused(error)) throw locked;
    throw new Error(`the server holding the embedded database (PID ${locked.pid}) did not answer, so whether ${command} ran is not known: ${(error as Error).message}`, { cause: error });
  }
  const body = (await response.json().catch(() => null)) as { output?: unknown; message?: unknown } | null;
  const message = typeof body?.message === 'string' ? body.message : `the server answered ${response.status}`;
  if (response.ok && body !== null && 'output' in body) {
    notify?.(`${command} was run by the server that holds the embedded database (PID ${locked.pid})`);
    return body.output;
  }
  if (response.status === 400) throw new UsageError(message);
  // Refused: the channel file is not this server's to use. Said as when there is no channel.
  if (response.status === 401 || response.status === 403 || response.status === 404) throw locked;
  throw new Error(message);
}

/** Runs `command` on the configured database, or in the server that holds the embedded one. */
export async function runAdminCommandOn<C extends AdminCommand>(config: AuthorityConfig, command: C, input: AdminInput<C>, options: RunOptions = {}): Promise<unknown> {
  let db: Db;
  try {
    db = await openDb({ databaseUrl: config.database_url, dataDir: config.data_dir });
  } catch (error) {
    if (!lockedByAnotherProcess(error)) throw error;
    return runInServer(config, error, command, input, options.notify);
  }
  try {
    if (command !== 'migrate') await migrate(db);
    const signing = async () => {
      if (!options.box) throw new Error(`${command} cannot open the signing keys without the secret key`);
      return openSigning(db, options.box, config, systemClock);
    };
    return await runAdminOperation(command, input, { db, clock: systemClock, signing });
  } finally {
    await db.close();
  }
}
