/**
 * Console sessions: a random token in the browser's HttpOnly cookie, its SHA-256 in
 * `console_sessions`, and a CSRF token derived from it. The CSRF token is a hash of the session
 * token, so it needs no storage of its own and cannot be computed by a page that cannot read the
 * cookie; every console request that changes something must carry it (`X-CSRF-Token`).
 *
 * @example
 *   const token = await createConsoleSession(db, { orgId, method: 'oidc', userId: 'alice', email, role: 'approver' }, { nowMs, ttlMs });
 *   const session = await findConsoleSession(db, token, nowMs); // null once expired or signed out
 *   csrfTokenFor(token); // what GET /console/api/session hands the page
 */
import { createHash, randomBytes, timingSafeEqual } from 'node:crypto';
import type { Role } from '../../shared/wire/session.js';
import type { Queryable } from '../store/db.js';

/** The session cookie's name. `__Host-` needs Secure, so the name depends on the scheme. */
export const SESSION_COOKIE = 'countersign_session';
export const SECURE_SESSION_COOKIE = '__Host-countersign_session';

export type ConsoleSignInMethod = 'oidc' | 'api_key';

export interface NewConsoleSession {
  orgId: string;
  method: ConsoleSignInMethod;
  /** oidc: the ID token's user, email and role at sign-in. */
  userId?: string;
  email?: string | null;
  role?: Role | null;
  /** api_key: the key, looked up again on every request. */
  apiKeyId?: string;
}

export interface ConsoleSessionRow {
  orgId: string;
  method: ConsoleSignInMethod;
  userId: string | null;
  email: string | null;
  role: Role | null;
  apiKeyId: string | null;
  expiresAt: Date;
}

interface Row {
  org_id: string;
  method: ConsoleSignInMethod;
  user_id: string | null;
  email: string | null;
  role: Role | null;
  api_key_id: string | null;
  expires_at: Date;
}

/** 256 random bits: the session token is a bearer secret. */
function newSessionToken(): string {
  return randomBytes(32).toString('base64url');
}

function digest(text: string): Buffer {
  return createHash('sha256').update(text, 'utf8').digest();
}

/** What the table keys sessions by: the token itself is never stored. */
export function sessionTokenHash(token: string): string {
  return digest(token).toString('base64url');
}

export function csrfTokenFor(sessionToken: string): string {
  return digest(`countersign-console-csrf:${sessionToken}`).toString('base64url');
}

/** Constant-time: compares digests of equal length whatever was presented. */
export function csrfTokenMatches(sessionToken: string, presented: string | string[] | undefined): boolean {
  if (typeof presented !== 'string' || presented === '') return false;
  return timingSafeEqual(digest(csrfTokenFor(sessionToken)), digest(presented));
}

export async function createConsoleSession(
  db: Queryable,
  session: NewConsoleSession,
  { nowMs, ttlMs }: { nowMs: number; ttlMs: number },
): Promise<{ token: string; expiresAt: Date }> {
  const token = newSessionToken();
  const expiresAt = new Date(nowMs + ttlMs);
  // Ended sessions go when new ones start: sign-ins are rare, so this costs nothing noticeable.
  await db.query('DELETE FROM console_sessions WHERE expires_at <= $1', [new Date(nowMs)]);
  await db.query(
    `INSERT INTO console_sessions (token_hash, org_id, method, user_id, email, role, api_key_id, created_at, expires_at)
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)`,
    [
      sessionTokenHash(token),
      session.orgId,
      session.method,
      session.userId ?? null,
      session.email ?? null,
      session.role ?? null,
      session.apiKeyId ?? null,
      new Date(nowMs),
      expiresAt,
    ],
  );
  return { token, expiresAt };
}

/** The session a cookie's token names, or null when there is none or it has ended. */
export async function findConsoleSession(db: Queryable, token: string, nowMs: number): Promise<ConsoleSessionRow | null> {
  const rows = await db.query<Row>(
    'SELECT org_id, method, user_id, email, role, api_key_id, expires_at FROM console_sessions WHERE token_hash = $1',
    [sessionTokenHash(token)],
  );
  const row = rows[0];
  if (!row || row.expires_at.getTime() <= nowMs) return null;
  return {
    orgId: row.org_id,
    method: row.method,
    userId: row.user_id,
    email: row.email,
    role: row.role,
    apiKeyId: row.api_key_id,
    expiresAt: row.expires_at,
  };
}

export async function deleteConsoleSession(db: Queryable, token: string): Promise<void> {
  await db.query('DELETE FROM console_sessions WHERE token_hash = $1', [sessionTokenHash(token)]);
}
