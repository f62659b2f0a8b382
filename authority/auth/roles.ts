/**
 * Roles of user JWTs and the permissions they carry. Permissions use the same names as API key
 * scopes, so one check (`principal.permissions.has(...)`) serves both kinds of credential.
 *
 * @example
 *   permissionsOf('member').has('verify:execute'); // true
 */
import { SCOPES, type Scope } from '../../shared/wire/scopes.js';
import type { Role } from '../../shared/wire/session.js';

const ROLE_PERMISSIONS: Record<Role, readonly Scope[]> = {
  admin: SCOPES,
  approver: [
    'evaluate:write',
    'permits:read',
    'permits:write',
    'audit:read',
    'approvals:read',
    'approvals:write',
    'hitl:approve',
  ],
  member: ['evaluate:write', 'permits:read', 'verify:execute'],
  viewer: ['audit:read', 'policy:read', 'permits:read'],
};

const frozen = new Map<Role, ReadonlySet<Scope>>(
  Object.entries(ROLE_PERMISSIONS).map(([role, permissions]) => [role as Role, new Set(permissions)]),
);

export function permissionsOf(role: Role): ReadonlySet<Scope> {
  return frozen.get(role) as ReadonlySet<Scope>;
}
