/**
 * The exit-3 message: a command could not open the embedded data directory because a running
 * server holds it (PGlite's lock, `<data dir>/pglite/countersign.lock`, names a live PID). It says
 * what to do instead: the equivalent API call (with the running server's address and the
 * bootstrap key's file filled in), stopping the server, or Postgres.
 *
 * @example
 *   console.error(await inUseMessage('keys list', ['--org', 'default'], { dataDir: '.countersign/pglite', pid: 4242 }));
 */
import { dirname, join, relative } from 'node:path';
import { parseArgs } from 'node:util';
import { findCommand } from './catalogue.js';

const SERVER_COMMANDS = new Set(['start', 'authority']);

/** Where the API listens, from the same configuration the command was given (default 127.0.0.1:7070). */
async function apiAddress(args: string[], env: NodeJS.ProcessEnv): Promise<string> {
  try {
    const { values } = parseArgs({ args, strict: false, allowPositionals: true, options: { config: { type: 'string' } } });
    const { loadAuthorityConfig } = await import('../authority/config.js');
    const config = await loadAuthorityConfig({ file: typeof values.config === 'string' ? values.config : undefined, env });
    const host = config.listen.host === '0.0.0.0' || config.listen.host === '::' ? '127.0.0.1' : config.listen.host;
    return `${host.includes(':') ? `[${host}]` : host}:${config.listen.port}`;
  } catch {
    return '127.0.0.1:7070';
  }
}

/** The JSON body of POST /v1/api-keys for what `keys create` was asked to do. */
function createBody(args: string[]): string {
  const { values } = parseArgs({ args, strict: false, allowPositionals: true, options: { name: { type: 'string' }, scopes: { type: 'string' }, 'allowed-cidrs': { type: 'string' }, actors: { type: 'string' }, 'expires-at': { type: 'string' } } });
  const split = (value: unknown) => (typeof value === 'string' ? value.split(',').map((item) => item.trim()).filter(Boolean) : undefined);
  const body = {
    name: typeof values.name === 'string' ? values.name : 'NAME',
    scopes: split(values.scopes) ?? ['evaluate:write'],
    ...(split(values['allowed-cidrs']) ? { allowed_cidrs: split(values['allowed-cidrs']) } : {}),
    ...(split(values.actors) ? { allowed_actors: split(values.actors) } : {}),
    ...(typeof values['expires-at'] === 'string' ? { expires_at: values['expires-at'] } : {}),
  };
  return JSON.stringify(body).replace(/'/g, "'\\''");
}

export async function inUseMessage(command: string, args: string[], lock: { dataDir: string; pid: number }, env: NodeJS.ProcessEnv = process.env): Promise<string> {
  // The lock sits in <data dir>/pglite; people know the data directory.
  const dataDir = lock.dataDir.endsWith('pglite') ? dirname(lock.dataDir) : lock.dataDir;
  const shown = relative(process.cwd(), dataDir) || '.';
  const head = `countersign: the embedded database in ${shown} is in use by a running server (PID ${lock.pid}); it can be opened by one process at a time`;
  if (SERVER_COMMANDS.has(command)) {
    return `${head}.\nStop that server first (kill -TERM ${lock.pid}), or give this one another data directory (COUNTERSIGN_DATA_DIR=… countersign ${command}).`;
  }
  const lines = [`${head}, so ${command} did not run and changed nothing.`];
  const ways: string[] = [];
  const whileRunning = findCommand(command)?.whileRunning;
  if (whileRunning?.startsWith('curl')) {
    const bootstrap = relative(process.cwd(), join(dataDir, 'bootstrap.json')) || 'bootstrap.json';
    const { positionals } = parseArgs({ args, strict: false, allowPositionals: true });
    const curl = whileRunning
      .replace('{api}', await apiAddress(args, env))
      .replace('{bootstrap}', bootstrap)
      .replace('{id}', positionals[0] ?? 'KEY_ID')
      .replace('{body}', command === 'keys create' ? createBody(args) : '{}');
    ways.push(`do it through the running server's API (here with the admin key of organization "default"; the API acts in the organization of the key you use):\n      ${curl}`);
  } else if (whileRunning) {
    lines.push(whileRunning);
  }
  ways.push(
    `stop the server (Ctrl-C where it runs, or kill -TERM ${lock.pid}), run the command, then start the server again`,
    'run Countersign on Postgres (DATABASE_URL), where administration commands work while servers run',
  );
  lines.push('Either:', ...ways.map((way, index) => `  - ${index === 0 ? '' : 'or '}${way}${index === ways.length - 1 ? '.' : ';'}`));
  return lines.join('\n');
}
