/**
 * The API keys page's calls and wording: list, create and revoke through the public API
 * (`/v1/api-keys`, permission `keys:write`) with the session, via api.ts's `json`. Wire types are
 * type-only imports (shared/wire/api-keys.ts uses node:net and zod, neither of which may reach the
 * bundle).
 *
 * The secret of a new key is returned to the caller and nowhere else: nothing here stores it.
 */
import type { z } from 'zod';
import type { ApiKeyRecord, CreateApiKeyRequest, CreateApiKeyResponse, ListApiKeysResponse, RevokeApiKeyResponse } from '../../shared/wire/api-keys.js';
import { json } from './api';

export type { ApiKeyRecord };
export type CreatedKey = z.infer<typeof CreateApiKeyResponse>;

/** The permission every one of these calls needs (authority/api-keys/routes.ts). */
export const KEYS_PERMISSION = 'keys:write';

/** Every key of the organization, revoked ones included; never a secret. */
export async function listKeys(signal?: AbortSignal): Promise<ApiKeyRecord[]> {
  return (await json<z.infer<typeof ListApiKeysResponse>>('/v1/api-keys', { signal })).body.api_keys;
}

/** `CreateApiKeyRequest` with scopes as the session names them; the server checks each. */
export type NewKey = Omit<CreateApiKeyRequest, 'scopes'> & { scopes: string[] };

/** The new key and its secret: the only time the secret is ever seen. */
export async function createKey(request: NewKey): Promise<CreatedKey> {
  return (await json<CreatedKey>('/v1/api-keys', { method: 'POST', body: request })).body;
}

export async function revokeKey(id: string): Promise<ApiKeyRecord> {
  const path = `/v1/api-keys/${encodeURIComponent(id)}/revoke`;
  return (await json<z.infer<typeof RevokeApiKeyResponse>>(path, { method: 'POST', body: {} })).body.api_key;
}

export type KeyStatus = 'active' | 'revoked' | 'expired';

export function keyStatus(key: ApiKeyRecord, nowMs: number): KeyStatus {
  if (key.revoked_at !== null) return 'revoked';
  if (key.expires_at !== null && Date.parse(key.expires_at) <= nowMs) return 'expired';
  return 'active';
}

export const STATUS_LABELS: Readonly<Record<KeyStatus, string>> = { active: 'Active', revoked: 'Revoked', expired: 'Expired' };

/** What each scope lets a key do (docs/api.md), shown beside its checkbox. */
const SCOPE_HINTS: Readonly<Record<string, string>> = {
  'evaluate:write': 'ask for decisions (POST /v1/evaluate)',
  'verify:execute': 'verify and consume permits (gates, proxies)',
  'audit:read': 'read and export the audit log',
  'approvals:read': 'read approval requests',
  'approvals:write': 'resolve approval requests',
  'policy:read': 'read policies',
  'policy:write': 'author policies',
  'webhooks:write': 'manage webhook subscriptions',
  'permits:read': 'read permits',
  'permits:write': 'revoke permits',
  'effects:write': 'report what a permitted action did',
  'hitl:approve': 'vote on escalations',
  'keys:write': 'list, create and revoke API keys',
};

export function scopeHint(scope: string): string | null {
  return SCOPE_HINTS[scope] ?? null;
}

const IPV4 = /^(25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)(\.(25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)){3}$/;
const IPV6 = /^[0-9A-Fa-f:.]+$/;

/**
 * The allowlist's lines that are plainly not CIDR blocks, so the person learns which line is
 * wrong (the server's 400 names only the field). A rough check: the server has the last word.
 */
export function badCidrs(lines: readonly string[]): string[] {
  return lines.filter((line) => {
    const [address = '', prefix, extra] = line.split('/');
    if (extra !== undefined) return true;
    const v4 = IPV4.test(address);
    const v6 = !v4 && address.includes(':') && IPV6.test(address);
    if (!v4 && !v6) return true;
    if (prefix === undefined) return false;
    return !/^\d{1,3}$/.test(prefix) || Number(prefix) > (v4 ? 32 : 128);
  });
}

/** One actor id or pattern per line (`agent:*`); blank lines and spaces around an entry are ignored. */
export const actorLines = (text: string): string[] => allowlistLines(text);

/**
 * The actor patterns with a `*` anywhere but at the end, which the server refuses (a trailing `*`
 * is a prefix; there is no other wildcard).
 */
export function badActorPatterns(lines: readonly string[]): string[] {
  return lines.filter((line) => line.slice(0, -1).includes('*'));
}

/** One block per line; blank lines and spaces around a block are ignored. */
export function allowlistLines(text: string): string[] {
  return text
    .split(/\r?\n/)
    .map((line) => line.trim())
    .filter((line) => line !== '');
}

/** Today as YYYY-MM-DD in the person's own time zone (a date input's `min`). */
export function todayLocal(nowMs: number): string {
  const now = new Date(nowMs);
  const pad = (n: number): string => String(n).padStart(2, '0');
  return `${now.getFullYear()}-${pad(now.getMonth() + 1)}-${pad(now.getDate())}`;
}

/**
 * A date input's YYYY-MM-DD as the moment the key stops working: the last second of that day in
 * the person's time zone (so the list shows that day, 11:59 PM), as an ISO timestamp; null when
 * not a date.
 */
export function endOfDay(date: string): string | null {
  const match = /^(\d{4})-(\d{2})-(\d{2})$/.exec(date);
  if (!match) return null;
  const end = new Date(Number(match[1]), Number(match[2]) - 1, Number(match[3]), 23, 59, 59);
  return Number.isFinite(end.getTime()) ? end.toISOString() : null;
}
