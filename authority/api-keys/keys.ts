/**
 * API keys: creation (the only moment the secret exists in the clear), listing, revocation, and
 * the lookup the authentication layer does on every request.
 *
 * @example
 *   const { key, secret } = await createApiKey(db, { org, name: 'ci', scopes: ['evaluate:write'], createdBy: 'cli' }, clock);
 */
import { randomUUID } from 'node:crypto';
import type { ApiKeyRecord } from '../../shared/wire/api-keys.js';
import type { Scope } from '../../shared/wire/scopes.js';
import { organizationFromRow, type Organization, type OrganizationRow } from '../orgs/organizations.js';
import type { Queryable } from '../store/db.js';
import { isoOrNull, type Clock } from '../time.js';
import { displayPrefix, generateApiKeySecret, hashApiKeySecret, hashesEqual, isApiKeySecret } from './secret.js';

export interface ApiKey {
  id: string;
  orgId: string;
  name: string;
  prefix: string;
  scopes: Scope[];
  allowedCidrs: string[] | null;
  /** The actor ids or patterns (`agent:*`) the key may evaluate as (actors.ts); null = any actor. */
  allowedActors: string[] | null;
  createdBy: string;
  /** The identity the key acts for: `user:<sub>`, or the root key's `api_key:<id>` (itself when it is a root). */
  owner: string;
  createdAt: Date;
  lastUsedAt: Date | null;
  expiresAt: Date | null;
  revokedAt: Date | null;
}

interface ApiKeyRow {
  id: string;
  org_id: string;
  name: string;
  key_hash: string;
  display_prefix: string;
  scopes: string[];
  allowed_cidrs: string[] | null;
  allowed_actors: string[] | null;
  created_by: string;
  owner: string;
  created_at: Date;
  last_used_at: Date | null;
  expires_at: Date | null;
  revoked_at: Date | null;
}

const COLUMNS =
  'id, org_id, name, key_hash, display_prefix, scopes, allowed_cidrs, allowed_actors, created_by, owner, created_at, last_used_at, expires_at, revoked_at';

const fromRow = (row: ApiKeyRow): ApiKey => ({
  id: row.id,
  orgId: row.org_id,
  name: row.name,
  prefix: row.display_prefix,
  scopes: row.scopes as Scope[],
  allowedCidrs: row.allowed_cidrs,
  allowedActors: row.allowed_actors,
  createdBy: row.created_by,
  owner: row.owner,
  createdAt: row.created_at,
  lastUsedAt: row.last_used_at,
  expiresAt: row.expires_at,
  revokedAt: row.revoked_at,
});

export interface NewApiKey {
  org: Organization;
  name: string;
  scopes: readonly Scope[];
  allowedCidrs?: readonly string[] | undefined;
  allowedActors?: readonly string[] | undefined;
  expiresAt?: Date | undefined;
  /** Who created it, for the record: `cli`, `bootstrap`, `api_key:<id>`, `user:<id>`. */
  createdBy: string;
  /**
   * The identity the new key acts for (the creating user, or the creating key's owner); absent for
   * keys made outside the API (bootstrap, CLI), which are their own root.
   */
  owner?: string | undefined;
  /** A secret chosen by the operator (COUNTERSIGN_BOOTSTRAP_KEY); generated when absent. */
  secret?: string | undefined;
}

export class InvalidSecretError extends Error {
  readonly code = 'API_KEY_SECRET_INVALID';
}

export async function createApiKey(db: Queryable, input: NewApiKey, clock: Clock): Promise<{ key: ApiKey; secret: string }> {
  const secret = input.secret ?? generateApiKeySecret(input.org.isTest ? 'test' : 'live');
  if (!isApiKeySecret(secret)) {
    throw new InvalidSecretError('an API key must look like ask_live_<32 or more letters and digits> (or ask_test_…)');
  }
  const id = randomUUID();
  const rows = await db.query<ApiKeyRow>(
    `INSERT INTO api_keys (id, org_id, name, key_hash, display_prefix, scopes, allowed_cidrs, created_by, created_at, expires_at, owner, allowed_actors)
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12) RETURNING ${COLUMNS}`,
    [
      id,
      input.org.id,
      input.name,
      hashApiKeySecret(secret),
      displayPrefix(secret),
      [...input.scopes],
      input.allowedCidrs ? [...input.allowedCidrs] : null,
      input.createdBy,
      new Date(clock.now()),
      input.expiresAt ?? null,
      input.owner ?? `api_key:${id}`,
      input.allowedActors ? [...input.allowedActors] : null,
    ],
  );
  return { key: fromRow(rows[0] as ApiKeyRow), secret };
}

export async function listApiKeys(db: Queryable, orgId: string): Promise<ApiKey[]> {
  const rows = await db.query<ApiKeyRow>(`SELECT ${COLUMNS} FROM api_keys WHERE org_id = $1 ORDER BY created_at, id`, [orgId]);
  return rows.map(fromRow);
}

/** One key of `orgId`, whatever its state; null when that organization has no such key. */
export async function getApiKey(db: Queryable, orgId: string, id: string): Promise<ApiKey | null> {
  const rows = await db.query<ApiKeyRow>(`SELECT ${COLUMNS} FROM api_keys WHERE id = $1 AND org_id = $2`, [id, orgId]);
  return rows[0] ? fromRow(rows[0]) : null;
}

/** Revokes a key of `orgId`; null when no such key exists in that organization. Idempotent. */
export async function revokeApiKey(db: Queryable, orgId: string, id: string, clock: Clock): Promise<ApiKey | null> {
  const rows = await db.query<ApiKeyRow>(
    `UPDATE api_keys SET revoked_at = COALESCE(revoked_at, $3) WHERE id = $1 AND org_id = $2 RETURNING ${COLUMNS}`,
    [id, orgId, new Date(clock.now())],
  );
  return rows[0] ? fromRow(rows[0]) : null;
}

/**
 * The key a presented secret belongs to, whatever its state (the caller judges revoked and
 * expired), with its organization: one query on every authenticated request.
 */
export async function findApiKeyBySecret(db: Queryable, secret: string): Promise<{ key: ApiKey; org: Organization } | null> {
  const hash = hashApiKeySecret(secret);
  const rows = await db.query<ApiKeyRow & { o_name: string; o_plan: OrganizationRow['plan']; o_is_test: boolean; o_created_at: Date; o_policy_version: number | null }>(
    `SELECT ${COLUMNS.split(', ').map((column) => `k.${column}`).join(', ')},
            o.name AS o_name, o.plan AS o_plan, o.is_test AS o_is_test, o.created_at AS o_created_at, o.policy_version AS o_policy_version
     FROM api_keys k JOIN organizations o ON o.id = k.org_id WHERE k.key_hash = $1`,
    [hash],
  );
  const row = rows[0];
  // The index found the row by hash; compare once more in constant time so no code path
  // decides on a secret-derived value with an early-exit comparison.
  if (!row || !hashesEqual(row.key_hash, hash)) return null;
  const org = organizationFromRow({
    id: row.org_id,
    name: row.o_name,
    plan: row.o_plan,
    is_test: row.o_is_test,
    created_at: row.o_created_at,
    policy_version: row.o_policy_version,
  });
  return { key: fromRow(row), org };
}

export async function recordApiKeyUse(db: Queryable, id: string, at: Date): Promise<void> {
  await db.query('UPDATE api_keys SET last_used_at = $2 WHERE id = $1 AND (last_used_at IS NULL OR last_used_at < $2)', [id, at]);
}

export function apiKeyToWire(key: ApiKey): ApiKeyRecord {
  return {
    id: key.id,
    organization_id: key.orgId,
    name: key.name,
    prefix: key.prefix,
    scopes: key.scopes,
    allowed_cidrs: key.allowedCidrs,
    allowed_actors: key.allowedActors,
    created_by: key.createdBy,
    owner: key.owner,
    created_at: key.createdAt.toISOString(),
    last_used_at: isoOrNull(key.lastUsedAt),
    expires_at: isoOrNull(key.expiresAt),
    revoked_at: isoOrNull(key.revokedAt),
  };
}
