/**
 * A Redis server of the test's own, for fault injection: killed with SIGKILL, restarted on the same
 * port (with or without its data), paused with SIGSTOP and resumed. The shared test Redis
 * (REDIS_URL) is never touched this way, since other test files use it at the same time.
 *
 * @example
 *   const redis = await startRedisProcess(t, { persistence: 'none' });
 *   if (!redis) return; // no redis-server installed: t.comment says so
 *   const store = new RedisStore({ url: redis.url });
 *   await redis.crash();   // SIGKILL
 *   await redis.start();   // same port; without persistence the data is gone
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { createConnection } from 'node:net';
import { tmpdir } from 'node:os';
import { delimiter, join } from 'node:path';
import type { Test } from 'tap';
import { freePort } from '../support/servers.mjs';

export interface RedisProcess {
  url: string;
  port: number;
  /** (Re)starts the server on the same port and folder; resolves once it answers PING. */
  start(): Promise<void>;
  /** SIGKILL: no shutdown save, no AOF rewrite; what was not fsynced is lost. */
  crash(): Promise<void>;
  /** SIGSTOP: the connection stays open, nothing is answered. */
  pause(): void;
  /** SIGCONT. */
  resume(): void;
  /** Sends one command over a raw connection and resolves the first reply line (tests only). */
  command(...args: string[]): Promise<string>;
}

export interface RedisProcessOptions {
  /** `none`: no AOF, no snapshots; `aof`: appendonly with appendfsync always. */
  persistence: 'none' | 'aof';
  /** Extra `--name value` arguments. */
  args?: string[];
}

/** Why a fault test did not run; printed with t.comment, never a silent skip. */
export const REDIS_SERVER_NOT_FOUND = 'no redis-server binary on PATH (CI installs the redis-server package)';

export function redisServerBinary(): string | undefined {
  for (const dir of (process.env.PATH ?? '').split(delimiter)) {
    if (dir && existsSync(join(dir, 'redis-server'))) return join(dir, 'redis-server');
  }
  return ['/usr/bin/redis-server', '/usr/sbin/redis-server'].find((path) => existsSync(path));
}

/** Starts a server for this test (stopped and removed at teardown), or undefined when none is installed. */
export async function startRedisProcess(t: Test, options: RedisProcessOptions): Promise<RedisProcess | undefined> {
  const bin = redisServerBinary();
  if (!bin) {
    t.comment(`fault test not run: ${REDIS_SERVER_NOT_FOUND}`);
    return undefined;
  }
  const dir = mkdtempSync(join(tmpdir(), 'countersign-redis-fault-'));
  const port: number = await freePort();
  const persistence =
    options.persistence === 'aof' ? ['--appendonly', 'yes', '--appendfsync', 'always'] : ['--appendonly', 'no'];
  const args = ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--dir', dir, ...persistence, ...(options.args ?? [])];
  let child: ChildProcess | undefined;
  let exited: Promise<void> = Promise.resolve();

  const command = (...parts: string[]) =>
    new Promise<string>((resolve, reject) => {
      const socket = createConnection({ host: '127.0.0.1', port });
      let reply = '';
      socket.setTimeout(5_000, () => socket.destroy(new Error('no reply within 5 s')));
      socket.on('connect', () => socket.write(`*${parts.length}\r\n${parts.map((p) => `$${Buffer.byteLength(p)}\r\n${p}\r\n`).join('')}`));
      socket.on('data', (data) => {
        reply += data.toString();
        if (reply.includes('\r\n')) socket.end();
      });
      socket.on('error', reject);
      socket.on('close', () => resolve(reply.split('\r\n')[0] ?? ''));
    });

  const redis: RedisProcess = {
    url: `redis://127.0.0.1:${port}`,
    port,
    async start() {
      const started = spawn(bin, args, { stdio: 'ignore', cwd: dir });
      child = started;
      exited = new Promise((resolve) => started.once('exit', () => resolve()));
      for (let attempt = 0; attempt < 300; attempt++) {
        if ((await command('PING').catch(() => '')) === '+PONG') return;
        await new Promise((resolve) => setTimeout(resolve, 50));
      }
      throw new Error(`redis-server on port ${port} did not answer PING`);
    },
    async crash() {
      child?.kill('SIGCONT');
      child?.kill('SIGKILL');
      await exited;
    },
    pause() {
      child?.kill('SIGSTOP');
    },
    resume() {
      child?.kill('SIGCONT');
    },
    command,
  };
  t.teardown(async () => {
    await redis.crash();
    rmSync(dir, { recursive: true, force: true });
  });
  await redis.start();
  return redis;
}
