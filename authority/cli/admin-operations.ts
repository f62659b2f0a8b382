/**
 * What each administration command does to the database, once: `migrate`, `orgs create|list`,
 * `keys create|list|revoke` and `keys rotate-signing`, each as an input schema and an operation
 * on a database. The CLI runs an operation on the database it opens itself; while a server holds
 * the embedded data directory, it sends the same command and input to that server
 * (running-server.ts), which runs the same operation on its own connection
 * (authority/admin-channel/routes.ts). Either way the input is checked by the same schema and the
 * output is the same JSON.
 *
 * @example
 *   const input = parseAdminInput('keys create', { org: 'acme', name: 'ci', scopes: ['evaluate:write'] });
 *   const output = await runAdminOperation('keys create', input, { db, clock, signing });
 *   // { api_key: { id: '…', … }, secret: 'ask_live_…' }
 */
import { z } from 'zod';
import { UsageError } from '../../shared/usage-error.js';
import { Cidr, CreateApiKeyRequest, newKeyExpiryProblem } from '../../shared/wire/api-keys.js';
import { Scope } from '../../shared/wire/scopes.js';
import { apiKeyToWire, createApiKey, listApiKeys, revokeApiKey } from '../api-keys/keys.js';
import { formatIssues, PLANS } from '../config.js';
import { createOrganization, findOrganization, listOrganizations, OrganizationName, organizationToJson, type Organization } from '../orgs/organizations.js';
import type { SigningKeys } from '../signing/keys.js';
import type { Db } from '../store/db.js';
import { migrate } from '../store/migrate.js';
import type { Clock } from '../time.js';

/** What an operation works with: the database, the clock, and the signing keys (opened only when needed). */
export interface AdminContext {
  db: Db;
  clock: Clock;
  signing(): Promise<SigningKeys>;
}

const ORG_REQUIRED = '--org is required: the organization, by id or name';
const Org = z.string({ message: ORG_REQUIRED }).min(1, { message: ORG_REQUIRED });

const INPUTS = {
  migrate: z.object({}).strict(),
  'orgs create': z
    .object({
      name: z.string({ message: '--name is required' }).pipe(OrganizationName),
      plan: z.enum(PLANS).default('community'),
      test: z.boolean().default(false),
    })
    .strict(),
  'orgs list': z.object({}).strict(),
  'keys create': z
    .object({
      org: Org,
      name: z.string({ message: '--name is required' }).min(1, { message: '--name is required' }),
      scopes: z.array(Scope).min(1, { message: '--scopes is required: at least one resource:action scope' }),
      allowedCidrs: z.array(Cidr).optional(),
      allowedActors: CreateApiKeyRequest.shape.allowed_actors,
      expiresAt: CreateApiKeyRequest.shape.expires_at,
    })
    .strict(),
  'keys list': z.object({ org: Org }).strict(),
  'keys revoke': z.object({ org: Org, id: z.string({ message: 'KEY_ID is required: the id of the key to revoke (from keys list)' }).min(1) }).strict(),
  'keys rotate-signing': z.object({ purpose: z.enum(['permit', 'audit'], { message: '--purpose is permit or audit' }).default('permit') }).strict(),
} as const;

export type AdminCommand = keyof typeof INPUTS;
export type AdminInput<C extends AdminCommand> = z.output<(typeof INPUTS)[C]>;

export const ADMIN_COMMANDS = Object.keys(INPUTS) as AdminCommand[];

export function isAdminCommand(name: string): name is AdminCommand {
  return Object.hasOwn(INPUTS, name);
}

/** The input of `command`, checked; a UsageError (exit 2) says what is wrong. */
export function parseAdminInput<C extends AdminCommand>(command: C, raw: unknown): AdminInput<C> {
  const result = INPUTS[command].safeParse(raw);
  if (result.success) return result.data as AdminInput<C>;
  // Messages that name their option already say it all ("--name is required").
  const messages = result.error.issues.map((issue) => issue.message);
  throw new UsageError(messages.every((message) => message.startsWith('--')) ? messages.join('; ') : formatIssues(command, result.error));
}

async function requireOrg(db: Db, idOrName: string): Promise<Organization> {
  const org = await findOrganization(db, idOrName);
  if (!org) throw new UsageError(`no organization "${idOrName}"`);
  return org;
}

type Operations = { [C in AdminCommand]: (input: AdminInput<C>, context: AdminContext) => Promise<unknown> };

const OPERATIONS: Operations = {
  migrate: async (_input, { db }) => ({ applied: (await migrate(db)).applied }),
  'orgs create': async (input, { db, clock }) => ({ organization: organizationToJson(await createOrganization(db, { name: input.name, plan: input.plan, isTest: input.test }, clock)) }),
  'orgs list': async (_input, { db }) => ({ organizations: (await listOrganizations(db)).map(organizationToJson) }),
  'keys create': async (input, { db, clock }) => {
    const expiresAt = input.expiresAt === undefined ? undefined : new Date(input.expiresAt);
    const expiryProblem = expiresAt === undefined ? null : newKeyExpiryProblem(expiresAt, clock.now());
    if (expiryProblem !== null) throw new UsageError(`--expires-at ${expiryProblem}: ${input.expiresAt} has passed`);
    const created = await createApiKey(
      db,
      {
        org: await requireOrg(db, input.org),
        name: input.name,
        scopes: input.scopes,
        allowedCidrs: input.allowedCidrs,
        allowedActors: input.allowedActors,
        expiresAt,
        createdBy: 'cli',
      },
      clock,
    );
    return { api_key: apiKeyToWire(created.key), secret: created.secret };
  },
  'keys list': async (input, { db }) => ({ api_keys: (await listApiKeys(db, (await requireOrg(db, input.org)).id)).map(apiKeyToWire) }),
  'keys revoke': async (input, { db, clock }) => {
    const key = await revokeApiKey(db, (await requireOrg(db, input.org)).id, input.id, clock);
    if (!key) throw new UsageError(`no API key ${input.id} in organization ${input.org}`);
    return { api_key: apiKeyToWire(key) };
  },
  'keys rotate-signing': async (input, { signing }) => {
    const keys = await signing();
    const record = await keys.rotate(input.purpose);
    return { kid: record.kid, purpose: record.purpose, activates_at: record.activatesAt.toISOString(), published: (await keys.published(input.purpose)).map((key) => key.kid) };
  },
};

/** Runs `command` with an input that parseAdminInput accepted. */
export function runAdminOperation<C extends AdminCommand>(command: C, input: AdminInput<C>, context: AdminContext): Promise<unknown> {
  return (OPERATIONS[command] as (input: AdminInput<C>, context: AdminContext) => Promise<unknown>)(input, context);
}
