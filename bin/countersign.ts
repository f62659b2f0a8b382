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

// Each command loads only its own modules: a proxy sidecar must not carry the authority (its
// database drivers, PGlite, the policy engine) in memory.

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

/** Errors that are the caller's to fix (exit code 2), by their stable codes. */
const USAGE_CODES = new Set(['USAGE', 'CONFIG_INVALID', 'PROXY_CONFIG_INVALID']);

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
      await (await import('../proxy/cli.js')).runProxyCommand(rest);
      return -1;
    }
    if (command === 'start') {
      await (await import('./start.js')).runStart(rest);
      return -1;
    }
    const io = { out: (line: string) => console.log(line), env: process.env };
    if (command === 'audit') return await (await import('../authority/cli/audit-commands.js')).runAuditCommand(rest, io);
    if (command === 'keys' && rest[0] === 'rotate-signing') {
      await (await import('../authority/cli/signing-commands.js')).runSigningCommand(rest.slice(1), io);
      return 0;
    }
    await (await import('../authority/cli/admin-commands.js')).runAdminCommand(argv, io);
    return 0;
  } catch (error) {
    const code = String((error as { code?: unknown }).code);
    const usage = code === 'USAGE' || code.startsWith('ERR_PARSE_ARGS');
    if (usage || USAGE_CODES.has(code)) {
      console.error(`countersign: ${(error as Error).message}`);
      if (usage) console.error(`\n${USAGE}`);
      return 2;
    }
    console.error(`countersign: ${(error as Error).message}${code !== 'undefined' ? ` (${code})` : ''}`);
    return 1;
  }
}

main(process.argv.slice(2)).then((code) => {
  if (code >= 0) process.exitCode = code;
});
