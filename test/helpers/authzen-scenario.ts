/**
 * What the AuthZEN tests share beside the loopback client (loopback-api.ts): the example policy's
 * finance-bot wiring a payee, and readers of what an answer or the store says.
 *
 * @example
 *   const { call } = await loopbackApi(authority);
 *   const reply = await call('POST', '/access/v1/evaluation', { body: access(500), requestId: 'r-1' });
 *   t.equal(decided(t, reply, 'a small wire').decision, true);
 */
import type { Test } from 'tap';
import { AuthzenDecision } from '../../shared/wire/authzen.js';
import { AuditEventsResponse } from '../../shared/wire/audit.js';
import { ErrorEnvelope } from '../../shared/wire/envelope.js';
import type { TestAuthority } from './authority.js';
import type { Reply } from './loopback-api.js';

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

