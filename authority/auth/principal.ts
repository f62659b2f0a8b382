/**
 * Who is calling: the verified identity behind a request. Identity never grants authority by
 * itself; `permissions` is what the credential may do.
 */
import type { Scope } from '../../shared/wire/scopes.js';
import type { Role } from '../../shared/wire/session.js';
import type { Organization } from '../orgs/organizations.js';

interface PrincipalBase {
  org: Organization;
  permissions: ReadonlySet<Scope>;
  /** How records name this credential: `api_key:<id>` or `user:<id>`. */
  credential: string;
}

export interface ApiKeyPrincipal extends PrincipalBase {
  kind: 'api_key';
  keyId: string;
  scopes: readonly Scope[];
  /** The actor ids or patterns the key may evaluate as (api-keys/actors.ts); null = any actor. */
  allowedActors: readonly string[] | null;
}

export interface UserPrincipal extends PrincipalBase {
  kind: 'user';
  userId: string;
  email: string | null;
  /** null when the token names no role we know: authenticated, but allowed nothing. */
  role: Role | null;
  expiresAt: Date;
}

export type Principal = ApiKeyPrincipal | UserPrincipal;
