/**
 * `countersign migrate | orgs … | keys …`: administration straight against the database
 * (DATABASE_URL, or the embedded data directory while the server is stopped). Every command
 * prints JSON on stdout.
 *
 * @example
 *   countersign orgs create --name acme --plan business
 *   countersign keys create --org acme --name ci --scopes evaluate:write,verify:execute
 */
import { parseArgs } from 'node:util';
import { z } from 'zod';
import { Cidr } from '../../shared/wire/api-keys.js';
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

/** A mistake in how the command was called: exit code 2. */
export class UsageError extends Error {
  readonly code = 'USAGE';
}

export interface CliIo {
  out(line: string): void;
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

async function withDb<T>(configFile: string | undefined, env: NodeJS.ProcessEnv, fn: (db: Db) => Promise<T>): Promise<T> {
  const config = await loadAuthorityConfig({ file: configFile, env });
  const db = await openDb({ databaseUrl: config.database_url, dataDir: config.data_dir });
  try {
    await migrate(db);
    return await fn(db);
  } finally {
    await db.close();
  }
}

async function requireOrg(db: Db, idOrName: string | undefined): Promise<Organization> {
  if (!idOrName) throw new UsageError('--org <id or name> is required');
  const org = await findOrganization(db, idOrName);
  if (!org) throw new UsageError(`no organization "${idOrName}"`);
  return org;
}

const print = (io: CliIo, value: unknown) => io.out(JSON.stringify(value, null, 2));

export async function runAdminCommand(argv: string[], io: CliIo): Promise<void> {
  const [group, verb, ...rest] = argv;
  const { values, positionals } = parseArgs({
    args: group === 'migrate' ? argv.slice(1) : rest,
    allowPositionals: true,
    options: {
      config: { type: 'string' },
      org: { type: 'string' },
      name: { type: 'string' },
      plan: { type: 'string' },
      test: { type: 'boolean' },
      scopes: { type: 'string' },
      'allowed-cidrs': { type: 'string' },
      'expires-at': { type: 'string' },
    },
  });
  const configFile = values.config;

  if (group === 'migrate') {
    const applied = await withDb(configFile, io.env, async (db) => (await migrate(db)).applied);
    return print(io, { applied });
  }

  if (group === 'orgs' && verb === 'create') {
    const input = validate(
      z.object({ name: OrganizationName, plan: z.enum(PLANS).default('community') }),
      { name: values.name, plan: values.plan },
      'orgs create',
    );
    const org = await withDb(configFile, io.env, (db) => createOrganization(db, { ...input, isTest: values.test ?? false }, systemClock));
    return print(io, { organization: organizationToJson(org) });
  }
  if (group === 'orgs' && verb === 'list') {
    const orgs = await withDb(configFile, io.env, (db) => listOrganizations(db));
    return print(io, { organizations: orgs.map(organizationToJson) });
  }

  if (group === 'keys' && verb === 'create') {
    const input = validate(
      z.object({
        name: z.string({ message: '--name is required' }).min(1),
        scopes: z.array(Scope).min(1, { message: '--scopes needs at least one resource:action scope' }),
        allowedCidrs: z.array(Cidr).optional(),
        expiresAt: z.iso.datetime({ offset: true }).optional(),
      }),
      {
        name: values.name,
        scopes: list(values.scopes),
        allowedCidrs: values['allowed-cidrs'] === undefined ? undefined : list(values['allowed-cidrs']),
        expiresAt: values['expires-at'],
      },
      'keys create',
    );
    const created = await withDb(configFile, io.env, async (db) =>
      createApiKey(
        db,
        {
          org: await requireOrg(db, values.org),
          name: input.name,
          scopes: input.scopes,
          allowedCidrs: input.allowedCidrs,
          expiresAt: input.expiresAt === undefined ? undefined : new Date(input.expiresAt),
          createdBy: 'cli',
        },
        systemClock,
      ),
    );
    return print(io, { api_key: apiKeyToWire(created.key), secret: created.secret });
  }
  if (group === 'keys' && verb === 'list') {
    const keys = await withDb(configFile, io.env, async (db) => listApiKeys(db, (await requireOrg(db, values.org)).id));
    return print(io, { api_keys: keys.map(apiKeyToWire) });
  }
  if (group === 'keys' && verb === 'revoke') {
    const id = positionals[0];
    if (!id) throw new UsageError('usage: countersign keys revoke <key id> --org <id or name>');
    const key = await withDb(configFile, io.env, async (db) => revokeApiKey(db, (await requireOrg(db, values.org)).id, id, systemClock));
    if (!key) throw new UsageError(`no API key ${id} in that organization`);
    return print(io, { api_key: apiKeyToWire(key) });
  }

  throw new UsageError(`unknown command: ${[group, verb].filter(Boolean).join(' ')}`);
}
