/**
 * `GET /v1/session`: who a user JWT belongs to and what it may do.
 *
 * @example
 *   { "user": {"id": "u1", "email": "ana@example.com"}, "organization": {"id": "…", "name": "default"},
 *     "role": "approver", "permissions": ["approvals:read", …], "expires_at": "2026-11-21T20:00:00.000Z" }
 */
import { z } from 'zod';

export const ROLES = ['admin', 'approver', 'member', 'viewer'] as const;
export type Role = (typeof ROLES)[number];

export const SessionResponse = z.object({
  user: z.object({ id: z.string(), email: z.string().nullable() }),
  organization: z.object({ id: z.string(), name: z.string() }),
  role: z.enum(ROLES),
  permissions: z.array(z.string()),
  expires_at: z.string(),
});
export type SessionResponse = z.infer<typeof SessionResponse>;
