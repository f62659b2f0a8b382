/**
 * First start on an empty database: create organization `default` and an admin API key holding
 * every scope. The key is written to `<data dir>/bootstrap.json` (mode 0600) with the database it
 * belongs to, and never logged; an automated install can supply it instead in
 * COUNTERSIGN_BOOTSTRAP_KEY, and then no file is written. Replicas starting together bootstrap
 * once: the check runs under an advisory lock.
 *
 * An existing bootstrap.json is never overwritten: it holds the admin key of another database
 * (the embedded one, before DATABASE_URL pointed at an empty Postgres, say), which would be lost.
 * The new key then goes to `bootstrap-<time>.json` beside it (key-files.ts), and a warning names
 * both files and both databases.
 *
 * @example
 *   const result = await bootstrap(db, { dataDir: '.countersign', clock, logger });
 *   result?.file; // '.countersign/bootstrap.json', or '.countersign/bootstrap-20261125T101500Z.json'
 */
import { readFile } from 'node:fs/promises';
import { extname, join, resolve } from 'node:path';
import { SCOPES } from '../../shared/wire/scopes.js';
import { createApiKey } from '../api-keys/keys.js';
import type { PolicyFormat, PolicyVersions } from '../policy/versions.js';
import type { Db } from '../store/db.js';
import { packageRoot } from '../store/migrate.js';
import type { Clock } from '../time.js';
import { BOOTSTRAP_FILE, writeKeyFile } from './key-files.js';
import { createOrganization } from './organizations.js';

const BOOTSTRAP_LOCK = 7_270_001;

export interface BootstrapOptions {
  dataDir: string;
  clock: Clock;
  /** COUNTERSIGN_BOOTSTRAP_KEY: use this secret for the admin key instead of generating one. */
  bootstrapKey?: string | undefined;
  /** The policy organization `default` starts with (config/policies/default.yaml unless configured). */
  policy?: { versions: PolicyVersions; source: string; format: PolicyFormat } | undefined;
  /** Which database this is (never with its password); derived from `db` when not given. */
  database?: string | undefined;
  /** Told when bootstrap.json was kept and the new key went to another file. */
  logger?: { warn(fields: Record<string, unknown>, message: string): void } | undefined;
}

/** The bootstrap policy's text: the configured file, or the example shipped with the package. */
export async function readBootstrapPolicy(file: string | undefined): Promise<{ source: string; format: PolicyFormat }> {
  const path = file ?? join(packageRoot(), 'config', 'policies', 'default.yaml');
  return { source: await readFile(path, 'utf8'), format: extname(path) === '.json' ? 'json' : 'yaml' };
}

export interface BootstrapResult {
  organizationId: string;
  apiKeyId: string;
  /** Where the key was written; null when it came from COUNTERSIGN_BOOTSTRAP_KEY. */
  file: string | null;
  /** The existing bootstrap.json, left as it was, when the key went to another file. */
  kept: string | null;
}

/**
 * The database as bootstrap.json and the messages name it: `embedded:<data dir>` or
 * `postgres://user@host:port/name` as the server reports itself (no password in either).
 */
export async function describeDatabase(db: Db, dataDir: string): Promise<string> {
  if (db.kind === 'pglite') return `embedded:${resolve(dataDir)}`;
  const [row] = await db.query<{ name: string; user: string; host: string | null; port: number | null }>(
    'SELECT current_database() AS name, current_user AS user, host(inet_server_addr()) AS host, inet_server_port() AS port',
  );
  if (!row) return 'postgres';
  const where = row.host === null ? 'local-socket' : `${row.host.includes(':') ? `[${row.host}]` : row.host}:${row.port ?? 5432}`;
  return `postgres://${row.user}@${where}/${row.name}`;
}

/** The database an existing bootstrap file records, for the warning. */
async function recordedDatabase(file: string): Promise<string> {
  try {
    const recorded = (JSON.parse(await readFile(file, 'utf8')) as { database?: unknown }).database;
    if (typeof recorded === 'string') return recorded;
  } catch {
    // Unreadable or not JSON: still not ours to overwrite.
  }
  return 'not recorded';
}

/** Bootstraps an empty database; resolves null when organizations already exist. */
export async function bootstrap(db: Db, options: BootstrapOptions): Promise<BootstrapResult | null> {
  // Outside the transaction: the embedded database has a single connection.
  const database = options.database ?? (await describeDatabase(db, options.dataDir));
  return db.transaction(async (tx) => {
    await tx.query('SELECT pg_advisory_xact_lock($1)', [BOOTSTRAP_LOCK]);
    const existing = await tx.query('SELECT 1 FROM organizations LIMIT 1');
    if (existing.length > 0) return null;
    const org = await createOrganization(tx, { name: 'default', plan: 'community', isTest: true }, options.clock);
    const { key, secret } = await createApiKey(
      tx,
      { org, name: 'bootstrap admin', scopes: SCOPES, createdBy: 'bootstrap', secret: options.bootstrapKey },
      options.clock,
    );
    if (options.policy) {
      const { versions, source, format } = options.policy;
      await versions.put(tx, { orgId: org.id, source, format, createdBy: 'bootstrap', requestId: null });
    }
    if (options.bootstrapKey !== undefined) return { organizationId: org.id, apiKeyId: key.id, file: null, kept: null };
    // Written before the commit: if the file cannot be written, nothing is created and the
    // next start tries again, rather than leaving an admin key nobody has.
    const { file, kept } = await writeKeyFile(options.dataDir, BOOTSTRAP_FILE, `${JSON.stringify({ organization_id: org.id, api_key: secret, database }, null, 2)}\n`, options.clock);
    if (kept !== null) {
      const keptDatabase = await recordedDatabase(kept);
      options.logger?.warn(
        { file, kept, database, kept_database: keptDatabase },
        `${kept} was kept: it holds the admin key of another database (${keptDatabase}), or of this one before it was emptied. ` +
          `This database (${database}) was empty, so organization "default" was created again; its admin API key is in ${file}. ` +
          'Each key works only against its own database.',
      );
    }
    return { organizationId: org.id, apiKeyId: key.id, file, kept };
  });
}
