/**
 * Approval requests: what an evaluation that decided `hold` opens, bound to that action's
 * binding hash, and what someone with approvals:write resolves (approve or reject). The approval
 * authorizes nothing by itself: the caller evaluates again with `context.approvals: [id]`, and only
 * that fresh evaluation can issue a permit (see check.ts).
 *
 * Statuses: `pending` → `approved` | `rejected` | `expired` (final). A pending request past
 * `expires_at` is expired at once for every reader and can no longer be resolved; the background
 * sweep (expiry.ts) then stores `expired` and records the timeout in the audit chain.
 *
 * @example
 *   await openApprovalRequest(tx, { id, orgId, evaluationId, … , timeoutMs: 3_600_000 }, now);
 *   const approval = await resolveApprovalRequest(db, principal, id, { decision: 'approve' }, clock);
 */
import { CountersignError } from '../../shared/errors.js';
import { bindingHash } from '../../shared/permits/binding.js';
import type { ApprovalRecord } from '../../shared/wire/approvals.js';
import { appendAuditEvents } from '../audit/chain.js';
import { identityOf, identityOfCredential } from '../auth/identity.js';
import type { Principal } from '../auth/principal.js';
import type { PagePosition } from '../http/page-cursor.js';
import type { Db, Queryable } from '../store/db.js';
import { isoOrNull, type Clock } from '../time.js';

export type StoredApprovalStatus = 'pending' | 'approved' | 'rejected' | 'expired';
export type ApprovalStatusValue = ApprovalRecord['status'];

export interface ApprovalRequest {
  id: string;
  orgId: string;
  evaluationId: string;
  requestId: string;
  actionType: string;
  actorId: string;
  bindingHash: string;
  /** The action's bound facts (shared/permits/binding.ts), what the approver is asked to let through. */
  boundFacts: Record<string, unknown>;
  riskScore: number;
  reasonCodes: string[];
  status: StoredApprovalStatus;
  expiresAt: Date;
  createdAt: Date;
  resolvedAt: Date | null;
  resolvedBy: string | null;
  note: string | null;
  usedByPermitId: string | null;
  /** The identity that asked for the held action (auth/identity.ts): it may not resolve it. */
  requestedBy: string;
}

interface ApprovalRow {
  id: string;
  org_id: string;
  evaluation_id: string;
  request_id: string;
  action_type: string;
  actor_id: string;
  binding_hash: string;
  bound_facts: Record<string, unknown>;
  risk_score: number;
  reason_codes: string[];
  status: StoredApprovalStatus;
  expires_at: Date;
  created_at: Date;
  resolved_at: Date | null;
  resolved_by: string | null;
  note: string | null;
  used_by_permit_id: string | null;
  requested_by: string;
}

const SELECT = `SELECT r.*, u.permit_id AS used_by_permit_id FROM approval_requests r LEFT JOIN approval_uses u ON u.approval_id = r.id::text`;

const fromRow = (row: ApprovalRow): ApprovalRequest => ({
  id: row.id,
  orgId: row.org_id,
  evaluationId: row.evaluation_id,
  requestId: row.request_id,
  actionType: row.action_type,
  actorId: row.actor_id,
  bindingHash: row.binding_hash,
  boundFacts: row.bound_facts,
  riskScore: row.risk_score,
  reasonCodes: row.reason_codes,
  status: row.status,
  expiresAt: row.expires_at,
  createdAt: row.created_at,
  resolvedAt: row.resolved_at,
  resolvedBy: row.resolved_by,
  note: row.note,
  usedByPermitId: row.used_by_permit_id,
  requestedBy: row.requested_by,
});

/** The status a caller sees: a pending request past its deadline is expired. */
export function effectiveStatus(approval: Pick<ApprovalRequest, 'status' | 'expiresAt'>, nowMs: number): ApprovalStatusValue {
  return approval.status === 'pending' && approval.expiresAt.getTime() <= nowMs ? 'expired' : approval.status;
}

export function approvalToWire(approval: ApprovalRequest, nowMs: number): ApprovalRecord {
  return {
    id: approval.id,
    organization_id: approval.orgId,
    evaluation_id: approval.evaluationId,
    request_id: approval.requestId,
    action_type: approval.actionType,
    actor_id: approval.actorId,
    binding_hash: approval.bindingHash,
    bound_facts: approval.boundFacts,
    risk_score: approval.riskScore,
    reason_codes: approval.reasonCodes,
    status: effectiveStatus(approval, nowMs),
    expires_at: approval.expiresAt.toISOString(),
    created_at: approval.createdAt.toISOString(),
    requested_by: approval.requestedBy,
    resolved_at: isoOrNull(approval.resolvedAt),
    resolved_by: approval.resolvedBy,
    note: approval.note,
    used_by_permit_id: approval.usedByPermitId,
  };
}

/** What opening a request takes: the held action's facts, its timeout and who asked. */
export type NewApprovalRequest = Pick<
  ApprovalRequest,
  'id' | 'orgId' | 'evaluationId' | 'requestId' | 'actionType' | 'actorId' | 'bindingHash' | 'boundFacts' | 'riskScore' | 'reasonCodes'
> & {
  timeoutMs: number;
  /** The credential that asked for the action (`api_key:<id>`, `user:<id>`). */
  credential: string;
};

/**
 * Opens an approval request and records `approval.requested`, in the caller's transaction. The
 * requester is recorded as an identity (the credential's owner), so that no key of the same person
 * can resolve it later.
 */
export async function openApprovalRequest(tx: Queryable, input: NewApprovalRequest, now: Date): Promise<void> {
  const expiresAt = new Date(now.getTime() + input.timeoutMs);
  const requestedBy = await identityOfCredential(tx, input.orgId, input.credential);
  await tx.query(
    `INSERT INTO approval_requests (id, org_id, evaluation_id, request_id, action_type, actor_id, binding_hash, risk_score, reason_codes, status, expires_at, created_at, requested_by, bound_facts, bound_facts_hash)
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, 'pending', $10, $11, $12, $13::jsonb, $14)`,
    [
      input.id, input.orgId, input.evaluationId, input.requestId, input.actionType, input.actorId, input.bindingHash, input.riskScore, input.reasonCodes, expiresAt, now, requestedBy,
      JSON.stringify(input.boundFacts), bindingHash(input.orgId, input.boundFacts),
    ],
  );
  await appendAuditEvents(
    tx,
    [
      {
        orgId: input.orgId,
        type: 'approval.requested',
        actorId: input.actorId,
        decision: 'hold',
        resourceType: 'approval_request',
        resourceId: input.id,
        requestId: input.requestId,
        credential: input.credential,
        occurredAt: now,
        details: {
          approval_request_id: input.id,
          evaluation_id: input.evaluationId,
          action_type: input.actionType,
          binding_hash: input.bindingHash,
          requested_by: requestedBy,
          risk_score: input.riskScore,
          reason_codes: input.reasonCodes,
          expires_at: expiresAt.toISOString(),
        },
      },
    ],
    now,
  );
}

export async function getApprovalRequest(db: Queryable, orgId: string, id: string, options: { lock?: boolean } = {}): Promise<ApprovalRequest | null> {
  // FOR UPDATE cannot take the outer side of a LEFT JOIN; lock the request row alone.
  const sql = options.lock
    ? `${SELECT} WHERE r.org_id = $1 AND r.id = $2 FOR UPDATE OF r`
    : `${SELECT} WHERE r.org_id = $1 AND r.id = $2`;
  const rows = await db.query<ApprovalRow>(sql, [orgId, id]);
  return rows[0] ? fromRow(rows[0]) : null;
}

export interface ApprovalFilters {
  status?: ApprovalStatusValue | undefined;
  before?: PagePosition | undefined;
  limit: number;
}

/** An organization's approval requests, newest first. */
export async function listApprovalRequests(db: Queryable, orgId: string, filters: ApprovalFilters, nowMs: number): Promise<ApprovalRequest[]> {
  const where = ['r.org_id = $1'];
  const params: unknown[] = [orgId];
  const add = (clause: (n: number) => string, value: unknown): void => {
    params.push(value);
    where.push(clause(params.length));
  };
  const now = new Date(nowMs);
  if (filters.status === 'expired') add((n) => `(r.status = 'expired' OR (r.status = 'pending' AND r.expires_at <= $${n}))`, now);
  else if (filters.status === 'pending') add((n) => `r.status = 'pending' AND r.expires_at > $${n}`, now);
  else if (filters.status !== undefined) add((n) => `r.status = $${n}`, filters.status);
  if (filters.before) {
    params.push(filters.before.at, filters.before.id);
    where.push(`(r.created_at, r.id) < ($${params.length - 1}, $${params.length}::uuid)`);
  }
  params.push(filters.limit);
  const rows = await db.query<ApprovalRow>(`${SELECT} WHERE ${where.join(' AND ')} ORDER BY r.created_at DESC, r.id DESC LIMIT $${params.length}`, params);
  return rows.map(fromRow);
}

/** The name a resolver is recorded under; the same form escalation votes use. */
export function resolverOf(principal: Principal): string {
  return principal.kind === 'user' ? `user:${principal.userId}` : principal.credential;
}

/** Whether `who` (a credential form) is the actor the action is for. */
export function isActor(actorId: string, who: string): boolean {
  return who === actorId || who === `user:${actorId}`;
}

/**
 * Approves or rejects a pending request, exactly once (row lock), recording `approval.resolved`.
 * 404: not in this organization. 409: already resolved, or expired. 403: the actor the action is
 * for, or the identity that asked for it (any key of the same owner included), cannot resolve it.
 */
export async function resolveApprovalRequest(
  db: Db,
  principal: Principal,
  id: string,
  resolution: { decision: 'approve' | 'reject'; note?: string | undefined },
  clock: Clock,
): Promise<ApprovalRequest> {
  const resolver = resolverOf(principal);
  return db.transaction(async (tx) => {
    const identity = await identityOf(tx, principal);
    const current = await getApprovalRequest(tx, principal.org.id, id, { lock: true });
    if (!current) throw new CountersignError('not_found', 'no such approval request in this organization');
    const now = new Date(clock.now());
    const status = effectiveStatus(current, now.getTime());
    if (status !== 'pending') throw new CountersignError('conflict', `the approval request is already ${status}`);
    if (isActor(current.actorId, resolver)) throw new CountersignError('forbidden', 'the actor of an action cannot approve it');
    // Separation of duties: whoever asked for the held action (the same person through another
    // key included) cannot also be the one who lets it through, nor decide it either way.
    if (identity === current.requestedBy) {
      throw new CountersignError('forbidden', `the identity that requested this action (${identity}) cannot resolve its approval request; another person must`);
    }
    const next: StoredApprovalStatus = resolution.decision === 'approve' ? 'approved' : 'rejected';
    const note = resolution.note ?? null;
    await tx.query('UPDATE approval_requests SET status = $3, resolved_at = $4, resolved_by = $5, note = $6 WHERE org_id = $1 AND id = $2', [
      principal.org.id,
      id,
      next,
      now,
      resolver,
      note,
    ]);
    await appendAuditEvents(
      tx,
      [
        {
          orgId: principal.org.id,
          type: 'approval.resolved',
          actorId: resolver,
          decision: resolution.decision,
          resourceType: 'approval_request',
          resourceId: id,
          requestId: current.requestId,
          credential: principal.credential,
          occurredAt: now,
          details: { approval_request_id: id, evaluation_id: current.evaluationId, status: next, note, binding_hash: current.bindingHash },
        },
      ],
      now,
    );
    return { ...current, status: next, resolvedAt: now, resolvedBy: resolver, note };
  });
}
