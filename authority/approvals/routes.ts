/**
 * `GET /v1/approvals` and `GET /v1/approvals/:id` (approvals:read or approvals:write),
 * `POST /v1/approvals/:id/resolve` (approvals:write). Another organization's request is a 404.
 */
import type { FastifyInstance } from 'fastify';
import type { ZodTypeProvider } from 'fastify-type-provider-zod';
import { CountersignError } from '../../shared/errors.js';
import { ATTR, SPAN } from '../../shared/telemetry/attributes.js';
import { ApprovalIdParams, ApprovalResponse, ListApprovalsQuery, ListApprovalsResponse, ResolveApprovalRequest } from '../../shared/wire/approvals.js';
import type { Principal } from '../auth/principal.js';
import { decodePageCursor, encodePageCursor, UUID_ID } from '../http/page-cursor.js';
import { inRequestSpan } from '../http/tracing.js';
import type { Db } from '../store/db.js';
import type { Clock } from '../time.js';
import { approvalToWire, getApprovalRequest, listApprovalRequests, resolveApprovalRequest } from './approval-requests.js';

export function approvalRoutes(app: FastifyInstance, { db, clock }: { db: Db; clock: Clock }): void {
  const routes = app.withTypeProvider<ZodTypeProvider>();
  const read = ['approvals:read', 'approvals:write'] as const;

  routes.get(
    '/v1/approvals',
    { config: { access: read }, schema: { querystring: ListApprovalsQuery, response: { 200: ListApprovalsResponse } } },
    async (request) => {
      const { org } = request.principal as Principal;
      const { status, limit, cursor } = request.query;
      const nowMs = clock.now();
      const approvals = await listApprovalRequests(db, org.id, { status, limit, before: cursor === undefined ? undefined : decodePageCursor(cursor, (id) => UUID_ID.test(id)) }, nowMs);
      const last = approvals.at(-1);
      return {
        approvals: approvals.map((approval) => approvalToWire(approval, nowMs)),
        next_cursor: last && approvals.length === limit ? encodePageCursor(last.createdAt, last.id) : null,
      };
    },
  );

  routes.get(
    '/v1/approvals/:id',
    { config: { access: read }, schema: { params: ApprovalIdParams, response: { 200: ApprovalResponse } } },
    async (request) => {
      const { org } = request.principal as Principal;
      const approval = await getApprovalRequest(db, org.id, request.params.id);
      if (!approval) throw new CountersignError('not_found', 'no such approval request in this organization');
      return { approval: approvalToWire(approval, clock.now()) };
    },
  );

  routes.post(
    '/v1/approvals/:id/resolve',
    { config: { access: 'approvals:write' }, schema: { params: ApprovalIdParams, body: ResolveApprovalRequest, response: { 200: ApprovalResponse } } },
    async (request) => {
      const approval = await inRequestSpan(
        request,
        SPAN.approvalResolve,
        () => resolveApprovalRequest(db, request.principal as Principal, request.params.id, request.body, clock),
        () => ({ attributes: { [ATTR.approvalId]: request.params.id }, after: (resolved) => ({ [ATTR.approvalStatus]: resolved.status }) }),
      );
      request.log.info({ approval_request_id: approval.id, status: approval.status }, 'approval request resolved');
      return { approval: approvalToWire(approval, clock.now()) };
    },
  );
}
