#!/usr/bin/env node
/**
 * `npm test`: runs tap, with throwaway Postgres and Redis servers when the binaries are installed
 * and DATABASE_URL / REDIS_URL are not set, so the real-server variants of the suites run too.
 * Prints `N passed, N failed` last (N = named subtests one level inside each test file, plus test
 * files that failed without a failing subtest) and exits with tap's exit code.
 *
 * Example:
 *   npm test                                    # every test file from .taprc
 *   npm test -- test/integration/db.test.ts     # extra arguments go to tap
 *   DATABASE_URL=postgres://u:p@db/x npm test   # use that server, start none
 */
import { spawn, spawnSync } from 'node:child_process';
import { accessSync, chownSync, constants, createWriteStream, existsSync, mkdtempSync, readdirSync, readFileSync, realpathSync, rmSync } from 'node:fs';
import { createConnection, createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { delimiter, dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = resolve(dirname(fileURLToPath(import.meta.url)), '..');
const READY_TIMEOUT_MS = 60_000;
const STOP_TIMEOUT_MS = 15_000;

/** Servers and folders to remove whatever happens. */
const started = [];
const tempDirs = [];
let extraFailures = 0;

const log = (line) => process.stdout.write(`${line}\n`);

function findOnPath(name) {
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
function findPostgresBin() {
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

function freePort() {
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
function systemUser(name) {
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

function tail(file, lines = 30) {
  try {
    return readFileSync(file, 'utf8').trimEnd().split('\n').slice(-lines).join('\n');
  } catch {
    return '(no log)';
  }
}

function redact(url) {
  try {
    const u = new URL(url);
    if (u.password) u.password = '***';
    return u.toString();
  } catch {
    return '(unparsable URL)';
  }
}

/** Polls `probe` until it resolves true; fails early when the server process has exited. */
async function waitUntil(what, server, probe) {
  const deadline = Date.now() + READY_TIMEOUT_MS;
  while (Date.now() < deadline) {
    if (server.exited) throw new Error(`${what} exited during start-up (code ${server.child.exitCode})`);
    if (await probe().catch(() => false)) return;
    await new Promise((r) => setTimeout(r, 200));
  }
  throw new Error(`${what} did not accept connections within ${READY_TIMEOUT_MS / 1000} s`);
}

function startServer(name, command, args, { stopSignal = 'SIGTERM', ...options }, logFile) {
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

async function stopServer(server) {
  if (server.exited) return;
  server.child.kill(server.stopSignal);
  const timer = setTimeout(() => server.child.kill('SIGKILL'), STOP_TIMEOUT_MS);
  await server.done;
  clearTimeout(timer);
}

async function startPostgres() {
  if (process.env.DATABASE_URL) {
    log(`postgres: using DATABASE_URL from the environment (${redact(process.env.DATABASE_URL)})`);
    return;
  }
  const bin = findPostgresBin();
  if (!bin) {
    log('real-server suite skipped: postgres: DATABASE_URL is not set and no Postgres server binaries ' +
      '(initdb, postgres) were found on PATH or under /usr/lib/postgresql/*/bin');
    return;
  }
  // Postgres refuses to run as root: run it as the `postgres` system user the Debian package creates.
  let user;
  if (process.getuid?.() === 0) {
    user = systemUser('postgres');
    if (!user) {
      log(`real-server suite skipped: postgres: binaries found in ${bin}, but this runs as root, ` +
        'Postgres refuses to run as root, and there is no `postgres` system user to run it as ' +
        '(install the postgresql package, or set DATABASE_URL)');
      return;
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
    const init = spawnSync(
      join(bin, 'initdb'),
      ['-D', dataDir, '-U', 'postgres', '--auth=trust', '--encoding=UTF8', '--no-sync'],
      { ...asUser, cwd: dir, env, encoding: 'utf8' },
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
    process.env.DATABASE_URL = url;
    log(`postgres: started a throwaway server from ${bin} at ${url}${user ? ' (as user postgres)' : ''}`);
  } catch (err) {
    extraFailures++;
    log(`real-server suite skipped: postgres: the server could not be started (counted as a failure): ${err.message}`);
    log(tail(logFile));
  }
}

function redisPing(port) {
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

async function startRedis() {
  if (process.env.REDIS_URL) {
    log(`redis: using REDIS_URL from the environment (${redact(process.env.REDIS_URL)})`);
    return;
  }
  const bin = findOnPath('redis-server') ?? ['/usr/bin/redis-server', '/usr/sbin/redis-server'].find((p) => existsSync(p));
  if (!bin) {
    log('real-server suite skipped: redis: REDIS_URL is not set and no redis-server binary was found on PATH');
    return;
  }
  const dir = mkdtempSync(join(tmpdir(), 'countersign-redis-'));
  tempDirs.push(dir);
  const logFile = join(dir, 'redis.log');
  try {
    const port = await freePort();
    const server = startServer('redis', bin, [
      '--port', String(port),
      '--bind', '127.0.0.1',
      '--save', '',
      '--appendonly', 'no',
      '--dir', dir,
      '--daemonize', 'no',
    ], { cwd: dir }, logFile);
    await waitUntil('redis-server', server, () => redisPing(port));
    process.env.REDIS_URL = `redis://127.0.0.1:${port}`;
    log(`redis: started a throwaway server (${bin}) at ${process.env.REDIS_URL}`);
  } catch (err) {
    extraFailures++;
    log(`real-server suite skipped: redis: the server could not be started (counted as a failure): ${err.message}`);
    log(tail(logFile));
  }
}

/**
 * Counts results in tap's TAP output. Each test file is a subtest at indent 0, either
 * `# Subtest: file` … `ok N - file` (streamed) or `ok N - file {` … `}` (buffered, when files run
 * in parallel); the lines at exactly 4 spaces inside are its named subtests.
 */
function createCounter() {
  const counts = { passed: 0, failed: 0 };
  let file; // { failedSubtests, failed }
  const finish = () => {
    if (file?.failed && file.failedSubtests === 0) counts.failed++;
    file = undefined;
  };
  const line = (text) => {
    const sub = /^ {4}(not )?ok \d+( - .*)?$/.exec(text);
    if (sub) {
      // `not ok … # TODO` is not a failure in TAP (nor for tap's exit code).
      if (sub[1] && /# TODO\b/.test(text)) return;
      if (sub[1]) {
        counts.failed++;
        if (file) file.failedSubtests++;
      } else {
        counts.passed++;
      }
      return;
    }
    if (/^# Subtest: /.test(text)) {
      file = { failedSubtests: 0, failed: false };
      return;
    }
    const top = /^(not )?ok \d+( - .*)?$/.exec(text);
    if (top) {
      if (text.endsWith(' {')) {
        file = { failedSubtests: 0, failed: Boolean(top[1]) };
      } else {
        file ??= { failedSubtests: 0, failed: false };
        file.failed = Boolean(top[1]);
        finish();
      }
      return;
    }
    if (text === '}') finish();
  };
  return { counts, line };
}

function runTap(args) {
  return new Promise((resolveRun, reject) => {
    // Run the bin's script with this node rather than through its `#!/usr/bin/env node` line,
    // which depends on PATH.
    const tapBin = realpathSync(join(root, 'node_modules', '.bin', 'tap'));
    const child = spawn(process.execPath, [tapBin, '--reporter=tap', ...args], {
      cwd: root,
      env: process.env,
      stdio: ['ignore', 'pipe', 'inherit'],
    });
    runTap.child = child;
    const counter = createCounter();
    let pending = '';
    child.stdout.on('data', (chunk) => {
      process.stdout.write(chunk);
      pending += chunk.toString();
      const lines = pending.split('\n');
      pending = lines.pop() ?? '';
      for (const l of lines) counter.line(l.replace(/\r$/, ''));
    });
    child.once('error', reject);
    child.once('close', (code, signal) => {
      if (pending) counter.line(pending);
      resolveRun({ code: code ?? (signal ? 1 : 0), counts: counter.counts });
    });
  });
}

let cleaning;
function cleanup() {
  cleaning ??= (async () => {
    await Promise.all(started.map((s) => stopServer(s).catch(() => undefined)));
    for (const dir of tempDirs) rmSync(dir, { recursive: true, force: true });
  })();
  return cleaning;
}

for (const [signal, code] of [['SIGINT', 130], ['SIGTERM', 143]]) {
  process.on(signal, () => {
    runTap.child?.kill(signal);
    log(`\ninterrupted by ${signal}; stopping test servers`);
    cleanup().finally(() => process.exit(code));
  });
}

async function main() {
  await startPostgres();
  await startRedis();
  const { code, counts } = await runTap(process.argv.slice(2));
  counts.failed += extraFailures;
  if (code !== 0 && counts.failed === 0) {
    log(`tap exited with code ${code} without a failing test (coverage below the thresholds in .taprc, or a runner error; see above)`);
  }
  log(`${counts.passed} passed, ${counts.failed} failed`);
  return code !== 0 ? code : counts.failed > 0 ? 1 : 0;
}

let exitCode = 1;
try {
  exitCode = await main();
} catch (err) {
  log(`test runner error: ${err?.stack ?? err}`);
  // Keep the promise that the summary is the last line, even when nothing could run.
  log(`0 passed, ${extraFailures + 1} failed`);
} finally {
  await cleanup();
}
process.exit(exitCode);
