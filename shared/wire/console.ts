/**
 * The console's own endpoints (docs/console.md): who is signed in, and how to sign in. Everything
 * else the console shows comes from the public API, which accepts the console's session cookie
 * (with `X-CSRF-Token` on every request that changes something).
 *
 * @example
 *   GET /console/api/session
 *   → { "signed_in": true, "method": "oidc", "identity": "user:alice", "display_name": "alice@example.com",
 *       "role": "approver", "permissions": ["approvals:read", …], "organization": { "id": "…", "name": "default" },
 *       "csrf_token": "…", "expires_at": "2026-11-27T18:00:00.000Z" }
 *   → { "signed_in": false, "sign_in": { "oidc": true, "api_key": false } }
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
