/**
 * The console's own endpoints (docs/console.md): who is signed in, how to sign in, and the names
 * of the API keys a page shows by id. Everything else the console shows comes from the public
 * API, which accepts the console's session cookie (with `X-CSRF-Token` on every request that
 * changes something).
 *
 * @example
 *   GET /console/api/session
 *   → { "signed_in": true, "method": "oidc", "identity": "user:alice", "display_name": "alice@example.com",
 *       "role": "approver", "permissions": ["approvals:read", …], "organization": { "id": "…", "name": "default" },
 *       "csrf_token": "…", "expires_at": "2026-11-27T18:00:00.000Z" }
 *   → { "signed_in": false, "sign_in": { "oidc": true, "api_key": false } }
 *   GET /console/api/identities?ids=api_key:3f0c…,user:alice
 *   → { "identities": [{ "identity": "api_key:3f0c…", "name": "ci job", "prefix": "ask_test_AbC1", "owner": "user:ada", "revoked": false }] }
 */
import { z } from 'zod';
import { ROLES } from './session.js';

/** The request header that carries the session's CSRF token on every unsafe console request. */
export const CSRF_HEADER = 'x-csrf-token';

export const ConsoleSignedIn = z.object({
  signed_in: z.literal(true),
  /** `api_key`: the development sign-in, labelled as such everywhere in the console. */
  method: z.enum(['oidc', 'api_key']),
  /** The identity the duties are judged on (docs/approvals.md, "Who may approve: separation of duties"): `user:<sub>` or `api_key:<id>`. */
  identity: z.string(),
  display_name: z.string(),
  role: z.enum(ROLES).nullable(),
  permissions: z.array(z.string()),
  organization: z.object({ id: z.string(), name: z.string() }),
  csrf_token: z.string(),
  expires_at: z.string(),
});
export type ConsoleSignedIn = z.infer<typeof ConsoleSignedIn>;

export const ConsoleSignedOut = z.object({
  signed_in: z.literal(false),
  /** Which ways of signing in this authority offers. */
  sign_in: z.object({ oidc: z.boolean(), api_key: z.boolean() }),
});

export const ConsoleSession = z.discriminatedUnion('signed_in', [ConsoleSignedIn, ConsoleSignedOut]);
export type ConsoleSession = z.infer<typeof ConsoleSession>;

/** At most this many identities per `GET /console/api/identities`. */
export const MAX_IDENTITY_LOOKUP = 50;

/** `GET /console/api/identities?ids=api_key:…,user:…`: the identities a page shows, comma-separated. */
export const ConsoleIdentitiesQuery = z.object({
  ids: z
    .string()
    .max(MAX_IDENTITY_LOOKUP * 80)
    .transform((value) => [...new Set(value.split(',').map((id) => id.trim()).filter(Boolean))])
    .pipe(z.array(z.string().max(80)).max(MAX_IDENTITY_LOOKUP)),
});

/**
 * What the console can say about an identity beyond its id: for an API key of the organization,
 * its name, display prefix (never the secret) and the identity it acts for. Identities it knows
 * nothing more of (users, keys of other organizations, unknown ids) are left out.
 */
export const ConsoleIdentity = z.object({
  identity: z.string(),
  name: z.string(),
  prefix: z.string(),
  /** The identity the key acts for: itself for a root key, else the user or key that made it. */
  owner: z.string(),
  revoked: z.boolean(),
});
export type ConsoleIdentity = z.infer<typeof ConsoleIdentity>;

export const ConsoleIdentitiesResponse = z.object({ identities: z.array(ConsoleIdentity) });
export type ConsoleIdentitiesResponse = z.infer<typeof ConsoleIdentitiesResponse>;
