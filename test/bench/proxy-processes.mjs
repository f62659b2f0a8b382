/**
 * The child processes of the proxy benchmark and what the bench reads from them: the authority,
 * the Countersign proxy, nginx, the small servers of bench-servers.mjs and the load generator,
 * each started on loopback and stopped by `stopAll()` (also on the bench's exit, whatever ends
 * it). CPU and memory figures come from proc-stats.mjs.
 *
 * @example
 *   const upstream = await startBenchServer('upstream', { body: '{"ok":true}' });
 *   const result = await runGenerator(spec, { onWindowStart, onWindowEnd });
 *   await stopAll();
 */
import { spawn, spawnSync } from 'node:child_process';
import { once } from 'node:events';
import { accessSync, constants, readFileSync } from 'node:fs';
import { writeFile } from 'node:fs/promises';
import { delimiter, dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { request } from 'undici';
import { freePort } from '../support/servers.mjs';
import { describeExit, READY_TIMEOUT_MS, STOP_TIMEOUT_MS } from './bench-common.mjs';
import { withChildren } from './proc-stats.mjs';

const here = dirname(fileURLToPath(import.meta.url));
const root = resolve(here, '..', '..');
export const CLI = join(root, 'dist', 'bin', 'countersign.js');

/** The Node flags the proxy's container runs with (Dockerfile, helm/countersign-sidecar). */
export const PROXY_NODE_OPTIONS = '--max-semi-space-size=8 --max-old-space-size=96';

/** Child output kept for the report when one fails. */
const OUTPUT_LINES = 200;

/**
 * Every child still running; killed outright, with its own children (nginx's worker), if the
 * bench exits without stopping them.
 */
const running = new Set();
process.on('exit', () => {
  for (const child of running) {
    for (const pid of withChildren(child.pid).reverse()) {
      try {
        process.kill(pid, 'SIGKILL');
      } catch {
        // already gone
      }
    }
  }
});

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

/**
 * A child whose last output lines are kept, whose exit is a promise, and that `stop()` ends;
 * `stopAll()` and the bench's exit stop it too.
 */
export function track(name, child, { stopSignal = 'SIGTERM' } = {}) {
  const lines = [];
  const keep = (chunk) => {
    for (const line of String(chunk).split('\n')) {
      if (line.trim() === '') continue;
      lines.push(line);
      if (lines.length > OUTPUT_LINES) lines.shift();
    }
  };
  child.stderr?.on('data', keep);
  running.add(child);
  const proc = { name, child, pid: child.pid, exit: null, output: () => lines.join('\n'), keep };
  proc.exited = new Promise((r) => {
    child.once('exit', (code, signal) => r({ code, signal }));
    child.once('error', (error) => r({ code: null, signal: null, error }));
  }).then((exit) => {
    running.delete(child);
    proc.exit = exit;
    return exit;
  });
  /** SIGTERM (drain), SIGKILL when it does not stop; resolves how it ended. */
  proc.stop = async () => {
    if (!proc.exit) {
      child.kill(stopSignal);
      const timer = setTimeout(() => child.kill('SIGKILL'), STOP_TIMEOUT_MS);
      await proc.exited;
      clearTimeout(timer);
    }
    return proc.exit;
  };
  return proc;
}

async function answers200(url) {
  const response = await request(url, { headersTimeout: 2_000, bodyTimeout: 2_000 });
  await response.body.dump();
  return response.statusCode === 200;
}

/** Polls `url` until it answers 200; fails early, with the child's output, when the child exits. */
async function waitReady(proc, url) {
  const deadline = Date.now() + READY_TIMEOUT_MS;
  while (Date.now() < deadline) {
    if (proc.exit) throw new Error(`${proc.name} exited during start-up (${describeExit(proc.exit)}):\n${proc.output()}`);
    if (await answers200(url).catch(() => false)) return;
    await sleep(100);
  }
  throw new Error(`${proc.name} was not ready within ${READY_TIMEOUT_MS / 1000} s:\n${proc.output()}`);
}

/** Node's --cpu-prof for a child, when the bench was asked for profiles. */
const profileArgs = (dir, name) => (dir ? ['--cpu-prof', `--cpu-prof-dir=${resolve(dir)}`, `--cpu-prof-name=${name}.cpuprofile`] : []);

// ── Countersign ───────────────────────────────────────────────────────────────────────────────

/**
 * `countersign authority` on two free loopback ports, log level warn (info would log every request,
 * which the bench must not pay for), so readiness is polled on /readyz rather than read from a log.
 * `cli` may name another build's dist/bin/countersign.js and `nodeOptions` its Node flags
 * (evaluate-compare.mjs); `cpuProfileDir` gets its CPU profile when it exits; `env` adds variables
 * (evaluate-compare.mjs's tracing runs set OTEL_*).
 */
export async function startAuthority({ databaseUrl, redisUrl, dir, bootstrapKey, secretKey, configYaml, cli = CLI, nodeOptions, cpuProfileDir, env = {} }) {
  const configFile = join(dir, 'authority.yaml');
  await writeFile(configFile, configYaml);
  const [apiPort, adminPort] = [await freePort(), await freePort()];
  const child = spawn(process.execPath, [...profileArgs(cpuProfileDir, 'authority'), cli, 'authority', '--config', configFile], {
    cwd: root,
    env: {
      PATH: process.env.PATH,
      ...(nodeOptions ? { NODE_OPTIONS: nodeOptions } : {}),
      DATABASE_URL: databaseUrl,
      REDIS_URL: redisUrl,
      COUNTERSIGN_SECRET_KEY: secretKey,
      COUNTERSIGN_BOOTSTRAP_KEY: bootstrapKey,
      COUNTERSIGN_DATA_DIR: join(dir, 'data'),
      COUNTERSIGN_AUTHORITY_LISTEN: `127.0.0.1:${apiPort}`,
      COUNTERSIGN_AUTHORITY_ADMIN_LISTEN: `127.0.0.1:${adminPort}`,
      COUNTERSIGN_LOG_LEVEL: 'warn',
      ...env,
    },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  const proc = track('the authority', child);
  child.stdout.on('data', proc.keep);
  proc.url = `http://127.0.0.1:${apiPort}`;
  await waitReady(proc, `${proc.url}/readyz`);
  return proc;
}

/**
 * `countersign proxy --config <file>`; ready once /readyz says its keys and Redis are there. `cli`
 * may name another build's dist/bin/countersign.js and `nodeOptions` other Node flags, to compare a
 * change with the current one (proxy-compare.mjs). `env` adds variables (the durability rows set
 * COUNTERSIGN_STORE_DURABILITY); `name` names it in errors.
 */
export async function startCountersignProxy({ dir, redisUrl, yaml, cpuProfileDir, cli = CLI, nodeOptions, env = {}, name = 'the Countersign proxy' }) {
  const configFile = join(dir, 'proxy.yaml');
  const [port, adminPort] = [await freePort(), await freePort()];
  await writeFile(configFile, yaml({ listen: `127.0.0.1:${port}`, adminListen: `127.0.0.1:${adminPort}` }));
  const child = spawn(process.execPath, [...profileArgs(cpuProfileDir, 'proxy'), cli, 'proxy', '--config', configFile], {
    cwd: root,
    // The Redis URL by environment, so it is not written into the file.
    // The proxy runs with the Node flags its container gets (PROXY_NODE_OPTIONS: a small young
    // generation keeps the sidecar's RSS down at no measurable CPU cost); BENCH_PROXY_NODE_OPTIONS
    // replaces them, to measure another setting.
    env: { PATH: process.env.PATH, REDIS_URL: redisUrl, COUNTERSIGN_LOG_LEVEL: 'warn', NODE_OPTIONS: nodeOptions ?? process.env.BENCH_PROXY_NODE_OPTIONS ?? PROXY_NODE_OPTIONS, ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  const proc = track(name, child);
  child.stdout.on('data', proc.keep);
  proc.url = `http://127.0.0.1:${port}`;
  proc.adminUrl = `http://127.0.0.1:${adminPort}`;
  await waitReady(proc, `${proc.adminUrl}/readyz`);
  return proc;
}

// ── The bench's own servers and the load generator ────────────────────────────────────────────

/**
 * One of bench-servers.mjs's servers. The configuration goes over stdin (it may hold an API key);
 * stdin stays open, so the child exits by itself if this process dies.
 */
export async function startBenchServer(kind, config, { cpuProfileDir } = {}) {
  const child = spawn(process.execPath, [...profileArgs(cpuProfileDir, kind), join(here, 'bench-servers.mjs'), kind], {
    cwd: root,
    env: { PATH: process.env.PATH },
    stdio: ['pipe', 'pipe', 'pipe'],
  });
  const proc = track(`the ${kind} server`, child);
  child.stdin.write(`${JSON.stringify(config)}\n`);
  let buffered = '';
  const url = new Promise((resolveUrl, reject) => {
    child.stdout.on('data', (chunk) => {
      buffered += chunk;
      const newline = buffered.indexOf('\n');
      if (newline >= 0) resolveUrl(JSON.parse(buffered.slice(0, newline)).url);
    });
    proc.exited.then((exit) => reject(new Error(`${proc.name} exited during start-up (${describeExit(exit)}):\n${proc.output()}`)));
  });
  const timeout = sleep(READY_TIMEOUT_MS).then(() => {
    throw new Error(`${proc.name} was not ready within ${READY_TIMEOUT_MS / 1000} s:\n${proc.output()}`);
  });
  proc.url = await Promise.race([url, timeout]);
  return proc;
}

/**
 * Runs load-generator.mjs with `spec` and resolves its result. `onWindowStart`/`onWindowEnd` are
 * called when the generator opens and closes its measured window.
 */
export async function runGenerator(spec, { onWindowStart = () => {}, onWindowEnd = () => {} } = {}) {
  const child = spawn(process.execPath, [join(here, 'load-generator.mjs')], { cwd: root, env: { PATH: process.env.PATH }, stdio: ['pipe', 'pipe', 'pipe'] });
  const proc = track('the load generator', child);
  // The generator's spec can be tens of megabytes of permits: stream it, and let a write error surface as the exit.
  child.stdin.on('error', () => {});
  child.stdin.end(JSON.stringify(spec));
  let result = null;
  let buffered = '';
  const pending = [];
  child.stdout.on('data', (chunk) => {
    buffered += chunk;
    for (let newline = buffered.indexOf('\n'); newline >= 0; newline = buffered.indexOf('\n')) {
      const message = JSON.parse(buffered.slice(0, newline));
      buffered = buffered.slice(newline + 1);
      if (message.event === 'window-start') pending.push(onWindowStart());
      else if (message.event === 'window-end') pending.push(onWindowEnd());
      else if (message.event === 'result') result = message;
    }
  });
  const exit = await proc.exited;
  await Promise.all(pending);
  if (result === null) throw new Error(`the load generator failed (${describeExit(exit)}):\n${proc.output()}`);
  return result;
}

// ── nginx ─────────────────────────────────────────────────────────────────────────────────────

/** nginx on PATH or in /usr/sbin (Debian's place, often not on a user's PATH). */
export function findNginx() {
  const dirs = [...(process.env.PATH ?? '').split(delimiter), '/usr/sbin', '/usr/local/sbin', '/usr/local/nginx/sbin'];
  for (const dir of dirs.filter(Boolean)) {
    const candidate = join(dir, 'nginx');
    try {
      accessSync(candidate, constants.X_OK);
      return candidate;
    } catch {
      // not here
    }
  }
  return undefined;
}

export function nginxVersion(binary) {
  const { stderr } = spawnSync(binary, ['-v'], { encoding: 'utf8' });
  return /nginx\/(\S+)/.exec(stderr ?? '')?.[1] ?? 'unknown version';
}

/**
 * A reverse proxy as one would deploy it in front of a node service: one worker, keep-alive to
 * the upstream (HTTP/1.1, `Connection` cleared), no access log, no buffering to disk. Every path
 * it writes is in `dir`, and a root master keeps its worker as root: the default `nobody` could
 * not enter the bench's 0700 temp folder.
 */
function nginxConfig({ dir, port, upstreamPort }) {
  const temp = (name) => `${name}_temp_path ${join(dir, `${name}-temp`)};`;
  return `${process.getuid?.() === 0 ? 'user root;\n' : ''}worker_processes 1;
error_log ${join(dir, 'nginx-error.log')} warn;
events { worker_connections 4096; }
http {
  access_log off;
  ${['client_body', 'proxy', 'fastcgi', 'uwsgi', 'scgi'].map(temp).join('\n  ')}
  keepalive_requests 1000000;
  keepalive_timeout 120s;
  upstream app {
    server 127.0.0.1:${upstreamPort};
    keepalive 128;
    keepalive_requests 1000000;
    keepalive_timeout 120s;
  }
  server {
    listen 127.0.0.1:${port};
    location / {
      proxy_pass http://app;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_set_header X-Forwarded-For $remote_addr;
    }
  }
}
`;
}

/** nginx in the foreground as a child (`daemon off`), its configuration and pid file in `dir`. */
export async function startNginx({ binary, dir, upstreamUrl }) {
  const port = await freePort();
  const configFile = join(dir, 'nginx.conf');
  await writeFile(configFile, nginxConfig({ dir, port, upstreamPort: new URL(upstreamUrl).port }));
  const args = ['-p', dir, '-e', join(dir, 'nginx-error.log'), '-c', configFile, '-g', `daemon off; pid ${join(dir, 'nginx.pid')};`];
  const child = spawn(binary, args, { cwd: dir, stdio: ['ignore', 'pipe', 'pipe'] });
  const proc = track('nginx', child, { stopSignal: 'SIGQUIT' });
  child.stdout.on('data', proc.keep);
  proc.url = `http://127.0.0.1:${port}`;
  const readLog = () => {
    try {
      return readFileSync(join(dir, 'nginx-error.log'), 'utf8');
    } catch {
      return '';
    }
  };
  try {
    await waitReady(proc, `${proc.url}/ready`);
  } catch (error) {
    throw new Error(`${error.message}\n${readLog()}`);
  }
  return proc;
}

/** Stops every child still running (SIGTERM, then SIGKILL when one does not stop). */
export async function stopAll() {
  await Promise.all([...running].map((child) => {
    child.kill('SIGTERM');
    const timer = setTimeout(() => child.kill('SIGKILL'), STOP_TIMEOUT_MS);
    return once(child, 'exit').finally(() => clearTimeout(timer));
  }));
}

export { sleep };
