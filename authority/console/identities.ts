/**
 * `GET /console/api/identities?ids=…` (any credential of the organization, the console's session
 * included): what the console shows for an identity instead of a bare key id. Records name who
 * asked, voted or stored something by identity (`api_key:<id>`, `user:<sub>`); for an API key of
 * the caller's organization this answers its name, display prefix, owner and whether it is
 * revoked, never its secret. The keys page lists the same for keys:write; an approver, who lacks
 * it, still sees "the key “ci job”" rather than a uuid.
 *
 * @example
 *   GET /console/api/identities?ids=api_key:3f0c9a52-…,user:alice
 *   → { "identities": [{ "identity": "api_key:3f0c9a52-…", "name": "ci job", "prefix": "ask_test_AbC1",
 *                        "owner": "user:ada", "revoked": false }] }
 */
import type { FastifyInstance } from 'fastify';
import { ConsoleIdentitiesQuery, type ConsoleIdentitiesResponse, type ConsoleIdentity } from '../../shared/wire/console.js';
import type { Principal } from '../auth/principal.js';
import { invalidRequest } from '../http/errors.js';
import type { Queryable } from '../store/db.js';

const API_KEY_IDENTITY = /^api_key:([0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})$/i;

/** The API keys of `orgId` among `identities`; anything else is left out. */
export async function describeIdentities(db: Queryable, orgId: string, identities: readonly string[]): Promise<ConsoleIdentity[]> {
  const keyIds = identities.flatMap((identity) => API_KEY_IDENTITY.exec(identity)?.[1]?.toLowerCase() ?? []);
  if (keyIds.length === 0) return [];
  const rows = await db.query<{ id: string; name: string; display_prefix: string; owner: string; revoked_at: Date | null }>(
    'SELECT id, name, display_prefix, owner, revoked_at FROM api_keys WHERE org_id = $1 AND id = ANY($2::uuid[]) ORDER BY id',
    [orgId, keyIds],
  );
  return rows.map((row) => ({ identity: `api_key:${row.id}`, name: row.name, prefix: row.display_prefix, owner: row.owner, revoked: row.revoked_at !== null }));
}

export function consoleIdentityRoutes(app: FastifyInstance, { db }: { db: Queryable }): void {
  // Not part of the public API: left out of /openapi.json like the console's other endpoints, so
  // its query is checked here rather than by a route schema.
  app.get('/console/api/identities', { config: { access: 'authenticated' }, schema: { hide: true } }, async (request): Promise<ConsoleIdentitiesResponse> => {
    const query = ConsoleIdentitiesQuery.safeParse(request.query);
    if (!query.success) throw invalidRequest(query.error);
    return { identities: await describeIdentities(db, (request.principal as Principal).org.id, query.data.ids) };
  });
}
