/**
 * What the AuthZEN tests share: a client of a test authority over real loopback HTTP (every answer
 * is checked against the OpenAPI document, problems collected in `problems`; bodies are sent as
 * given, `body` as JSON, `raw` as is; the acme admin key is the credential unless told), the
 * example policy's finance-bot wiring a payee, and readers of what an answer or the store says.
 *
 * @example
 *   const { call, problems } = await authzenClient(authority);
 *   const reply = await call('POST', '/access/v1/evaluation', { body: request, requestId: 'r-1' });
 */
import type { Test } from 'tap';
import { openApiDocument } from '../../authority/openapi/document.js';
import { AuthzenDecision } from '../../shared/wire/authzen.js';
import { AuditEventsResponse } from '../../shared/wire/audit.js';
import { ErrorEnvelope } from '../../shared/wire/envelope.js';
import type { TestAuthority } from './authority.js';
import { OpenApiResponses } from './openapi-responses.js';

export interface Reply {
  status: number;
  text: string;
  body: any;
  headers: Headers;
}

export interface CallOptions {
  /** The bearer credential; null sends none. The admin key of acme unless given. */
  token?: string | null;
  body?: unknown;
  raw?: string;
  contentType?: string;
  requestId?: string;
}

export async function authzenClient(authority: TestAuthority) {
  const base = await authority.app.listen({ host: '127.0.0.1', port: 0 });
  const responses = new OpenApiResponses(openApiDocument(authority.app));
  const problems: string[] = [];
  const call = async (method: string, path: string, options: CallOptions = {}): Promise<Reply> => {
    const headers: Record<string, string> = {};
    const token = options.token === undefined ? authority.acmeAdmin : options.token;
    if (token !== null) headers.authorization = `Bearer ${token}`;
    if (options.requestId !== undefined) headers['x-request-id'] = options.requestId;
    let payload: string | undefined;
    if (options.raw !== undefined || options.body !== undefined) {
      headers['content-type'] = options.contentType ?? 'application/json';
      payload = options.raw ?? JSON.stringify(options.body);
    }
    const response = await fetch(`${base}${path}`, { method, headers, body: payload });
    const text = await response.text();
    const body: unknown = (response.headers.get('content-type') ?? '').includes('json') ? JSON.parse(text) : text;
    // A path or method the document has no operation for (a 405, say) is not checked.
    if (responses.locate(method, path) !== null) problems.push(...responses.check({ method, url: path, status: response.status, body }));
    return { status: response.status, text, body, headers: response.headers };
  };
  return { base, call, problems };
}

/** The example policy's finance-bot wiring a payee: `access(500)` is allowed, `access(50_000)` held. */
export const finance = { type: 'service', id: 'finance-bot' };
export const wire = { name: 'payments.wire' };
export const payee = (id = 'acme-supplies') => ({ type: 'payee', id });
export const production = (amount: number, extra: Record<string, unknown> = {}) => ({ environment: 'production', amount_usd: amount, account_code: 'OPS-001', ...extra });
export const access = (amount: number, extra: Record<string, unknown> = {}) => ({ subject: finance, action: wire, resource: payee(), context: production(amount, extra) });

/** The audit events recorded under `requestId` in acme. */
export async function auditOf(authority: TestAuthority, requestId: string) {
  const response = await authority.app.inject({
    method: 'GET',
    url: `/v1/audit/events?limit=500&request_id=${encodeURIComponent(requestId)}`,
    headers: authority.bearer(authority.acmeAdmin),
  });
  return AuditEventsResponse.parse(response.json()).events;
}

/** How many permits acme holds: AuthZEN never adds one. */
export async function permitCount(authority: TestAuthority): Promise<number> {
  const rows = await authority.backend.db.query<{ n: number }>('SELECT count(*)::int AS n FROM permits WHERE org_id = $1', [authority.acme.id]);
  return rows[0]!.n;
}

/** The answer of an evaluation that must succeed. */
export function decided(t: Test, reply: Reply, what: string) {
  t.equal(reply.status, 200, `${what}: 200`);
  return AuthzenDecision.parse(reply.body);
}

/** A 400 envelope naming `path` among its details. */
export function refusedAt(t: Test, reply: Reply, path: string, what: string) {
  t.equal(reply.status, 400, `${what}: 400`);
  const envelope = ErrorEnvelope.parse(reply.body);
  t.equal(envelope.error, 'invalid_request', `${what}: invalid_request`);
  t.ok(envelope.details?.some((detail) => detail.path === path), `${what}: details name ${path} (${JSON.stringify(envelope.details)})`);
}

