#!/usr/bin/env node
/**
 * The `countersign` command. It only dispatches: each process role owns its commands.
 *
 *   countersign start [--config …] [--proxy-config …] the authority, a demo upstream and the proxy (npm start)
 *   countersign authority [--config authority.yaml]   run the authority
 *   countersign proxy [--config proxy.yaml]           run the proxy sidecar
 *   countersign migrate [--config …]                  apply database migrations
 *   countersign orgs create|list …                    manage organizations
 *   countersign keys create|list|revoke …             manage API keys
 *   countersign keys rotate-signing [--purpose …]     rotate the permit or audit signing key
 *   countersign audit verify <bundle> --key <pem>     verify an exported audit bundle offline
 */
import { parseArgs } from 'node:util';
import { runAdminCommand, UsageError } from '../authority/cli/admin-commands.js';
import { runAuditCommand } from '../authority/cli/audit-commands.js';
import { runSigningCommand } from '../authority/cli/signing-commands.js';
import { ConfigError, loadAuthorityConfig } from '../authority/config.js';
import { startAuthority } from '../authority/main.js';
import { runProxyCommand } from '../proxy/cli.js';
import { ProxyConfigError } from '../proxy/config.js';
import { runStart } from './start.js';

const USAGE = `usage: countersign <command> [options]

  start [--config FILE] [--proxy-config FILE]
                                     the authority, a demo upstream (127.0.0.1:7090) and the proxy
                                     in front of it (127.0.0.1:7080), in one process (npm start)
  authority [--config FILE]          run the authority (API 127.0.0.1:7070, metrics 127.0.0.1:7071)
  proxy [--config FILE]              run the proxy sidecar (127.0.0.1:7080, admin 127.0.0.1:7081;
                                     default config/proxy.yaml; SIGHUP or a file change reloads)
  migrate [--config FILE]            apply database migrations
  orgs create --name NAME [--plan community|team|business|enterprise] [--test]
  orgs list
  keys create --org ORG --name NAME --scopes a:b,c:d [--allowed-cidrs 10.0.0.0/8,…] [--expires-at ISO]
  keys list --org ORG
  keys revoke KEY_ID --org ORG
  keys rotate-signing [--purpose permit|audit]
                                     publish a new signing key; it signs after publish_before_use_seconds
  audit verify BUNDLE --key PEM [--checkpoint FILE [--checkpoint-key PEM]]
                                     verify an exported audit bundle offline (exit 1 on any problem)

Administration commands work on DATABASE_URL, or on the embedded data directory
(COUNTERSIGN_DATA_DIR, default ./.countersign) while the server is stopped.`;

async function runAuthority(args: string[]): Promise<void> {
  const { values } = parseArgs({ args, options: { config: { type: 'string' } } });
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

async function main(argv: string[]): Promise<number> {
  const [command, ...rest] = argv;
  if (command === undefined || command === 'help' || command === '--help' || command === '-h') {
    console.log(USAGE);
    return command === undefined ? 2 : 0;
  }
  try {
    if (command === 'authority') {
      await runAuthority(rest);
      return -1; // keeps running until a signal
    }
    if (command === 'proxy') {
      await runProxyCommand(rest);
      return -1;
    }
    if (command === 'start') {
      await runStart(rest);
      return -1;
    }
    const io = { out: (line: string) => console.log(line), env: process.env };
    if (command === 'audit') return await runAuditCommand(rest, io);
    if (command === 'keys' && rest[0] === 'rotate-signing') {
      await runSigningCommand(rest.slice(1), io);
      return 0;
    }
    await runAdminCommand(argv, io);
    return 0;
  } catch (error) {
    const usage = error instanceof UsageError || String((error as { code?: unknown }).code).startsWith('ERR_PARSE_ARGS');
    if (usage || error instanceof ConfigError || error instanceof ProxyConfigError) {
      console.error(`countersign: ${(error as Error).message}`);
      if (usage) console.error(`\n${USAGE}`);
      return 2;
    }
    const code = (error as { code?: string }).code;
    console.error(`countersign: ${(error as Error).message}${code ? ` (${code})` : ''}`);
    return 1;
  }
}

main(process.argv.slice(2)).then((code) => {
  if (code >= 0) process.exitCode = code;
});
