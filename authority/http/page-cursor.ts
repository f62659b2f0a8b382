/**
 * Cursors of the newest-first lists (permits, approvals, escalations): the last row's timestamp
 * and id, opaque to callers (base64url), so the next page starts strictly after that row.
 *
 * @example
 *   const before = query.cursor === undefined ? undefined : decodePageCursor(query.cursor);
 *   next_cursor: rows.length === limit ? encodePageCursor(last.createdAt, last.id) : null
 */
import { CountersignError } from '../../shared/errors.js';

export interface PagePosition {
  at: Date;
  id: string;
}

export function encodePageCursor(at: Date, id: string): string {
  return Buffer.from(`${at.toISOString()}|${id}`, 'utf8').toString('base64url');
}

/** The ids of rows kept under a uuid key (approvals, escalations, deliveries). */
export const UUID_ID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

/**
 * The position a cursor names; a cursor this API did not hand out is the caller's 400, checked
 * here so that nothing reaches the database that it would refuse: the instant within years
 * 1–9999 (a timestamptz comparison), the id of the list's kind (`isId`, e.g. a uuid comparison).
 */
export function decodePageCursor(cursor: string, isId: (id: string) => boolean = () => true): PagePosition {
  const [iso, id, extra] = Buffer.from(cursor, 'base64url').toString('utf8').split('|');
  const at = new Date(iso ?? '');
  const year = at.getUTCFullYear();
  if (!id || extra !== undefined || Number.isNaN(at.getTime()) || year < 1 || year > 9999 || !isId(id)) {
    throw new CountersignError('invalid_request', 'cursor is not one this API returned', { details: [{ path: 'query.cursor', message: 'invalid cursor' }] });
  }
  return { at, id };
}
