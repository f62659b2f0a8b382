/**
 * Escalation calls for tests, over a test authority's app: create, respond, get, list, and the
 * escalation's audit events, each answer parsed with the shared wire schemas.
 *
 * @example
 *   const calls = escalationCalls(authority);
 *   const created = await calls.create({ agentId: 'bot', escalationReason: 'why' });
 *   const voted = await calls.respond(created.id, 'approve', approverKey);
 */
import type { FastifyInstance } from 'fastify';
import type { LightMyRequestResponse } from 'fastify';
import { EscalationDetailResponse, EscalationWire, ListEscalationsResponse, RespondResponse } from '../../shared/wire/escalations.js';
import type { TestAuthority } from './authority.js';

export interface AuditEventSeen {
  sequence: number;
  type: string;
  decision: string | null;
  actor_id: string | null;
  credential: string | null;
  occurred_at: string;
  details: Record<string, unknown>;
}

export function escalationCalls(authority: TestAuthority) {
  const app: FastifyInstance = authority.app;
  const headers = (token: string, body: boolean) => ({ authorization: `Bearer ${token}`, ...(body ? { 'content-type': 'application/json' } : {}) });
  const expect = (response: LightMyRequestResponse, status: number, what: string) => {
    if (response.statusCode !== status) throw new Error(`${what} answered ${response.statusCode}: ${response.body}`);
    return response.json();
  };
  const raw = {
    create: (body: unknown, token = authority.acmeAdmin) =>
      app.inject({ method: 'POST', url: '/v1/escalations', headers: headers(token, true), payload: JSON.stringify(body) }),
    respond: (id: string, body: unknown, token: string) =>
      app.inject({ method: 'POST', url: `/v1/escalations/${id}/respond`, headers: headers(token, true), payload: JSON.stringify(body) }),
    get: (id: string, token = authority.acmeAdmin) => app.inject({ method: 'GET', url: `/v1/escalations/${id}`, headers: headers(token, false) }),
    list: (query = '', token = authority.acmeAdmin) => app.inject({ method: 'GET', url: `/v1/escalations${query}`, headers: headers(token, false) }),
  };
  return {
    raw,
    create: async (body: Record<string, unknown>, token?: string) => EscalationWire.parse(expect(await raw.create(body, token), 200, 'create')),
    respond: async (id: string, decision: 'approve' | 'reject', token: string, note?: string) =>
      RespondResponse.parse(expect(await raw.respond(id, note === undefined ? { decision } : { decision, note }, token), 200, 'respond')),
    get: async (id: string, token?: string) => EscalationDetailResponse.parse(expect(await raw.get(id, token), 200, 'get')),
    list: async (query = '', token?: string) => ListEscalationsResponse.parse(expect(await raw.list(query, token), 200, 'list')),
    /** The escalation's audit events, in chain order. */
    events: async (id: string): Promise<AuditEventSeen[]> => {
      const response = await app.inject({ method: 'GET', url: `/v1/audit/events?resource_id=${id}&limit=500`, headers: headers(authority.acmeAdmin, false) });
      const events = expect(response, 200, 'audit events').events as Array<{ sequence: number; type: string; decision: string | null; actor_id: string | null; payload: { credential: string | null; occurred_at: string; details: Record<string, unknown> } }>;
      return events.map((event) => ({
        sequence: event.sequence,
        type: event.type,
        decision: event.decision,
        actor_id: event.actor_id,
        credential: event.payload.credential,
        occurred_at: event.payload.occurred_at,
        details: event.payload.details,
      }));
    },
  };
}
