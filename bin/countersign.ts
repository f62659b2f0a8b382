#!/usr/bin/env node
/**
 * The `countersign` command. It dispatches, and it owns the conventions every command keeps:
 * `--help`/`-h` on any command prints that command's help (bin/catalogue.ts, rendered by
 * bin/help.ts); `--version`; a usage error prints what is wrong and that command's usage only;
 * exit codes 0 success, 1 failed, 2 usage error, 3 data directory in use by a running server.
 *
 * @example
 *   countersign --version
 *   countersign keys create --help
 *   countersign keys create --org acme --name ci --scopes evaluate:write,verify:execute
 */
import { parseArgs } from 'node:util';
import { UsageError } from '../shared/usage-error.js';
import { findCommand, subcommandsOf, topLevelNames } from './catalogue.js';
import { commandHelp, countersignVersion, groupHelp, optionNames, suggest, topLevelHelp, usageFor } from './help.js';

// Each command loads only its own modules: a proxy sidecar must not carry the authority (its
// database drivers, PGlite, the policy engine) in memory.

/** Failures whose message already says what to do: printed without their code. */
const SELF_EXPLAINED = new Set(['PROXY_KEY_STALE']);

/** Errors that are the caller's to fix without a usage line (exit code 2), by their stable codes. */
const CONFIG_CODES = new Set(['CONFIG_INVALID', 'PROXY_CONFIG_INVALID']);

/** Hints for runtime failures, by error code: what to check. */
const RUNTIME_HINTS: Record<string, string> = {
  ECONNREFUSED: 'nothing answers there: check that the server runs and that DATABASE_URL (or the URL given) is right',
  ENOTFOUND: 'that host name does not resolve: check DATABASE_URL (or the URL given)',
  ETIMEDOUT: 'the connection timed out: check the address and the network path to it',
  '28P01': 'Postgres refused the credentials in DATABASE_URL',
  '3D000': 'that database does not exist on the Postgres server: create it (createdb) or fix DATABASE_URL',
  EADDRINUSE: 'another process listens on that address: stop it, or choose another with the COUNTERSIGN_*_LISTEN variables',
  EACCES: 'permission denied: check the file permissions (or use a port above 1024)',
};

const isHelp = (arg: string) => arg === '--help' || arg === '-h';
/** Arguments before `--`: a `-h` after it is a value, not a request for help. */
const wantsHelp = (args: string[]) => {
  const end = args.indexOf('--');
  return (end === -1 ? args : args.slice(0, end)).some(isHelp);
};

async function runAuthority(args: string[]): Promise<void> {
  const { values } = parseArgs({ args, options: { config: { type: 'string' } } });
  const [{ loadAuthorityConfig }, { startAuthority }] = await Promise.all([import('../authority/config.js'), import('../authority/main.js')]);
  const config = await loadAuthorityConfig({ file: values.config });
  const running = await startAuthority(config);
  let closing = false;
  const shutdown = (signal: string) => {
    if (closing) return;
    closing = true;
    running.app.log.info({ signal }, 'shutting down: draining in-flight requests');
    running.close().then(
      () => process.exit(0),
      () => process.exit(1),
    );
  };
  process.once('SIGTERM', () => shutdown('SIGTERM'));
  process.once('SIGINT', () => shutdown('SIGINT'));
}

/** Runs the command `name` (`keys create`) with the arguments after it. -1: a server that keeps running. */
async function run(name: string, args: string[]): Promise<number> {
  const io = { out: (line: string) => console.log(line), err: (line: string) => console.error(line), env: process.env };
  switch (name) {
    case 'authority':
      await runAuthority(args);
      return -1;
    case 'proxy':
      await (await import('../proxy/cli.js')).runProxyCommand(args);
      return -1;
    case 'start':
      await (await import('./start.js')).runStart(args);
      return -1;
    case 'audit verify':
      return (await import('../authority/cli/audit-commands.js')).runAuditCommand(['verify', ...args], io);
    case 'keys rotate-signing': {
      const code: unknown = await (await import('../authority/cli/signing-commands.js')).runSigningCommand(args, io);
      return typeof code === 'number' ? code : 0;
    }
    case 'policy test':
    case 'policy replay':
      return (await import('../authority/cli/policy-commands.js')).runPolicyCommand([name.slice('policy '.length), ...args], io);
    default:
      await (await import('../authority/cli/admin-commands.js')).runAdminCommand([...name.split(' '), ...args], io);
      return 0;
  }
}

/** Node's parseArgs messages, said the way the rest of the CLI speaks (and without its hint about `--`). */
function usageMessage(error: Error & { code?: unknown }, command: string): string {
  const message = error.message;
  if (error.code === 'ERR_PARSE_ARGS_UNKNOWN_OPTION') {
    const option = /'(-[^' ]*)'/.exec(message)?.[1] ?? message;
    const close = suggest(option, optionNames(command));
    return `unknown option ${option}${close ? ` (did you mean ${close}?)` : ''}`;
  }
  if (error.code === 'ERR_PARSE_ARGS_INVALID_OPTION_VALUE') {
    const option = /'(-[^' ]*)/.exec(message)?.[1];
    if (option && /argument missing/.test(message)) return `${option} needs a value`;
    if (option && /does not take an argument/.test(message)) return `${option} takes no value`;
  }
  if (error.code === 'ERR_PARSE_ARGS_UNEXPECTED_POSITIONAL') {
    return `unexpected argument ${/'[^']*'/.exec(message)?.[0] ?? message}`;
  }
  // A command module may append its own usage line; the catalogue's is printed instead.
  const own = message.split(/\n?usage: /)[0]?.trim();
  return own ? own : 'missing or extra arguments';
}

function messageOf(error: unknown): string {
  const err = error as Error & { errors?: Error[] };
  // Node reports a refused connection to a name with several addresses as an AggregateError with no message.
  return err.message || err.errors?.[0]?.message || String(err);
}

async function main(argv: string[]): Promise<number> {
  const [first, ...rest] = argv;
  if (first === '--version' || first === '-v' || first === 'version') {
    console.log(`countersign ${countersignVersion()}\nnode ${process.version}`);
    return 0;
  }
  if (first === undefined) {
    console.error(`countersign: no command given\n\n${topLevelHelp()}`);
    return 2;
  }
  if (first === 'help' || isHelp(first)) {
    const [group, sub] = first === 'help' ? rest : [];
    if (group === undefined) {
      console.log(topLevelHelp());
      return 0;
    }
    return printHelp(group, sub);
  }

  let command = first;
  let args = rest;
  try {
    if (first.startsWith('-')) throw new UsageError(`unknown option ${first}; options follow the command`);
    if (!topLevelNames().includes(first)) {
      const close = suggest(first, topLevelNames());
      throw new UsageError(`unknown command '${first}'${close ? ` (did you mean '${close}'?)` : ''}`);
    }
    const subs = subcommandsOf(first);
    if (subs.length > 0) {
      const [sub, ...after] = rest;
      if (sub === undefined || isHelp(sub)) {
        if (sub !== undefined) return printHelp(first);
        throw new UsageError(`${first} needs a subcommand: ${subs.map((entry) => entry.name.slice(first.length + 1)).join(', ')}`);
      }
      if (!findCommand(`${first} ${sub}`)) {
        const close = suggest(sub, subs.map((entry) => entry.name.slice(first.length + 1)));
        throw new UsageError(`unknown command '${first} ${sub}'${close ? ` (did you mean '${first} ${close}'?)` : ''}`);
      }
      command = `${first} ${sub}`;
      args = after;
    }
    if (wantsHelp(args)) return printHelp(command);
    return await run(command, args);
  } catch (error) {
    const err = error as Error & { code?: unknown; dataDir?: string; pid?: number };
    const code = String(err.code);
    if (code === 'USAGE' || code.startsWith('ERR_PARSE_ARGS')) {
      const known = findCommand(command) || subcommandsOf(command).length > 0 || topLevelNames().includes(command) ? command : '';
      console.error(`countersign: ${usageMessage(err, command)}\n${usageFor(known)}`);
      return 2;
    }
    if (CONFIG_CODES.has(code)) {
      console.error(`countersign: ${err.message}`);
      return 2;
    }
    if (code === 'DATA_DIR_LOCKED' && err.dataDir !== undefined && err.pid !== undefined && err.pid !== process.pid) {
      const { inUseMessage } = await import('./in-use.js');
      console.error(await inUseMessage(command, args, { dataDir: err.dataDir, pid: err.pid }));
      return 3;
    }
    const hint = RUNTIME_HINTS[code];
    console.error(`countersign: ${messageOf(err)}${code !== 'undefined' && !hint && !SELF_EXPLAINED.has(code) ? ` (${code})` : ''}${hint ? `\n${hint}` : ''}`);
    return 1;
  }
}

/** `countersign help keys create`, `countersign keys --help`: exit 0, or 2 for a command that does not exist. */
function printHelp(group: string, sub?: string): number {
  const name = sub === undefined ? group : `${group} ${sub}`;
  const entry = findCommand(name);
  if (entry) console.log(commandHelp(entry));
  else if (sub === undefined && subcommandsOf(group).length > 0) console.log(groupHelp(group));
  else {
    const close = suggest(name, [...topLevelNames(), ...topLevelNames().flatMap((top) => subcommandsOf(top).map((entry) => entry.name))]);
    console.error(`countersign: no command '${name}'${close ? ` (did you mean '${close}'?)` : ''}\nrun 'countersign --help' for the commands`);
    return 2;
  }
  return 0;
}

main(process.argv.slice(2)).then((code) => {
  if (code >= 0) process.exitCode = code;
});
