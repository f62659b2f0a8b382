/**
 * API key resources on the wire: `POST /v1/api-keys`, `GET /v1/api-keys`,
 * `POST /v1/api-keys/:id/revoke` and `GET /v1-api-key-self`.
 *
 * The secret has the form `ask_live_<base62>` (or `ask_test_` for test organizations) and is in
 * the create response only.
 */
import { isIP } from 'node:net';
import { z } from 'zod';
import { Scope } from './scopes.js';

export const API_KEY_PATTERN = /^ask_(live|test)_[A-Za-z0-9]{32,128}$/;

/** `10.0.0.0/8`, `2001:db8::/32`, or a bare address (a /32 or /128). */
export function parseCidr(value: string): { address: string; prefix: number; family: 'ipv4' | 'ipv6' } | null {
  const [address = '', prefixText, extra] = value.split('/');
  if (extra !== undefined) return null;
  const version = isIP(address);
  if (version === 0) return null;
  const max = version === 4 ? 32 : 128;
  if (prefixText !== undefined && !/^\d{1,3}$/.test(prefixText)) return null;
  const prefix = prefixText === undefined ? max : Number(prefixText);
  if (prefix > max) return null;
  return { address, prefix, family: version === 4 ? 'ipv4' : 'ipv6' };
}

export const Cidr = z
  .string()
  .max(64)
  .refine((value) => parseCidr(value) !== null, { message: 'not a CIDR block such as 10.0.0.0/8 or 2001:db8::/32' });

/** The longest actor id evaluate takes (`actor_id`); a pattern is no longer. */
export const MAX_ACTOR_PATTERN = 256;

/**
 * An actor a key may speak for: an exact actor id (`finance-bot`), a prefix ending in `*`
 * (`agent:*` matches every id that starts with `agent:`), or `*` alone (any actor). A `*` anywhere
 * but at the end would read like a glob this product does not have, so it is refused.
 */
export const ActorPattern = z
  .string()
  .min(1)
  .max(MAX_ACTOR_PATTERN)
  .refine((value) => !value.slice(0, -1).includes('*'), { message: 'a * may only end an actor pattern, as in agent:*' })
  .refine((value) => value.trim() === value, { message: 'an actor pattern has no leading or trailing spaces' });

/**
 * Why `expiresAt` cannot be a new key's expiry at `nowMs`, or null. A key born expired could never
 * authenticate, so a date already past is a mistake (a past year, a local time read as UTC) and is
 * refused rather than stored. `POST /v1/api-keys` and `countersign keys create` both ask this, each
 * with its own clock.
 */
export function newKeyExpiryProblem(expiresAt: Date, nowMs: number): string | null {
  return expiresAt.getTime() <= nowMs ? 'must be in the future' : null;
}

export const CreateApiKeyRequest = z
  .object({
    name: z.string().trim().min(1).max(200),
    scopes: z
      .array(Scope)
      .min(1)
      .max(32)
      .refine((scopes) => new Set(scopes).size === scopes.length, { message: 'scopes must not repeat' }),
    allowed_cidrs: z.array(Cidr).min(1).max(100).optional(),
    /** The actors the key may evaluate as; absent = any actor (or, for a key made by a key, the creator's). */
    allowed_actors: z
      .array(ActorPattern)
      .min(1)
      .max(100)
      .refine((patterns) => new Set(patterns).size === patterns.length, { message: 'allowed_actors must not repeat' })
      .optional(),
    expires_at: z.iso.datetime({ offset: true }).optional(),
  })
  .strict();
export type CreateApiKeyRequest = z.infer<typeof CreateApiKeyRequest>;

export const ApiKeyRecord = z.object({
  id: z.string(),
  organization_id: z.string(),
  name: z.string(),
  /** The secret's first characters, to recognise a key; never enough to use it. */
  prefix: z.string(),
  scopes: z.array(z.string()),
  allowed_cidrs: z.array(z.string()).nullable(),
  /** The actor ids or patterns (`agent:*`) the key may speak for; null = any actor. */
  allowed_actors: z.array(z.string()).nullable(),
  created_by: z.string(),
  /** The identity the key acts for: `user:<sub>`, or its root key's `api_key:<id>`. */
  owner: z.string(),
  created_at: z.string(),
  last_used_at: z.string().nullable(),
  expires_at: z.string().nullable(),
  revoked_at: z.string().nullable(),
});
export type ApiKeyRecord = z.infer<typeof ApiKeyRecord>;

export const CreateApiKeyResponse = z.object({
  api_key: ApiKeyRecord,
  /** The plaintext key. Shown here once; only its SHA-256 is stored. */
  secret: z.string().regex(API_KEY_PATTERN),
});
export const ListApiKeysResponse = z.object({ api_keys: z.array(ApiKeyRecord) });
export const RevokeApiKeyResponse = z.object({ api_key: ApiKeyRecord });

export const ApiKeyIdParams = z.object({ id: z.uuid({ message: 'not an API key id' }) });

export const ApiKeySelfResponse = z.object({
  key_id: z.string(),
  organization_id: z.string(),
  scopes: z.array(z.string()),
  /** The actor ids or patterns the key may speak for; null = any actor. */
  allowed_actors: z.array(z.string()).nullable(),
});
