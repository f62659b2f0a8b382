/**
 * A Postgres server of one test's own, which the test may stop and start again: the fault suites
 * take the database away from a running authority. It is never the server of DATABASE_URL (other
 * test files share that one), always a throwaway started here from the installed binaries, on a
 * free loopback port in a temp folder, with the binaries and user test/support/servers.mjs finds.
 *
 * @example
 *   const outcome = await startDedicatedPostgres();
 *   if (!outcome.ok) t.comment(outcome.reason); // no binaries: the Postgres variant does not run
 *   else { t.teardown(() => outcome.server.close()); await outcome.server.stop(); await outcome.server.start(); }
 */
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { chownSync, createWriteStream, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { once } from 'node:events';
import pg from 'pg';
import { findPostgresBin, freePort, systemUser } from '../support/servers.mjs';

export interface DedicatedPostgres {
  /** `postgres://postgres@127.0.0.1:<port>/postgres`; the same across stop and start. */
  url: string;
  /** Fast shutdown (SIGINT): sessions are terminated (57P01), new connections refused. */
  stop(): Promise<void>;
  /** Starts the server again on the same port and data, and waits until it answers. */
  start(): Promise<void>;
  /** Stops the server and removes its folder. */
  close(): Promise<void>;
}

export type DedicatedPostgresOutcome = { ok: true; server: DedicatedPostgres } | { ok: false; reason: string };

const READY_TIMEOUT_MS = 60_000;

async function answers(url: string): Promise<boolean> {
  const client = new pg.Client({ connectionString: url, connectionTimeoutMillis: 2_000 });
  client.on('error', () => undefined);
  try {
    await client.connect();
    await client.query('SELECT 1');
    return true;
  } catch {
    return false;
  } finally {
    await client.end().catch(() => undefined);
  }
}

/** Starts a dedicated Postgres, or says why it cannot (no binaries, nobody to run it as). */
export async function startDedicatedPostgres(): Promise<DedicatedPostgresOutcome> {
  const bin = findPostgresBin();
  if (!bin) return { ok: false, reason: 'no Postgres server binaries (initdb, postgres) on PATH or under /usr/lib/postgresql/*/bin' };
  const user = process.getuid?.() === 0 ? systemUser('postgres') : undefined;
  if (process.getuid?.() === 0 && !user) return { ok: false, reason: 'running as root and there is no `postgres` system user to run Postgres as' };

  const dir = mkdtempSync(join(tmpdir(), 'countersign-pg-fault-'));
  const dataDir = join(dir, 'data');
  const logFile = join(dir, 'postgres.log');
  if (user) chownSync(dir, user.uid, user.gid);
  const spawnOptions = { ...(user ?? {}), cwd: dir, env: { ...process.env, ...(user ? { HOME: dir } : {}), LC_ALL: 'C' } };
  const init = spawnSync(join(bin, 'initdb'), ['-D', dataDir, '-U', 'postgres', '--auth=trust', '--encoding=UTF8', '--no-sync'], { ...spawnOptions, encoding: 'utf8' });
  if (init.status !== 0) {
    rmSync(dir, { recursive: true, force: true });
    throw new Error(`initdb failed: ${init.error?.message ?? `${init.stdout}${init.stderr}`.trim()}`);
  }
  const port = await freePort();
  const url = `postgres://postgres@127.0.0.1:${port}/postgres`;
  let child: ChildProcess | undefined;
  // A test process that dies without close() must not leave a server running.
  const killAtExit = (): void => void child?.kill('SIGKILL');
  process.once('exit', killAtExit);

  const start = async (): Promise<void> => {
    if (child) return;
    const log = createWriteStream(logFile, { flags: 'a' });
    const started = spawn(join(bin, 'postgres'), [
      '-D', dataDir, '-p', String(port), '-k', dir,
      '-c', 'listen_addresses=127.0.0.1', '-c', 'fsync=off', '-c', 'synchronous_commit=off', '-c', 'full_page_writes=off',
    ], { ...spawnOptions, stdio: ['ignore', 'pipe', 'pipe'] });
    started.stdout?.pipe(log);
    started.stderr?.pipe(log);
    child = started;
    const exited = once(started, 'exit');
    const deadline = Date.now() + READY_TIMEOUT_MS;
    while (!(await answers(url))) {
      if (started.exitCode !== null || Date.now() > deadline) {
        started.kill('SIGKILL');
        await exited;
        child = undefined;
        throw new Error(`postgres did not start:\n${readFileSync(logFile, 'utf8').split('\n').slice(-20).join('\n')}`);
      }
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
  };
  const stop = async (): Promise<void> => {
    const running = child;
    if (!running) return;
    child = undefined;
    if (running.exitCode !== null || running.signalCode !== null) return;
    const exited = once(running, 'exit');
    running.kill('SIGINT');
    await exited;
  };

  try {
    await start();
  } catch (error) {
    process.off('exit', killAtExit);
    rmSync(dir, { recursive: true, force: true });
    throw error;
  }
  return {
    ok: true,
    server: {
      url,
      start,
      stop,
      close: async () => {
        await stop();
        process.off('exit', killAtExit);
        rmSync(dir, { recursive: true, force: true });
      },
    },
  };
}
