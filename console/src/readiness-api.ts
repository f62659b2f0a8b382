/**
 * The shadow readiness page's call and its controls:
 *
 *   GET /v1/gates/readiness?window_days=7&quiet_days=3&expected=CODE,CODE   (audit:read)
 *
 * per proxy route seen in shadow mode (and per tool of an MCP route): what it would have blocked,
 * by refusal code, over the window, and whether it is ready for enforce (authority/gates/readiness.ts). The controls live in
 * the query string under the API's own names, so a view can be linked to; they are checked here
 * as the server checks them (shared/wire/readiness.ts), so a mistake is named before any call.
 */
import type { z } from 'zod';
import { VERIFY_ERROR_CODES } from '../../shared/permits/verify-codes.js';
import type { ReadinessResponse, RouteReadiness, ToolReadiness } from '../../shared/wire/readiness.js';
import { json } from './api';

export type Readiness = z.infer<typeof ReadinessResponse>;
export type RouteReadinessWire = z.infer<typeof RouteReadiness>;
export type ToolReadinessWire = z.infer<typeof ToolReadiness>;

/** shared/wire/readiness.ts: MAX_READINESS_DAYS and the query's defaults. */
export const MAX_DAYS = 90;
export const DEFAULT_WINDOW_DAYS = 7;
export const DEFAULT_QUIET_DAYS = 3;
const MAX_EXPECTED = 50;
const CODE = /^[A-Z][A-Z0-9_]{0,63}$/;

/** Every refusal code a gate gives. */
export const REFUSAL_CODES = VERIFY_ERROR_CODES;

/** The controls as typed (text), from the query string or the form. */
export interface ReadinessDraft {
  windowDays: string;
  quietDays: string;
  expected: string;
}

export interface ReadinessQueryValues {
  windowDays: number;
  quietDays: number;
  expected: string[];
}

export type DraftProblems = Partial<Record<keyof ReadinessDraft, string>>;

export function draftOfSearch(search: URLSearchParams): ReadinessDraft {
  return {
    windowDays: search.get('window_days') ?? String(DEFAULT_WINDOW_DAYS),
    quietDays: search.get('quiet_days') ?? String(DEFAULT_QUIET_DAYS),
    expected: search.getAll('expected').join(', '),
  };
}

/** `A, b c` → `['A', 'B', 'C']`: commas or spaces between, any case, each once. */
export function codesOf(text: string): string[] {
  return [
    ...new Set(
      text
        .split(/[\s,]+/)
        .map((code) => code.trim().toUpperCase())
        .filter((code) => code !== ''),
    ),
  ];
}

function daysOf(text: string): number | null {
  const trimmed = text.trim();
  if (!/^\d{1,3}$/.test(trimmed)) return null;
  const days = Number(trimmed);
  return days >= 1 && days <= MAX_DAYS ? days : null;
}

/** The query, or what is wrong with each control, in words. */
export function checkDraft(draft: ReadinessDraft): { query: ReadinessQueryValues; problems: null } | { query: null; problems: DraftProblems } {
  const problems: DraftProblems = {};
  const windowDays = daysOf(draft.windowDays);
  const quietDays = daysOf(draft.quietDays);
  if (windowDays === null) problems.windowDays = `The window is a whole number of days from 1 to ${MAX_DAYS}.`;
  if (quietDays === null) problems.quietDays = `Quiet days are a whole number from 1 to ${MAX_DAYS}.`;
  else if (windowDays !== null && quietDays > windowDays) {
    problems.quietDays = `Quiet days cannot be more than the window (${windowDays} ${windowDays === 1 ? 'day' : 'days'}): the window must cover them.`;
  }
  const expected = codesOf(draft.expected);
  const bad = expected.filter((code) => !CODE.test(code));
  if (bad.length > 0) problems.expected = `Not a refusal code: ${bad.join(', ')}. Codes are letters, digits and _, such as MISSING_PERMIT.`;
  else if (expected.length > MAX_EXPECTED) problems.expected = `At most ${MAX_EXPECTED} expected codes.`;
  if (windowDays === null || quietDays === null || Object.keys(problems).length > 0) return { query: null, problems };
  return { query: { windowDays, quietDays, expected }, problems: null };
}

/** Expected codes a gate never gives (counted anyway, but probably a typo). */
export function unknownCodes(expected: string[]): string[] {
  const known = new Set<string>(REFUSAL_CODES);
  return expected.filter((code) => !known.has(code));
}

export function searchOfQuery(query: ReadinessQueryValues): URLSearchParams {
  const search = new URLSearchParams({ window_days: String(query.windowDays), quiet_days: String(query.quietDays) });
  if (query.expected.length > 0) search.set('expected', query.expected.join(','));
  return search;
}

export async function getReadiness(query: ReadinessQueryValues, signal?: AbortSignal): Promise<Readiness> {
  return (await json<Readiness>(`/v1/gates/readiness?${searchOfQuery(query).toString()}`, { signal })).body;
}

/** The proxy route a gate names (`proxy:<route name>`), or null for a gate that is not a proxy's. */
export function proxyRouteOf(route: RouteReadinessWire): string | null {
  return route.gate.startsWith('proxy:') ? route.gate.slice('proxy:'.length) : null;
}
