/**
 * `countersign keys rotate-signing [--purpose permit|audit]`: publishes a new signing key now;
 * it signs from `publish_before_use_seconds` later, and the old key stays published until every
 * permit it signed has expired. Runs against the database like the other admin commands (all
 * replicas pick the new key up by themselves), or through the server that holds the embedded
 * database (running-server.ts).
 *
 * Before anything is written it opens every private key in use (signing now or about to) with
 * the secret key in the environment (COUNTERSIGN_SECRET_KEY, or the embedded data directory's
 * secret.key): a new key sealed under another secret than the authority's would leave the
 * authority unable to sign with it. A secret that does not open them fails with
 * SECRET_KEY_MISMATCH (exit 1) and changes nothing.
 *
 * @example
 *   COUNTERSIGN_SECRET_KEY=… countersign keys rotate-signing --purpose audit
 *   # {"kid": "…", "purpose": "audit", "activates_at": "…", "published": ["…", "…"]}
 */
import { parseArgs } from 'node:util';
import { loadAuthorityConfig } from '../config.js';
import { openSecretBox } from '../signing/open.js';
import type { CliIo } from './admin-commands.js';
import { parseAdminInput } from './admin-operations.js';
import { runAdminCommandOn } from './running-server.js';

export async function runSigningCommand(argv: string[], io: CliIo): Promise<void> {
  const { values } = parseArgs({ args: argv, options: { config: { type: 'string' }, purpose: { type: 'string', default: 'permit' } } });
  const input = parseAdminInput('keys rotate-signing', { purpose: values.purpose });
  const config = await loadAuthorityConfig({ file: values.config, env: io.env });
  // Before the database: a secret key that is missing is a configuration error either way. A
  // server holding the embedded database rotates with its own secret, which opened its keys.
  const box = await openSecretBox(config);
  io.out(JSON.stringify(await runAdminCommandOn(config, 'keys rotate-signing', input, { box, notify: io.err }), null, 2));
}
