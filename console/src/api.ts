/**
 * The console's one door to the server. Every request is same-origin with the session cookie;
 * every write carries the session's CSRF token; an error envelope becomes an `ApiError` whose
 * message is the server's own (it is written for people); and a 401 anywhere sends the person to
 * sign-in, because the session has ended and nothing on the page can be trusted any more.
 *
 * Wire types come from shared/wire (type-only imports: nothing of zod reaches the bundle), so a
 * change in the API's shapes fails the console's type check instead of a page at run time.
 */
import type { ApprovalRecord, ListApprovalsResponse } from '../../shared/wire/approvals.js';
import type { AuditEventsResponse } from '../../shared/wire/audit.js';
import type {
  EscalationDetailResponse,
  EscalationWire,
  RespondResponse,
  VoteDecision,
} from '../../shared/wire/escalations.js';
import type { ConsoleSession, ConsoleSignedIn } from '../../shared/wire/console.js';
import type { Role } from '../../shared/wire/session.js';
import type { z } from 'zod';

export type ApprovalList = z.infer<typeof ListApprovalsResponse>;
export type EscalationDetail = z.infer<typeof EscalationDetailResponse>;
export type EscalationVoteResult = z.infer<typeof RespondResponse>;
export type { ApprovalRecord, EscalationWire, Role, VoteDecision };
export type { ApprovalRecordWire, QuorumProgressWire } from '../../shared/wire/escalations.js';

/** `GET /console/api/session` (shared/wire/console.ts). `identity` is what records name as requester and voter. */
export type Session = ConsoleSession;
export type SignedInSession = ConsoleSignedIn;
export type SignedOutSession = Extract<ConsoleSession, { signed_in: false }>;

/** A refusal or failure, with the message the server wrote for the person. */
export class ApiError extends Error {
  readonly status: number;
  readonly code: string | null;
  readonly requestId: string | null;

  constructor(status: number, message: string, code: string | null = null, requestId: string | null = null) {
    super(message);
    this.name = 'ApiError';
    this.status = status;
    this.code = code;
    this.requestId = requestId;
  }
}

let csrfToken: string | null = null;
let unauthorized: (() => void) | null = null;

/** The token every non-GET request must carry; null once signed out. */
export function setCsrfToken(token: string | null): void {
  csrfToken = token;
}

/** What to do when the server says the session is gone (the app sends the person to sign-in). */
export function onUnauthorized(handler: () => void): void {
  unauthorized = handler;
}

export function isAbort(error: unknown): boolean {
  return error instanceof DOMException && error.name === 'AbortError';
}

export interface RequestOptions {
  method?: 'GET' | 'POST' | 'PUT';
  body?: unknown;
  headers?: Record<string, string>;
  signal?: AbortSignal | undefined;
  /** Off only where a 401 is an answer to show, not an ended session (a wrong API key). */
  redirectOn401?: boolean;
}

/**
 * The envelope is `{error: <code>, message, status, request_id}` (shared/errors.ts); a nested
 * `{error: {code, message, request_id}}` is read too, so either form shows the server's words.
 */
async function errorOf(response: Response): Promise<ApiError> {
  let body: unknown = null;
  try {
    body = await response.json();
  } catch {
    // Not JSON (a gateway's HTML page, say): fall back to the status below.
  }
  const outer = typeof body === 'object' && body !== null ? (body as Record<string, unknown>) : {};
  const inner = typeof outer.error === 'object' && outer.error !== null ? (outer.error as Record<string, unknown>) : {};
  const text = (value: unknown): string | null => (typeof value === 'string' && value.length > 0 ? value : null);
  const message = text(outer.message) ?? text(inner.message) ?? `The server answered ${response.status} ${response.statusText}`.trim() + '.';
  const code = text(outer.error) ?? text(inner.code);
  const requestId = text(outer.request_id) ?? text(inner.request_id);
  return new ApiError(response.status, message, code, requestId);
}

/** The raw answer (for a file to download, say); errors as in `json`. */
export async function send(path: string, options: RequestOptions = {}): Promise<Response> {
  const method = options.method ?? 'GET';
  const headers: Record<string, string> = { Accept: 'application/json', ...options.headers };
  if (method !== 'GET' && csrfToken !== null) headers['X-CSRF-Token'] = csrfToken;
  const init: RequestInit = { method, headers, credentials: 'same-origin', cache: 'no-store' };
  if (options.signal) init.signal = options.signal;
  if (options.body !== undefined) {
    headers['Content-Type'] = 'application/json';
    init.body = JSON.stringify(options.body);
  }
  let response: Response;
  try {
    response = await fetch(path, init);
  } catch (error) {
    if (isAbort(error)) throw error;
    throw new ApiError(0, 'The server could not be reached. Check your connection and try again.');
  }
  if (response.ok) return response;
  const error = await errorOf(response);
  if (response.status === 401 && options.redirectOn401 !== false) unauthorized?.();
  throw error;
}

/**
 * A call to the public API with the session: the JSON answer and its headers, or an `ApiError`.
 * Pages with calls of their own (keys, policies, …) build on this in their own modules.
 *
 * @example
 *   const { body } = await json<{ keys: ApiKeyRecord[] }>('/v1/api-keys');
 *   await json('/v1/api-keys/…/revoke', { method: 'POST', body: {} });
 */
export async function json<T>(path: string, options: RequestOptions = {}): Promise<{ body: T; headers: Headers }> {
  const response = await send(path, options);
  return { body: (await response.json()) as T, headers: response.headers };
}

// --- The console's own endpoints ---------------------------------------------------------------

/** Never a 401 by contract; if one came anyway, treating it as "session ended" would ask again forever. */
export async function getSession(signal?: AbortSignal): Promise<Session> {
  return (await json<Session>('/console/api/session', { signal, redirectOn401: false })).body;
}

/** The key goes as a bearer credential, checked (and limited per address) like any API call's. */
export async function signInWithApiKey(apiKey: string): Promise<SignedInSession> {
  return (await json<SignedInSession>('/console/api/sign-in/api-key', { method: 'POST', headers: { Authorization: `Bearer ${apiKey}` }, redirectOn401: false })).body;
}

export async function signOut(): Promise<void> {
  await send('/console/api/sign-out', { method: 'POST' });
}

// --- The public API, with the session cookie ---------------------------------------------------

/** One page of pending approval requests, newest first. */
export async function listPendingApprovals(signal?: AbortSignal): Promise<ApprovalList> {
  return (await json<ApprovalList>('/v1/approvals?status=pending&limit=100', { signal })).body;
}

/** Escalations with `status`, newest first; `more` when the server named a next page. */
export async function listEscalations(status: 'pending' | 'escalated', signal?: AbortSignal): Promise<{ escalations: EscalationWire[]; more: boolean }> {
  const { body, headers } = await json<EscalationWire[]>(`/v1/escalations?status=${status}&limit=100`, { signal });
  return { escalations: body, more: headers.get('X-Next-Cursor') !== null };
}

export async function getEscalation(id: string, signal?: AbortSignal): Promise<EscalationDetail> {
  return (await json<EscalationDetail>(`/v1/escalations/${encodeURIComponent(id)}`, { signal })).body;
}

/** A note of only spaces is no note: the server refuses an empty one for approval requests. */
function noteField(note: string): { note?: string } {
  const trimmed = note.trim();
  return trimmed === '' ? {} : { note: trimmed };
}

export async function resolveApproval(id: string, decision: VoteDecision, note: string): Promise<ApprovalRecord> {
  const path = `/v1/approvals/${encodeURIComponent(id)}/resolve`;
  return (await json<{ approval: ApprovalRecord }>(path, { method: 'POST', body: { decision, ...noteField(note) } })).body.approval;
}

export async function respondToEscalation(id: string, decision: VoteDecision, note: string): Promise<EscalationVoteResult> {
  const path = `/v1/escalations/${encodeURIComponent(id)}/respond`;
  return (await json<EscalationVoteResult>(path, { method: 'POST', body: { decision, ...noteField(note) } })).body;
}

/**
 * The `evaluation.decided` audit event of one evaluation: the record of the action's full context
 * (environment, target, amount, …) and which of its facts were bound. Needs audit:read.
 */
export async function getEvaluationEvent(evaluationId: string, signal?: AbortSignal): Promise<AuditEventsResponse['events'][number] | null> {
  const query = new URLSearchParams({ type: 'evaluation.decided', resource_id: evaluationId, limit: '1' });
  const { body } = await json<AuditEventsResponse>(`/v1/audit/events?${query.toString()}`, { signal });
  return body.events[0] ?? null;
}
