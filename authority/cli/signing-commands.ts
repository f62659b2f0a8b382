/**
 * `countersign keys rotate-signing [--purpose permit|audit]`: publishes a new signing key now;
 * it signs from `publish_before_use_seconds` later, and the old key stays published until every
 * permit it signed has expired. Runs against the database like the other admin commands (all
 * replicas pick the new key up by themselves).
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
import { openSecretBox, openSigning } from '../signing/open.js';
import { migrate } from '../store/migrate.js';
import { openDb } from '../store/open.js';
import { systemClock } from '../time.js';
import { UsageError } from '../../shared/usage-error.js';
import type { CliIo } from './admin-commands.js';

export async function runSigningCommand(argv: string[], io: CliIo): Promise<void> {
  const { values } = parseArgs({ args: argv, options: { config: { type: 'string' }, purpose: { type: 'string', default: 'permit' } } });
  if (values.purpose !== 'permit' && values.purpose !== 'audit') throw new UsageError('--purpose is permit or audit');
  const config = await loadAuthorityConfig({ file: values.config, env: io.env });
  const box = await openSecretBox(config);
  const db = await openDb({ databaseUrl: config.database_url, dataDir: config.data_dir });
  try {
    await migrate(db);
    const keys = await openSigning(db, box, config, systemClock);
    const record = await keys.rotate(values.purpose);
    io.out(
      JSON.stringify(
        { kid: record.kid, purpose: record.purpose, activates_at: record.activatesAt.toISOString(), published: (await keys.published(values.purpose)).map((key) => key.kid) },
        null,
        2,
      ),
    );
  } finally {
    await db.close();
  }
}
