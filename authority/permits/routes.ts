/**
 * `GET /v1/permits/:id`, `GET /v1/permits` (permits:read), `POST /v1/permits/:id/revoke`
 * (permits:write), `GET /v1/permits/:id/proof` (permits:read or audit:read) and
 * `GET /v1/permit-keys` (verify:execute: the JWKS gates verify with). `:id` is a permit id or the
 * permit token itself (permit-ref.ts). The deprecated `POST /v1-revoke-permit` (and
 * `/functions/v1/v1-revoke-permit`, canonically `/v1/revoke-permit`) revokes as
 * `POST /v1/permits/:id/revoke` does, answered with `Deprecation: true` and counted.
 */
import type { FastifyInstance, FastifyRequest } from 'fastify';
import type { ZodTypeProvider } from 'fastify-type-provider-zod';
import { z } from 'zod';
import { isPermitId } from '../../shared/permits/claims.js';
import type { SharedStore } from '../../shared/store/types.js';
import { LegacyRevokePermitRequest, LegacyRevokePermitResponse, ListPermitsQuery, ListPermitsResponse, PermitRefParams, PermitResponse, RevokePermitRequest } from '../../shared/wire/permits.js';
import { latestCheckpoint } from '../audit/checkpoints.js';
import { auditEventToWire, listAuditEvents } from '../audit/events.js';
import type { Principal } from '../auth/principal.js';
import { emptyBodyIsNoBody } from '../http/optional-body.js';
import { decodePageCursor, encodePageCursor, type PagePosition } from '../http/page-cursor.js';
import type { AuthorityMetrics } from '../metrics.js';
import type { Db } from '../store/db.js';
import type { Clock } from '../time.js';
import type { AuthorityConfig } from '../config.js';
import type { PublishedKeyResolver } from './key-resolver.js';
import { PERMIT_REF_CONFIG, permitIdOf } from './permit-ref.js';
import { listPermits, permitToWire, requirePermit, revokePermit } from './permits.js';

export interface PermitRouteDeps {
  db: Db;
  store: SharedStore;
  clock: Clock;
  metrics: AuthorityMetrics;
  keyResolver: PublishedKeyResolver;
  config: Pick<AuthorityConfig, 'permits'>;
}

const toIssuedBefore = ({ at, id }: PagePosition) => ({ issuedAt: at, id });

/** The slash path first; the function-style aliases are the SDK's. */
export const LEGACY_REVOKE_PATHS = ['/v1/revoke-permit', '/v1-revoke-permit', '/functions/v1/v1-revoke-permit'] as const;

export function permitRoutes(app: FastifyInstance, deps: PermitRouteDeps): void {
  const routes = app.withTypeProvider<ZodTypeProvider>();

  /** Revokes the permit `ref` names (an id or a token), for both revoke operations. */
  const revoke = async (request: FastifyRequest, ref: string, reason: string | null) => {
    const principal = request.principal as Principal;
    const permit = await revokePermit(deps, principal, await permitIdOf(deps, principal.org.id, ref), reason, request.id);
    deps.metrics.permitsRevoked.inc();
    request.log.info({ permit_id: permit.id }, 'permit revoked');
    return permit;
  };

  routes.get(
    '/v1/permit-keys',
    { config: { access: 'verify:execute' }, schema: { response: { 200: z.object({ keys: z.array(z.record(z.string(), z.unknown())) }) } } },
    async (_request, reply) => {
      // Gates cache this; a rotated-in key is published long before it signs.
      reply.header('cache-control', 'max-age=60');
      return deps.keyResolver.jwks();
    },
  );

  routes.get(
    '/v1/permits',
    { config: { access: 'permits:read' }, schema: { querystring: ListPermitsQuery, response: { 200: ListPermitsResponse } } },
    async (request) => {
      const principal = request.principal as Principal;
      const query = request.query;
      const { permits, total } = await listPermits(
        deps.db,
        principal.org.id,
        {
          status: query.status,
          actorId: query.actor_id,
          actionType: query.action_type,
          before: query.cursor === undefined ? undefined : toIssuedBefore(decodePageCursor(query.cursor, isPermitId)),
          limit: query.limit,
        },
        deps.clock,
      );
      const last = permits.at(-1);
      return {
        permits: permits.map(permitToWire),
        total,
        next_cursor: last && permits.length === query.limit ? encodePageCursor(last.issuedAt, last.id) : null,
      };
    },
  );

  routes.get(
    '/v1/permits/:id',
    { config: { access: 'permits:read', ...PERMIT_REF_CONFIG }, schema: { params: PermitRefParams, response: { 200: PermitResponse } } },
    async (request) => {
      const principal = request.principal as Principal;
      const id = await permitIdOf(deps, principal.org.id, request.params.id);
      return { permit: permitToWire(await requirePermit(deps.db, principal.org.id, id, deps.clock)) };
    },
  );

  routes.post(
    '/v1/permits/:id/revoke',
    { config: { access: 'permits:write', ...PERMIT_REF_CONFIG }, schema: { params: PermitRefParams, body: RevokePermitRequest.nullish(), response: { 200: PermitResponse } }, onRequest: emptyBodyIsNoBody },
    async (request) => ({ permit: permitToWire(await revoke(request, request.params.id, request.body?.reason ?? null)) }),
  );

  for (const url of LEGACY_REVOKE_PATHS) {
    routes.post(
      url,
      {
        config: { access: 'permits:write' },
        schema: { body: LegacyRevokePermitRequest, response: { 200: LegacyRevokePermitResponse } },
        // On every answer, refusals included, so a caller learns of it whatever happened.
        onSend: async (_request, reply, payload) => {
          reply.header('deprecation', 'true');
          deps.metrics.deprecatedOperation.inc({ operation: 'revoke-permit' });
          return payload;
        },
      },
      async (request) => {
        const { decision_id, permit_token, permit_id, reason } = request.body;
        // The schema admits exactly one of the three.
        const permit = await revoke(request, (decision_id ?? permit_token ?? permit_id) as string, reason || null);
        return { revoked: true as const, decision_id: permit.id, permit_id: permit.id, revoked_at: (permit.revokedAt as Date).toISOString(), permit: permitToWire(permit) };
      },
    );
  }

  routes.get(
    '/v1/permits/:id/proof',
    { config: { access: ['permits:read', 'audit:read'], ...PERMIT_REF_CONFIG }, schema: { params: PermitRefParams } },
    async (request) => {
      const principal = request.principal as Principal;
      const permit = await requirePermit(deps.db, principal.org.id, await permitIdOf(deps, principal.org.id, request.params.id), deps.clock);
      const [ofPermit, ofEvaluation] = await Promise.all([
        listAuditEvents(deps.db, principal.org.id, { resourceId: permit.id, limit: 500 }),
        listAuditEvents(deps.db, principal.org.id, { resourceId: permit.evaluationId, limit: 10 }),
      ]);
      const events = [...ofEvaluation.events, ...ofPermit.events].sort((a, b) => a.sequence - b.sequence);
      const checkpoint = await latestCheckpoint(deps.db, principal.org.id);
      return {
        permit: permitToWire(permit),
        events: events.map(auditEventToWire),
        checkpoint,
      };
    },
  );
}
