/**
 * `countersign migrate | orgs … | keys …`: administration straight against the database
 * (DATABASE_URL, or the embedded data directory while no server runs on it: opening it then
 * fails with DATA_DIR_LOCKED, which bin/countersign.ts turns into exit 3 and what to do instead).
 * Every command prints JSON on stdout; `migrate` also says on stderr what it did.
 *
 * @example
 *   countersign migrate            # {"applied": ["0001_foundation", …]}, then {"applied": []}
 *   countersign orgs create --name acme --plan business
 *   countersign keys create --org acme --name ci --scopes evaluate:write,verify:execute
 */
import { parseArgs } from 'node:util';
import { z } from 'zod';
import { Cidr, CreateApiKeyRequest, newKeyExpiryProblem } from '../../shared/wire/api-keys.js';
import { UsageError } from '../../shared/usage-error.js';
import { Scope } from '../../shared/wire/scopes.js';
import { apiKeyToWire, createApiKey, listApiKeys, revokeApiKey } from '../api-keys/keys.js';
import { formatIssues, loadAuthorityConfig, PLANS } from '../config.js';
import {
  createOrganization,
  findOrganization,
  listOrganizations,
  OrganizationName,
  organizationToJson,
  type Organization,
} from '../orgs/organizations.js';
import type { Db } from '../store/db.js';
import { migrate } from '../store/migrate.js';
import { openDb } from '../store/open.js';
import { systemClock } from '../time.js';

export interface CliIo {
  out(line: string): void;
  /** Messages for a person (stderr for the real command); machine-readable output stays on `out`. */
  err?(line: string): void;
  /** Where DATABASE_URL and COUNTERSIGN_* come from (process.env for the real command). */
  env: NodeJS.ProcessEnv;
}

const list = (value: string | undefined): string[] =>
  value === undefined ? [] : value.split(',').map((item) => item.trim()).filter(Boolean);

function validate<T>(schema: z.ZodType<T>, value: unknown, what: string): T {
  const result = schema.safeParse(value);
  if (!result.success) throw new UsageError(formatIssues(what, result.error));
  return result.data;
}

/** Runs `fn` on the configured database, migrated first unless `fn` is the migration itself. */
async function withDb<T>(configFile: string | undefined, env: NodeJS.ProcessEnv, fn: (db: Db) => Promise<T>, options: { migrateFirst?: boolean } = {}): Promise<T> {
  const config = await loadAuthorityConfig({ file: configFile, env });
  const db = await openDb({ databaseUrl: config.database_url, dataDir: config.data_dir });
  try {
    if (options.migrateFirst ?? true) await migrate(db);
    return await fn(db);
  } finally {
    await db.close();
  }
}

/** Checked before the database is opened, so a missing --org costs nothing. */
function orgArgument(value: string | undefined): string {
  if (!value) throw new UsageError('--org is required: the organization, by id or name');
  return value;
}

async function requireOrg(db: Db, idOrName: string): Promise<Organization> {
  const org = await findOrganization(db, idOrName);
  if (!org) throw new UsageError(`no organization "${idOrName}"`);
  return org;
}

const print = (io: CliIo, value: unknown) => io.out(JSON.stringify(value, null, 2));

type OptionSpec = NonNullable<Parameters<typeof parseArgs>[0]>['options'];

const CONFIG = { config: { type: 'string' } } as const;
/** Each command accepts its own options only: a misspelt or misplaced one is a usage error. */
const OPTIONS: Record<string, OptionSpec> = {
  migrate: CONFIG,
  'orgs create': { ...CONFIG, name: { type: 'string' }, plan: { type: 'string' }, test: { type: 'boolean' } },
  'orgs list': CONFIG,
  'keys create': { ...CONFIG, org: { type: 'string' }, name: { type: 'string' }, scopes: { type: 'string' }, 'allowed-cidrs': { type: 'string' }, 'expires-at': { type: 'string' } },
  'keys list': { ...CONFIG, org: { type: 'string' } },
  'keys revoke': { ...CONFIG, org: { type: 'string' } },
};

/** `argv` is what follows `countersign`: `['keys', 'create', '--org', 'acme', …]`. */
export async function runAdminCommand(argv: string[], io: CliIo): Promise<void> {
  const [group, verb] = argv;
  const command = group === 'migrate' ? 'migrate' : `${group ?? ''} ${verb ?? ''}`.trim();
  const options = OPTIONS[command];
  if (!options) throw new UsageError(`unknown command: ${command}`);
  const parsed = parseArgs({ args: argv.slice(command.split(' ').length), allowPositionals: command === 'keys revoke', strict: true, options });
  const values = parsed.values as Record<string, string | boolean | undefined>;
  const text = (name: string) => values[name] as string | undefined;
  const positionals = parsed.positionals;
  const configFile = text('config');

  if (command === 'migrate') {
    const applied = await withDb(configFile, io.env, async (db) => (await migrate(db)).applied, { migrateFirst: false });
    io.err?.(applied.length === 0 ? 'the schema is up to date: no migration to apply' : `applied ${applied.length} migration${applied.length === 1 ? '' : 's'}: ${applied.join(', ')}`);
    return print(io, { applied });
  }

  if (command === 'orgs create') {
    const input = validate(
      z.object({ name: z.string({ message: '--name is required' }).pipe(OrganizationName), plan: z.enum(PLANS).default('community') }),
      { name: text('name'), plan: text('plan') },
      'orgs create',
    );
    const org = await withDb(configFile, io.env, (db) => createOrganization(db, { ...input, isTest: values.test === true }, systemClock));
    return print(io, { organization: organizationToJson(org) });
  }
  if (command === 'orgs list') {
    const orgs = await withDb(configFile, io.env, (db) => listOrganizations(db));
    return print(io, { organizations: orgs.map(organizationToJson) });
  }

  if (command === 'keys create') {
    const orgName = orgArgument(text('org'));
    const input = validate(
      z.object({
        name: z.string({ message: '--name is required' }).min(1),
        scopes: z.array(Scope).min(1, { message: '--scopes is required: at least one resource:action scope' }),
        allowedCidrs: z.array(Cidr).optional(),
        expiresAt: CreateApiKeyRequest.shape.expires_at,
      }),
      {
        name: text('name'),
        scopes: list(text('scopes')),
        allowedCidrs: text('allowed-cidrs') === undefined ? undefined : list(text('allowed-cidrs')),
        expiresAt: text('expires-at'),
      },
      'keys create',
    );
    const expiresAt = input.expiresAt === undefined ? undefined : new Date(input.expiresAt);
    // Checked before the database is opened, as the other arguments are.
    const expiryProblem = expiresAt === undefined ? null : newKeyExpiryProblem(expiresAt, systemClock.now());
    if (expiryProblem !== null) throw new UsageError(`--expires-at ${expiryProblem}: ${input.expiresAt} has passed`);
    const created = await withDb(configFile, io.env, async (db) =>
      createApiKey(
        db,
        {
          org: await requireOrg(db, orgName),
          name: input.name,
          scopes: input.scopes,
          allowedCidrs: input.allowedCidrs,
          expiresAt,
          createdBy: 'cli',
        },
        systemClock,
      ),
    );
    return print(io, { api_key: apiKeyToWire(created.key), secret: created.secret });
  }
  if (command === 'keys list') {
    const orgName = orgArgument(text('org'));
    const keys = await withDb(configFile, io.env, async (db) => listApiKeys(db, (await requireOrg(db, orgName)).id));
    return print(io, { api_keys: keys.map(apiKeyToWire) });
  }
  // keys revoke
  const [id, extra] = positionals;
  if (!id) throw new UsageError('KEY_ID is required: the id of the key to revoke (from keys list)');
  if (extra !== undefined) throw new UsageError(`unexpected argument '${extra}': revoke one key at a time`);
  const orgName = orgArgument(text('org'));
  const key = await withDb(configFile, io.env, async (db) => revokeApiKey(db, (await requireOrg(db, orgName)).id, id, systemClock));
  if (!key) throw new UsageError(`no API key ${id} in organization ${orgName}`);
  return print(io, { api_key: apiKeyToWire(key) });
}
