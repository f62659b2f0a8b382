/**
 * First start on an empty database: create organization `default` and an admin API key holding
 * every scope. The key is written to `<data dir>/bootstrap.json` (mode 0600) and never logged;
 * an automated install can supply it instead in COUNTERSIGN_BOOTSTRAP_KEY, and then no file is
 * written. Replicas starting together bootstrap once: the check runs under an advisory lock.
 *
 * @example
 *   const result = await bootstrap(db, { dataDir: '.countersign', clock });
 *   result?.file; // '.countersign/bootstrap.json'
 */
import { mkdir, readFile, writeFile, chmod } from 'node:fs/promises';
import { extname, join, resolve } from 'node:path';
import { SCOPES } from '../../shared/wire/scopes.js';
import { createApiKey } from '../api-keys/keys.js';
import type { PolicyFormat, PolicyVersions } from '../policy/versions.js';
import type { Db } from '../store/db.js';
import { packageRoot } from '../store/migrate.js';
import type { Clock } from '../time.js';
import { createOrganization } from './organizations.js';

const BOOTSTRAP_LOCK = 7_270_001;

export interface BootstrapOptions {
  dataDir: string;
  clock: Clock;
  /** COUNTERSIGN_BOOTSTRAP_KEY: use this secret for the admin key instead of generating one. */
  bootstrapKey?: string | undefined;
  /** The policy organization `default` starts with (config/policies/default.yaml unless configured). */
  policy?: { versions: PolicyVersions; source: string; format: PolicyFormat } | undefined;
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
}

/** Bootstraps an empty database; resolves null when organizations already exist. */
export async function bootstrap(db: Db, options: BootstrapOptions): Promise<BootstrapResult | null> {
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
    let file: string | null = null;
    if (options.bootstrapKey === undefined) {
      // Written before the commit: if the file cannot be written, nothing is created and the
      // next start tries again, rather than leaving an admin key nobody has.
      await mkdir(options.dataDir, { recursive: true, mode: 0o700 });
      file = resolve(join(options.dataDir, 'bootstrap.json'));
      const body = `${JSON.stringify({ organization_id: org.id, api_key: secret }, null, 2)}\n`;
      await writeFile(file, body, { mode: 0o600 });
      await chmod(file, 0o600);
    }
    return { organizationId: org.id, apiKeyId: key.id, file };
  });
}
