/**
 * Throwaway Postgres and Redis servers for `npm test` (test/run.mjs) and `npm run bench`
 * (test/bench/run.mjs): found on PATH (or under /usr/lib/postgresql/<version>/bin), started on a
 * free loopback port in a temp folder, and removed by `stopServers()`. A 3-primary Redis Cluster
 * and a Sentinel group are in redis-topologies.mjs, built on the helpers exported here.
 *
 * Each start function logs what it used ("postgres: started …", "redis: using REDIS_URL …") and
 * resolves an outcome; the caller words the "could not run" messages, because what is skipped
 * (a test suite, a benchmark) is the caller's business:
 *   { ok: true, url, fromEnv }                   a server to use (fromEnv: DATABASE_URL/REDIS_URL was set;
 *                                                the Cluster/Sentinel outcomes carry addresses, not a url)
 *   { ok: false, failed: false, reason }         nothing to start (no binaries, no user to run as)
 *   { ok: false, failed: true, reason, logTail } a server was found but did not start
 *
 * @example
 *   const pg = await startPostgres({ log: console.log });
 *   if (pg.ok) process.env.DATABASE_URL = pg.url;
 *   …
 *   await stopServers();
 */
import { spawn } from 'node:child_process';
import { accessSync, chownSync, constants, createWriteStream, existsSync, mkdtempSync, readdirSync, readFileSync, realpathSync, rmSync } from 'node:fs';
import { createConnection, createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { delimiter, dirname, join } from 'node:path';

export const READY_TIMEOUT_MS = 60_000;
const STOP_TIMEOUT_MS = 15_000;

/** Servers and folders to remove whatever happens. */
const started = [];
const tempDirs = [];

export function findOnPath(name) {
  for (const dir of (process.env.PATH ?? '').split(delimiter)) {
    if (!dir) continue;
    const candidate = join(dir, name);
    try {
      accessSync(candidate, constants.X_OK);
      return candidate;
    } catch {
      // not here
    }
  }
  return undefined;
}

/** The bin folder holding both initdb and postgres, so their versions match. */
export function findPostgresBin() {
  const onPath = findOnPath('initdb');
  if (onPath) {
    const dir = dirname(realpathSync(onPath));
    if (existsSync(join(dir, 'postgres'))) return dir;
  }
  const base = '/usr/lib/postgresql';
  if (!existsSync(base)) return undefined;
  const versions = readdirSync(base)
    .filter((v) => existsSync(join(base, v, 'bin', 'initdb')) && existsSync(join(base, v, 'bin', 'postgres')))
    .sort((a, b) => Number.parseFloat(b) - Number.parseFloat(a));
  return versions[0] === undefined ? undefined : join(base, versions[0], 'bin');
}

/** A loopback port nobody listens on right now. */
export function freePort() {
  return new Promise((resolvePort, reject) => {
    const server = createServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address();
      server.close(() => resolvePort(port));
    });
  });
}

/** uid/gid of a system user, from /etc/passwd (no getent needed). */
export function systemUser(name) {
  try {
    for (const line of readFileSync('/etc/passwd', 'utf8').split('\n')) {
      const [user, , uid, gid, , home] = line.split(':');
      if (user === name) return { uid: Number(uid), gid: Number(gid), home };
    }
  } catch {
    // no /etc/passwd
  }
  return undefined;
}

export function tail(file, lines = 30) {
  try {
    return readFileSync(file, 'utf8').trimEnd().split('\n').slice(-lines).join('\n');
  } catch {
    return '(no log)';
  }
}

/** The URL with its password masked, for log lines. */
export function redact(url) {
  try {
    const u = new URL(url);
    if (u.password) u.password = '***';
    return u.toString();
  } catch {
    return '(unparsable URL)';
  }
}

/** Runs a command to its end: `{ status, stdout, stderr, error }`, like spawnSync's result. */
export function runToEnd(command, args, options) {
  return new Promise((resolveRun) => {
    const child = spawn(command, args, { ...options, stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    child.stdout.setEncoding('utf8').on('data', (chunk) => (stdout += chunk));
    child.stderr.setEncoding('utf8').on('data', (chunk) => (stderr += chunk));
    child.once('error', (error) => resolveRun({ status: null, stdout, stderr, error }));
    child.once('close', (status) => resolveRun({ status, stdout, stderr, error: undefined }));
  });
}

/** Polls `probe` until it resolves true; fails early when the server process has exited. */
async function waitUntil(what, server, probe) {
  const deadline = Date.now() + READY_TIMEOUT_MS;
  while (Date.now() < deadline) {
    if (server.exited) throw new Error(`${what} exited during start-up (code ${server.child.exitCode})`);
    if (await probe().catch(() => false)) return;
    await new Promise((r) => setTimeout(r, 50));
  }
  throw new Error(`${what} did not accept connections within ${READY_TIMEOUT_MS / 1000} s`);
}

export function startServer(name, command, args, { stopSignal = 'SIGTERM', ...options }, logFile) {
  const out = createWriteStream(logFile);
  const child = spawn(command, args, { ...options, stdio: ['ignore', 'pipe', 'pipe'] });
  child.stdout.pipe(out);
  child.stderr.pipe(out);
  const server = { name, child, exited: false, stopSignal };
  // 'error' without 'exit' when the binary cannot be spawned at all.
  server.done = new Promise((r) => {
    child.once('exit', r);
    child.once('error', r);
  }).then(() => {
    server.exited = true;
  });
  started.push(server);
  return server;
}

export async function stopServer(server) {
  if (server.exited) return;
  server.child.kill(server.stopSignal);
  const timer = setTimeout(() => server.child.kill('SIGKILL'), STOP_TIMEOUT_MS);
  await server.done;
  clearTimeout(timer);
}

/**
 * DATABASE_URL when set, else a throwaway Postgres (run as the `postgres` system user when this
 * runs as root, which Postgres refuses). `settings` are extra `-c name=value` server settings;
 * they come last, so they override the defaults here.
 */
export async function startPostgres({ log, settings = [] }) {
  if (process.env.DATABASE_URL) {
    log(`postgres: using DATABASE_URL from the environment (${redact(process.env.DATABASE_URL)})`);
    return { ok: true, url: process.env.DATABASE_URL, fromEnv: true };
  }
  const bin = findPostgresBin();
  if (!bin) {
    return {
      ok: false,
      failed: false,
      reason: 'DATABASE_URL is not set and no Postgres server binaries (initdb, postgres) were found on PATH or under /usr/lib/postgresql/*/bin',
    };
  }
  let user;
  if (process.getuid?.() === 0) {
    user = systemUser('postgres');
    if (!user) {
      return {
        ok: false,
        failed: false,
        reason: `binaries found in ${bin}, but this runs as root, ` +
          'Postgres refuses to run as root, and there is no `postgres` system user to run it as ' +
          '(install the postgresql package, or set DATABASE_URL)',
      };
    }
  }
  const dir = mkdtempSync(join(tmpdir(), 'countersign-pg-'));
  tempDirs.push(dir);
  const dataDir = join(dir, 'data');
  const logFile = join(dir, 'postgres.log');
  const asUser = user ? { uid: user.uid, gid: user.gid } : {};
  if (user) chownSync(dir, user.uid, user.gid);
  // HOME/PWD of root would be unreadable for the postgres user; cwd is the temp dir.
  const env = { ...process.env, ...(user ? { HOME: dir } : {}), LC_ALL: 'C' };
  try {
    // Not spawnSync: the Redis servers start meanwhile (test/run.mjs starts them side by side).
    const init = await runToEnd(
      join(bin, 'initdb'),
      ['-D', dataDir, '-U', 'postgres', '--auth=trust', '--encoding=UTF8', '--no-sync'],
      { ...asUser, cwd: dir, env },
    );
    if (init.status !== 0) {
      throw new Error(`initdb failed (${init.error?.message ?? `exit ${init.status}`}):\n${`${init.stdout}${init.stderr}`.trim()}`);
    }
    const port = await freePort();
    const server = startServer('postgres', join(bin, 'postgres'), [
      '-D', dataDir,
      '-p', String(port),
      '-k', dir,
      '-c', 'listen_addresses=127.0.0.1',
      '-c', 'fsync=off',
      '-c', 'synchronous_commit=off',
      '-c', 'full_page_writes=off',
      // Test files run in parallel, each with its own databases and pools.
      '-c', 'max_connections=300',
      ...settings.flatMap((setting) => ['-c', setting]),
    ], { ...asUser, cwd: dir, env, stopSignal: 'SIGINT' /* fast shutdown */ }, logFile);
    const url = `postgres://postgres@127.0.0.1:${port}/postgres`;
    const { default: pg } = await import('pg');
    await waitUntil('postgres', server, async () => {
      const client = new pg.Client({ connectionString: url, connectionTimeoutMillis: 2_000 });
      client.on('error', () => undefined);
      try {
        await client.connect();
        await client.query('SELECT 1');
        return true;
      } finally {
        await client.end().catch(() => undefined);
      }
    });
    log(`postgres: started a throwaway server from ${bin} at ${url}${user ? ' (as user postgres)' : ''}`);
    return { ok: true, url, fromEnv: false };
  } catch (err) {
    return { ok: false, failed: true, reason: err.message, logTail: tail(logFile) };
  }
}

export function redisPing(port) {
  return new Promise((resolvePing) => {
    const socket = createConnection({ host: '127.0.0.1', port });
    let reply = '';
    socket.setTimeout(2_000, () => socket.destroy());
    socket.on('connect', () => socket.write('PING\r\n'));
    socket.on('data', (d) => {
      reply += d.toString();
      if (reply.includes('\r\n')) socket.end();
    });
    socket.on('error', () => undefined);
    socket.on('close', () => resolvePing(reply.startsWith('+PONG')));
  });
}

/**
 * Where a throwaway Redis keeps its append-only file: memory (/dev/shm) when the machine has it,
 * so that `appendfsync always` costs next to nothing, else the temp folder.
 */
function redisDataRoot() {
  return existsSync('/dev/shm') ? '/dev/shm' : tmpdir();
}

/**
 * REDIS_URL when set, else a throwaway redis-server configured as production needs it for the
 * default durability `aof` (appendonly yes, appendfsync always; docs/replay-store.md), its file in
 * memory: the processes under test check that at start and refuse a Redis without it.
 */
export async function startRedis({ log }) {
  if (process.env.REDIS_URL) {
    log(`redis: using REDIS_URL from the environment (${redact(process.env.REDIS_URL)})`);
    return { ok: true, url: process.env.REDIS_URL, fromEnv: true };
  }
  const bin = findOnPath('redis-server') ?? ['/usr/bin/redis-server', '/usr/sbin/redis-server'].find((p) => existsSync(p));
  if (!bin) {
    return { ok: false, failed: false, reason: 'REDIS_URL is not set and no redis-server binary was found on PATH' };
  }
  const dir = mkdtempSync(join(redisDataRoot(), 'countersign-redis-'));
  tempDirs.push(dir);
  const logFile = join(dir, 'redis.log');
  try {
    const port = await freePort();
    const server = startServer('redis', bin, [
      '--port', String(port),
      '--bind', '127.0.0.1',
      '--save', '',
      '--appendonly', 'yes',
      '--appendfsync', 'always',
      '--dir', dir,
      '--daemonize', 'no',
    ], { cwd: dir }, logFile);
    await waitUntil('redis-server', server, () => redisPing(port));
    const url = `redis://127.0.0.1:${port}`;
    log(`redis: started a throwaway server (${bin}) at ${url}`);
    return { ok: true, url, fromEnv: false };
  } catch (err) {
    return { ok: false, failed: true, reason: err.message, logTail: tail(logFile) };
  }
}

/** Removes `dir` with the servers' folders in stopServers(). */
export function removeAtStop(dir) {
  tempDirs.push(dir);
}

let stopping;
/** Stops every server started here and removes their folders; safe to call more than once. */
export function stopServers() {
  stopping ??= (async () => {
    await Promise.all(started.map((s) => stopServer(s).catch(() => undefined)));
    for (const dir of tempDirs) rmSync(dir, { recursive: true, force: true });
  })();
  return stopping;
}
