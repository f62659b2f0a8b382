/**
 * The audit log over HTTP, all with permission `audit:read` and always confined to the caller's
 * organization:
 *
 *   GET  /v1/audit/events    (and the SDK's /v1-audit/events)   cursor pages of events
 *   POST /v1/audit/exports   (and the SDK's /v1-audit/exports)  a signed bundle of a sequence range
 *
 * Type filters take the SDK's names for evaluations too (filters.ts).
 *   GET  /v1/audit/keys                                          the public keys that verify bundles
 *   GET  /v1/audit/status                                        head, last checkpoint, a range verified
 *
 * @example
 *   auditRoutes(app, { db, keys: auditKeysFrom(signingKeys), clock });
 *   // GET /v1/audit/events?type=permit.issued&limit=100  →  {events, next_cursor, total}
 */
import type { FastifyInstance } from 'fastify';
import type { ZodTypeProvider } from 'fastify-type-provider-zod';
import { CountersignError } from '../../shared/errors.js';
import { AuditBundle, AuditEventsQuery, AuditEventsResponse, AuditExportRequest, AuditKeysResponse, AuditStatusQuery, AuditStatusResponse } from '../../shared/wire/audit.js';
import type { Principal } from '../auth/principal.js';
import { emptyBodyIsNoBody } from '../http/optional-body.js';
import type { Db } from '../store/db.js';
import type { Clock } from '../time.js';
import { auditEventToWire, listAuditEvents, parseAuditCursor } from './events.js';
import { exportRange, timeWindow, typeFilters } from './filters.js';
import { auditBundleJson, exportAuditBundle } from './export.js';
import { auditStatus } from './status.js';
import type { AuditKeys } from './types.js';

export interface AuditRouteDeps {
  db: Db;
  keys: AuditKeys;
  clock: Clock;
}

export function auditRoutes(app: FastifyInstance, { db, keys, clock }: AuditRouteDeps): void {
  const routes = app.withTypeProvider<ZodTypeProvider>();

  const listSchema = { querystring: AuditEventsQuery, response: { 200: AuditEventsResponse } };
  for (const url of ['/v1/audit/events', '/v1-audit/events']) {
    routes.get(url, { config: { access: 'audit:read' }, schema: listSchema }, async (request) => {
      const principal = request.principal as Principal;
      const query = request.query;
      const { from, to } = timeWindow(query.from, query.to, 'query');
      const page = await listAuditEvents(db, principal.org.id, {
        actorId: query.actor_id,
        requestId: query.request_id,
        resourceId: query.resource_id,
        from,
        to,
        afterSequence: query.cursor === undefined ? undefined : parseAuditCursor(query.cursor),
        limit: query.limit,
        ...typeFilters([...(query.type ?? []), ...(query.types ?? [])]),
      });
      return { events: page.events.map(auditEventToWire), next_cursor: page.nextCursor, total: page.total };
    });
  }

  const exportSchema = { body: AuditExportRequest.nullish(), response: { 200: AuditBundle } };
  for (const url of ['/v1/audit/exports', '/v1-audit/exports']) {
    routes.post(url, { config: { access: 'audit:read' }, schema: exportSchema, onRequest: emptyBodyIsNoBody }, async (request, reply) => {
      const principal = request.principal as Principal;
      const body = request.body ?? {};
      const range = await exportRange(db, principal.org.id, body);
      const signer = await keys.signer();
      const bundle = await exportAuditBundle(db, principal.org.id, signer, range, clock);
      request.log.info({ export_id: bundle.export_id, event_count: bundle.event_count }, 'audit bundle exported');
      // Sent as text: a JSON string with a JSON content type passes fastify's serializer
      // untouched, so the bytes are exactly those the signature covers (the schema documents it).
      return reply.type('application/json; charset=utf-8').send(auditBundleJson(bundle) as unknown as AuditBundle);
    });
  }

  routes.get(
    '/v1/audit/status',
    { config: { access: 'audit:read' }, schema: { querystring: AuditStatusQuery, response: { 200: AuditStatusResponse } } },
    async (request) => {
      const { from_sequence: from, to_sequence: to } = request.query;
      if (from !== undefined && to !== undefined && to < from) {
        throw new CountersignError('invalid_request', 'to_sequence must not be below from_sequence', { details: [{ path: 'query.to_sequence', message: 'below from_sequence' }] });
      }
      return auditStatus(db, (request.principal as Principal).org.id, keys, { fromSequence: from, toSequence: to }, clock);
    },
  );

  routes.get('/v1/audit/keys', { config: { access: 'audit:read' }, schema: { response: { 200: AuditKeysResponse } } }, async () => ({
    keys: await keys.publicKeys(),
  }));
}
