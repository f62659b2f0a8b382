/**
 * `POST /v1/verify-permit` (and the SDK's `/v1-verify-permit`, `/functions/v1/v1-verify-permit`)
 * and `POST /v1/permits/:id/verify`, scope `verify:execute`: the shared verification core with the
 * shared store for consume-once. Always HTTP 200 for a verdict; every verification, accepted or
 * refused, becomes an audit event (permit.verified / permit.rejected) before the answer leaves.
 */
import type { FastifyInstance } from 'fastify';
import type { ZodTypeProvider } from 'fastify-type-provider-zod';
import { CountersignError } from '../../shared/errors.js';
import { verifyPermit, type VerifyOutcome } from '../../shared/permits/verify.js';
import type { SharedStore } from '../../shared/store/types.js';
import { ATTR, SPAN, type SpanAttributes } from '../../shared/telemetry/attributes.js';
import { PermitRefParams, VerifyPermitByIdResponse, VerifyPermitRequest, VerifyPermitResponse } from '../../shared/wire/permits.js';
import { appendAuditEvent } from '../audit/chain.js';
import type { Principal } from '../auth/principal.js';
import type { AuthorityConfig } from '../config.js';
import { emptyBodyIsNoBody } from '../http/optional-body.js';
import { VERIFY_LIMIT } from '../http/route-access.js';
import { inRequestSpan } from '../http/tracing.js';
import type { AuthorityMetrics } from '../metrics.js';
import type { Db } from '../store/db.js';
import type { Clock } from '../time.js';
import type { PublishedKeyResolver } from './key-resolver.js';
import { isPermitToken, PERMIT_REF_CONFIG } from './permit-ref.js';
import { getPermit, markConsumed, permitToWire } from './permits.js';

/** The slash path first; the function-style aliases are the SDK's. */
export const VERIFY_PERMIT_PATHS = ['/v1/verify-permit', '/v1-verify-permit', '/functions/v1/v1-verify-permit'] as const;

export interface VerifyRouteDeps {
  db: Db;
  store: SharedStore;
  clock: Clock;
  config: AuthorityConfig;
  metrics: AuthorityMetrics;
  keyResolver: PublishedKeyResolver;
}

/**
 * The facts a caller gives, in the names the binding uses: the context's keys, and `action_type`
 * and `actor_id` from their own fields over them when given. Built without a leading spread
 * (test/unit/leading-spread.test.ts) on an object without a prototype, so that copying a context
 * key named `__proto__` makes a plain key like any other.
 */
function factsFrom(body: VerifyPermitRequest): Record<string, unknown> {
  const facts: Record<string, unknown> = Object.assign(Object.create(null) as Record<string, unknown>, body.context);
  if (body.action_type) facts['action_type'] = body.action_type;
  if (body.actor_id) facts['actor_id'] = body.actor_id;
  return facts;
}

/**
 * The verdict for its span, in the proxy's terms: `verified`, `rejected`, or `unavailable` when the
 * store or the keys failed (INTERNAL_ERROR); the refusal's code, the permit and the binding checked.
 */
function verdictAttributes(verdict: VerifyPermitResponse): SpanAttributes {
  return {
    [ATTR.verificationResult]: verdict.verify_error_code === 'INTERNAL_ERROR' ? 'unavailable' : verdict.verification_status,
    [ATTR.verificationReason]: verdict.verify_error_code,
    [ATTR.permitId]: verdict.permit_id ?? undefined,
    [ATTR.binding]: verdict.binding ?? undefined,
  };
}

/**
 * One verification through the shared core, recorded in the audit log before it is answered.
 * `expectedId`: the permit the path names (verify by id); a token for another permit is refused as
 * PERMIT_NOT_FOUND before anything is consumed.
 */
async function verifyAndRecord(deps: VerifyRouteDeps, principal: Principal, body: VerifyPermitRequest, requestId: string, expectedId?: string): Promise<VerifyPermitResponse> {
  const now = new Date(deps.clock.now());
  const outcome: VerifyOutcome = await verifyPermit({
    token: body.permit_token === '' ? undefined : body.permit_token,
    keys: deps.keyResolver,
    issuer: deps.config.permits.issuer,
    audience: deps.config.permits.audience,
    orgId: principal.org.id,
    nowMs: now.getTime(),
    binding: body.context ? { kind: 'full', facts: factsFrom(body) } : { kind: 'partial', actionType: body.action_type, actorId: body.actor_id },
    // The audit's view first: a permit recorded as used or revoked stays refused even when the
    // replay store lost that fact.
    permitStatus: async (claims) => {
      if (expectedId !== undefined && claims.jti !== expectedId) return 'unknown';
      const record = await getPermit(deps.db, principal.org.id, claims.jti, deps.clock);
      if (record === null) return 'unknown';
      return record.status === 'consumed' || record.status === 'revoked' ? record.status : 'issued';
    },
    store: deps.store,
  });

  const claims = outcome.claims;
  try {
    await deps.db.transaction(async (tx) => {
      if (outcome.valid && outcome.consumed) await markConsumed(tx, principal.org.id, outcome.claims.jti, now);
      await appendAuditEvent(
        tx,
        {
          orgId: principal.org.id,
          type: outcome.valid ? 'permit.verified' : 'permit.rejected',
          actorId: claims?.sub ?? null,
          decision: outcome.valid ? 'allow' : 'deny',
          resourceType: 'permit',
          resourceId: claims?.jti ?? expectedId ?? null,
          requestId,
          credential: principal.credential,
          occurredAt: now,
          details: {
            gate: 'verify-permit',
            verify_error_code: outcome.valid ? null : outcome.code,
            reason: outcome.valid ? 'verified' : outcome.reason,
            binding: outcome.valid ? outcome.binding : null,
            consumed: outcome.valid && outcome.consumed,
            action_type: claims?.act ?? body.action_type ?? null,
            permit_request_id: claims?.rid ?? null,
          },
        },
        now,
      );
    });
  } catch (error) {
    deps.metrics.auditAppendFailures.inc({ operation: 'verify' });
    // Unrecorded means unverified: the caller must not proceed.
    throw new CountersignError('audit_unavailable', 'the verification could not be recorded; do not proceed', { cause: error });
  }

  deps.metrics.verifications.inc({ result: outcome.valid ? 'verified' : 'rejected', reason: outcome.valid ? 'OK' : outcome.code });
  return {
    valid: outcome.valid,
    outcome: outcome.valid ? ('allow' as const) : ('deny' as const),
    verification_status: outcome.valid ? ('verified' as const) : ('rejected' as const),
    ...(outcome.valid ? {} : { verify_error_code: outcome.code }),
    reason: outcome.valid ? 'permit verified' : outcome.reason,
    decision: outcome.valid ? ('allow' as const) : ('deny' as const),
    consumed: outcome.valid && outcome.consumed,
    permit_id: claims?.jti ?? null,
    request_id: claims?.rid ?? null,
    binding: outcome.valid ? outcome.binding : null,
    verified_at: now.toISOString(),
  };
}

/**
 * `POST /v1/permits/:id/verify`: the same verification, with the token from the path (the SDK
 * passes the token as the id) or from the body's `permit_token`. An id alone is not a permit: it
 * proves nothing, so it is refused as MISSING_PERMIT (recorded like any refusal), never valid.
 */
async function verifyById(deps: VerifyRouteDeps, principal: Principal, ref: string, body: VerifyPermitRequest, requestId: string): Promise<VerifyPermitByIdResponse> {
  const inPath = isPermitToken(ref);
  const given = body.permit_token === '' ? undefined : body.permit_token;
  if (inPath && given !== undefined && given !== ref) {
    throw new CountersignError('invalid_request', 'the path and permit_token present two different permits', { details: [{ path: 'permit_token', message: 'not the token in the path' }] });
  }
  const verdict = await verifyAndRecord(deps, principal, Object.assign({}, body, { permit_token: inPath ? ref : given }), requestId, inPath ? undefined : ref);
  const id = verdict.permit_id ?? (inPath ? null : ref);
  const record = id === null ? null : await getPermit(deps.db, principal.org.id, id, deps.clock);
  return Object.assign({}, verdict, {
    verification_type: 'permit' as const,
    evidence: {
      permit_id: id,
      status: record?.status ?? null,
      actor_id: record?.actorId ?? null,
      action_type: record?.actionType ?? null,
      expires_at: record?.expiresAt.toISOString() ?? null,
    },
    permit: record ? permitToWire(record) : null,
  });
}

export function verifyRoutes(app: FastifyInstance, deps: VerifyRouteDeps): void {
  const routes = app.withTypeProvider<ZodTypeProvider>();
  for (const url of VERIFY_PERMIT_PATHS) {
    routes.post(
      url,
      {
        config: { access: 'verify:execute', rateLimit: VERIFY_LIMIT },
        schema: { body: VerifyPermitRequest, response: { 200: VerifyPermitResponse } },
      },
      (request) =>
        inRequestSpan(request, SPAN.verifyPermit, () => verifyAndRecord(deps, request.principal as Principal, request.body, request.id), () => ({
          attributes: { [ATTR.actionType]: request.body.action_type || undefined },
          after: verdictAttributes,
        })),
    );
  }

  routes.post(
    '/v1/permits/:id/verify',
    {
      config: { access: 'verify:execute', rateLimit: VERIFY_LIMIT, ...PERMIT_REF_CONFIG },
      schema: { params: PermitRefParams, body: VerifyPermitRequest.nullish(), response: { 200: VerifyPermitByIdResponse } },
      onRequest: emptyBodyIsNoBody,
    },
    (request) => {
      const body: VerifyPermitRequest = request.body ?? { actor_id: undefined };
      return inRequestSpan(request, SPAN.verifyPermit, () => verifyById(deps, request.principal as Principal, request.params.id, body, request.id), () => ({
        attributes: { [ATTR.actionType]: body.action_type || undefined },
        after: verdictAttributes,
      }));
    },
  );
}
