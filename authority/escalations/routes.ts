/**
 * The human-in-the-loop escalation endpoints of the self-hosted control plane:
 * `POST /v1/escalations` (any credential), `GET /v1/escalations`, `GET /v1/escalations/:id` (any
 * credential, own organization only) and `POST /v1/escalations/:id/respond` (`hitl:approve`, which
 * admins hold). With `deployment: hosted` none of them is registered, so they answer 404 exactly
 * as an unknown path does.
 *
 * An API key creating an escalation for an agent it may not speak for is 403 (api-keys/actors.ts).
 * Another organization's escalation is 404; the requester voting is 403; a vote on a final
 * escalation, or a second vote by the same identity (any credential of the same person), is 409. A change that cannot be recorded
 * in the audit log does not happen: 503 `audit_unavailable`.
 *
 * @example
 *   escalationRoutes(app, { config, db, clock, metrics });
 */
import type { FastifyBaseLogger, FastifyInstance } from 'fastify';
import type { ZodTypeProvider } from 'fastify-type-provider-zod';
import { CountersignError } from '../../shared/errors.js';
import { ATTR, SPAN } from '../../shared/telemetry/attributes.js';
import {
  CreateEscalationRequest,
  EscalationDetailResponse,
  EscalationIdParams,
  EscalationWire,
  ListEscalationsQuery,
  ListEscalationsResponse,
  RespondRequest,
  RespondResponse,
} from '../../shared/wire/escalations.js';
import { assertMaySpeakFor } from '../api-keys/actors.js';
import { AuditPayloadError } from '../audit/chain.js';
import { identityOf } from '../auth/identity.js';
import type { Principal } from '../auth/principal.js';
import { decodePageCursor, encodePageCursor } from '../http/page-cursor.js';
import { inRequestSpan } from '../http/tracing.js';
import type { AuthorityConfig } from '../config.js';
import type { AuthorityMetrics } from '../metrics.js';
import type { Db } from '../store/db.js';
import type { Clock } from '../time.js';
import { autoApproveThreshold, castVote, createEscalation, settleDueEscalations, settleEscalation, type Transitions, type Voter } from './escalations.js';
import { applyDueTimeouts, isOpen, type Escalation } from './lifecycle.js';
import { findEscalation, isEscalationId, listEscalationRows, listVotes } from './store.js';
import { approvalRecordToWire, escalationToWire, quorumProgressToWire, tallyOf } from './wire-form.js';

export interface EscalationRouteDeps {
  config: AuthorityConfig;
  db: Db;
  clock: Clock;
  metrics: AuthorityMetrics;
}

/** Due timeouts one list request records before answering; the sweeper takes any larger backlog. */
const SETTLE_ON_LIST = 1000;

/**
 * The `X-Next-Cursor` position, checked further than the shared decoder does: its id goes into a
 * uuid comparison and its instant into a timestamptz one, and neither may fail in the database.
 */
function decodeCursor(cursor: string): { createdAt: Date; id: string } {
  const { at, id } = decodePageCursor(cursor);
  const year = at.getUTCFullYear();
  if (!isEscalationId(id) || year < 1 || year > 9999) {
    throw new CountersignError('invalid_request', 'cursor is not one this API returned', { details: [{ path: 'query.cursor', message: 'invalid cursor' }] });
  }
  return { createdAt: at, id };
}

async function voterOf(db: Db, principal: Principal): Promise<Voter> {
  return { credential: principal.credential, aliases: [principal.kind === 'user' ? principal.userId : principal.keyId], identity: await identityOf(db, principal) };
}

export function escalationRoutes(app: FastifyInstance, deps: EscalationRouteDeps): void {
  // Only a self-hosted control plane serves the escalation endpoints; under `deployment: hosted`
  // they answer 404 like any unknown path (docs/approvals.md).
  if (deps.config.deployment === 'hosted') return;
  const routes = app.withTypeProvider<ZodTypeProvider>();
  const count = (transitions: Transitions) => {
    for (const status of transitions) deps.metrics.escalations.inc({ status });
  };
  /** A change that failed: ours to explain, the caller's facts, or an unrecorded change (fail closed). */
  const failed = (error: unknown, operation: string): CountersignError => {
    if (error instanceof CountersignError) return error;
    if (error instanceof AuditPayloadError) return new CountersignError('invalid_request', `the escalation cannot be recorded: ${error.message}`, { cause: error });
    deps.metrics.auditAppendFailures.inc({ operation });
    return new CountersignError('audit_unavailable', 'the escalation change could not be recorded, so it did not happen', { cause: error });
  };
  /** Timeouts are applied on read; if recording them fails, the answer still shows them. */
  const settleOne = async (escalation: Escalation, log: FastifyBaseLogger): Promise<Escalation> => {
    const now = new Date(deps.clock.now());
    if (!isOpen(escalation) || escalation.timeoutAt.getTime() > now.getTime()) return escalation;
    try {
      const settled = await settleEscalation(deps.db, escalation.orgId, escalation.id, deps.clock);
      if (settled) {
        count(settled.transitions);
        return settled.escalation;
      }
    } catch (error) {
      log.warn({ err: error, escalation_id: escalation.id }, 'escalation timeout could not be recorded on read; answering with it applied');
    }
    return applyDueTimeouts(escalation, now).escalation;
  };

  routes.post(
    '/v1/escalations',
    { config: { access: 'authenticated' }, schema: { body: CreateEscalationRequest, response: { 200: EscalationWire } } },
    (request) =>
      inRequestSpan(
        request,
        SPAN.escalationCreate,
        async () => {
          const principal = request.principal as Principal;
          const body = request.body;
          assertMaySpeakFor(principal, body.agentId);
          const defaultTimeout = deps.config.escalations.default_timeout_ms;
          let escalation: Escalation;
          try {
            escalation = await deps.db.transaction(async (tx) =>
              createEscalation(
                tx,
                {
                  orgId: principal.org.id,
                  agentId: body.agentId,
                  escalationReason: body.escalationReason,
                  proposedAction: body.proposedAction,
                  riskScore: body.riskScore,
                  quorumRequired: body.quorumConfig?.quorumRequired,
                  approverPoolSize: body.quorumConfig?.approverPoolSize,
                  minApprovers: body.quorumConfig?.minApprovers,
                  fallbackDecision: body.quorumConfig?.fallbackDecision,
                  timeoutMs: body.timeoutMs ?? defaultTimeout,
                  chain: body.escalationChain?.map((tier) => ({ ...tier, timeoutMs: tier.timeoutMs ?? defaultTimeout })),
                  metadata: body.metadata,
                  createdBy: principal.credential,
                  creatorIdentity: await identityOf(tx, principal),
                  requestId: request.id,
                  binding: null,
                  autoApproveBelow: autoApproveThreshold(deps.config.escalations, principal.org.id),
                },
                deps.clock,
              ),
            );
          } catch (error) {
            throw failed(error, 'escalation');
          }
          count([escalation.status]);
          request.log.info({ escalation_id: escalation.id, status: escalation.status }, 'escalation created');
          return escalationToWire(escalation);
        },
        () => ({ after: (created) => ({ [ATTR.escalationId]: created.id, [ATTR.escalationStatus]: created.status }) }),
      ),
  );

  routes.get(
    '/v1/escalations',
    { config: { access: 'authenticated' }, schema: { querystring: ListEscalationsQuery, response: { 200: ListEscalationsResponse } } },
    async (request, reply) => {
      const { org } = request.principal as Principal;
      const { status, limit, cursor } = request.query;
      const before = cursor === undefined ? undefined : decodeCursor(cursor);
      try {
        const settled = await settleDueEscalations(deps.db, deps.clock, { orgId: org.id, limit: SETTLE_ON_LIST });
        count(settled.transitions);
        if (settled.failures.length > 0) request.log.warn({ err: settled.failures[0], failures: settled.failures.length }, 'escalation timeouts could not be recorded on read');
      } catch (error) {
        request.log.warn({ err: error }, 'escalation timeouts could not be recorded on read; answering with them applied');
      }
      const page = await listEscalationRows(deps.db, org.id, { status, before, limit });
      const now = new Date(deps.clock.now());
      // Normally a no-op (everything due was just recorded); if recording failed, the answer still applies the timeouts.
      const current = page.escalations.map((escalation) => applyDueTimeouts(escalation, now).escalation);
      const last = page.escalations.at(-1);
      if (page.more && last) reply.header('x-next-cursor', encodePageCursor(last.createdAt, last.id));
      return current.filter((escalation) => status === undefined || escalation.status === status).map(escalationToWire);
    },
  );

  routes.get(
    '/v1/escalations/:id',
    { config: { access: 'authenticated' }, schema: { params: EscalationIdParams, response: { 200: EscalationDetailResponse } } },
    async (request) => {
      const { org } = request.principal as Principal;
      const stored = await findEscalation(deps.db, org.id, request.params.id);
      if (!stored) throw new CountersignError('not_found', 'no such escalation in this organization');
      const escalation = await settleOne(stored, request.log);
      const records = await listVotes(deps.db, escalation.id);
      return {
        escalation: escalationToWire(escalation),
        approvalRecords: records.map(approvalRecordToWire),
        quorumProgress: quorumProgressToWire(escalation, tallyOf(records, escalation.tier)),
      };
    },
  );

  routes.post(
    '/v1/escalations/:id/respond',
    { config: { access: 'hitl:approve' }, schema: { params: EscalationIdParams, body: RespondRequest, response: { 200: RespondResponse } } },
    (request) =>
      inRequestSpan(
        request,
        SPAN.escalationRespond,
        async () => {
          const principal = request.principal as Principal;
          const note = request.body.note === undefined || request.body.note === '' ? null : request.body.note;
          let result;
          try {
            result = await castVote(
              deps.db,
              { orgId: principal.org.id, escalationId: request.params.id, voter: await voterOf(deps.db, principal), decision: request.body.decision, note, requestId: request.id },
              deps.clock,
            );
          } catch (error) {
            throw failed(error, 'escalation');
          }
          if (result.kind !== 'not_found') count(result.transitions);
          switch (result.kind) {
            case 'not_found':
              throw new CountersignError('not_found', 'no such escalation in this organization');
            case 'requester':
              throw new CountersignError('forbidden', 'the requester of an escalation (its agent, or the identity that created it, through any of its credentials) cannot vote on it');
            case 'final':
              throw new CountersignError('conflict', `the escalation is ${result.escalation.status}; a final escalation takes no more votes`);
            case 'duplicate':
              // A quorum counts people: another key of the same owner is the same voter again.
              throw new CountersignError('conflict', 'this identity has already voted on this escalation (a quorum counts each person once, whichever of their credentials votes)');
            case 'recorded': {
              const { escalation, record, tally } = result;
              request.log.info({ escalation_id: escalation.id, decision: record.decision, status: escalation.status }, 'escalation vote recorded');
              return {
                escalation: escalationToWire(escalation),
                record: approvalRecordToWire(record),
                quorumProgress: quorumProgressToWire(escalation, tally),
              };
            }
          }
        },
        () => ({
          attributes: { [ATTR.escalationId]: request.params.id, [ATTR.escalationVote]: request.body.decision },
          after: (answer) => ({ [ATTR.escalationStatus]: answer.escalation.status }),
        }),
      ),
  );
}
