/**
 * `POST /v1/effects` (effects:write): the protected system reports what a permitted action did.
 * An effect is recorded, never inferred: a permit or an allow proves nothing about effects.
 */
import type { FastifyInstance } from 'fastify';
import type { ZodTypeProvider } from 'fastify-type-provider-zod';
import { ReportEffectRequest, ReportEffectResponse } from '../../shared/wire/permits.js';
import { appendAuditEvent } from '../audit/chain.js';
import type { Principal } from '../auth/principal.js';
import { requirePermit } from '../permits/permits.js';
import type { Db } from '../store/db.js';
import type { Clock } from '../time.js';

export function effectRoutes(app: FastifyInstance, deps: { db: Db; clock: Clock }): void {
  app.withTypeProvider<ZodTypeProvider>().post(
    '/v1/effects',
    { config: { access: 'effects:write' }, schema: { body: ReportEffectRequest, response: { 201: ReportEffectResponse } } },
    async (request, reply) => {
      const principal = request.principal as Principal;
      const body = request.body;
      const permit = await requirePermit(deps.db, principal.org.id, body.permit_id, deps.clock);
      const now = new Date(deps.clock.now());
      const occurredAt = body.occurred_at ? new Date(body.occurred_at) : now;
      const event = await deps.db.transaction(async (tx) => {
        const appended = await appendAuditEvent(
          tx,
          {
            orgId: principal.org.id,
            type: 'effect.reported',
            actorId: permit.actorId,
            decision: null,
            resourceType: 'permit',
            resourceId: permit.id,
            requestId: request.id,
            credential: principal.credential,
            occurredAt,
            details: {
              status: body.status,
              summary: body.summary ?? null,
              effect: body.details ?? {},
              action_type: permit.actionType,
              permit_status: permit.status,
            },
          },
          now,
        );
        return appended;
      });
      return reply.code(201).send({
        effect: { id: event.id, permit_id: permit.id, status: body.status, sequence: event.sequence, hash: event.hash, occurred_at: occurredAt.toISOString() },
      });
    },
  );
}
