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

/** The position a cursor names; a cursor this API did not hand out is the caller's 400. */
export function decodePageCursor(cursor: string): PagePosition {
  const [iso, id] = Buffer.from(cursor, 'base64url').toString('utf8').split('|');
  const at = new Date(iso ?? '');
  if (!id || Number.isNaN(at.getTime())) {
    throw new CountersignError('invalid_request', 'cursor is not one this API returned', { details: [{ path: 'query.cursor', message: 'invalid cursor' }] });
  }
  return { at, id };
}
