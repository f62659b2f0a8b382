/**
 * Identities (docs/approvals.md, "Who may approve: separation of duties"): the person or root credential behind a
 * credential. A user token is the user, `user:<sub>`; an API key is its owner, recorded when the
 * key was created (`user:<sub>` or the root key's `api_key:<id>`). Separation of duties compares
 * identities, not credentials, so one person's several keys count as that one person.
 *
 * The owner is read from the store when a duty is judged (a vote, a resolution, a held action),
 * not carried on every request's principal: those are rare, and the stored row is the authority.
 *
 * @example
 *   await identityOf(db, principal); // 'user:u-42', or 'api_key:<root key id>'
 */
import { CountersignError } from '../../shared/errors.js';
import type { Queryable } from '../store/db.js';
import type { Principal } from './principal.js';

const KEY_CREDENTIAL = /^api_key:([0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})$/i;

/**
 * The identity behind a credential as records name it (`api_key:<id>`, `user:<id>`); other forms
 * (`cli`, `system`) are their own identity. A key that cannot be found has no known owner: refuse
 * rather than guess (fail closed).
 */
export async function identityOfCredential(db: Queryable, orgId: string, credential: string): Promise<string> {
  const key = KEY_CREDENTIAL.exec(credential);
  if (!key) return credential;
  const [row] = await db.query<{ owner: string }>('SELECT owner FROM api_keys WHERE id = $1 AND org_id = $2', [key[1], orgId]);
  if (!row) throw new CountersignError('forbidden', 'the owner of this API key is not known, so it cannot act on approvals');
  return row.owner;
}

export function identityOf(db: Queryable, principal: Principal): Promise<string> {
  return principal.kind === 'user' ? Promise.resolve(`user:${principal.userId}`) : identityOfCredential(db, principal.org.id, principal.credential);
}
