/**
 * The escalation tables' SQL (migration 0006): rows to and from `Escalation` and
 * `ApprovalRecord`, the row lock a vote or a timeout takes, tallies, listings and due timeouts.
 * Nothing here decides anything; escalations.ts does, inside one transaction per change.
 *
 * @example
 *   const locked = await lockEscalation(tx, orgId, id); // SELECT … FOR UPDATE
 *   const tally = await tallyTier(tx, locked.id, locked.tier);
 */
import { bindingHash } from '../../shared/permits/binding.js';
import type { EscalationResolution, EscalationStatus, VoteDecision } from '../../shared/wire/escalations.js';
import type { Queryable } from '../store/db.js';
import type { ApprovalRecord, Escalation, EscalationTier } from './lifecycle.js';
import type { Tally } from './quorum.js';

interface EscalationRow {
  id: string;
  org_id: string;
  status: EscalationStatus;
  agent_id: string;
  escalation_reason: string;
  proposed_action: Record<string, unknown> | null;
  risk_score: number | null;
  tiers: EscalationTier[];
  tier: number;
  min_approvers: number | null;
  fallback_decision: VoteDecision;
  timeout_at: Date;
  metadata: Record<string, unknown>;
  binding_hash: string | null;
  bound_facts: Record<string, unknown> | null;
  created_by: string;
  creator_identity: string;
  request_id: string | null;
  resolution: EscalationResolution | null;
  outcome: VoteDecision | null;
  resolved_at: Date | null;
  created_at: Date;
  updated_at: Date;
}

interface VoteRow {
  id: string;
  escalation_id: string;
  org_id: string;
  tier: number;
  user_id: string;
  voter_identity: string;
  decision: VoteDecision;
  note: string | null;
  created_at: Date;
}

const fromRow = (row: EscalationRow): Escalation => ({
  id: row.id,
  orgId: row.org_id,
  status: row.status,
  agentId: row.agent_id,
  escalationReason: row.escalation_reason,
  proposedAction: row.proposed_action,
  riskScore: row.risk_score,
  tiers: row.tiers,
  tier: row.tier,
  minApprovers: row.min_approvers,
  fallbackDecision: row.fallback_decision,
  timeoutAt: row.timeout_at,
  metadata: row.metadata,
  bindingHash: row.binding_hash,
  boundFacts: row.bound_facts,
  createdBy: row.created_by,
  creatorIdentity: row.creator_identity,
  requestId: row.request_id,
  resolution: row.resolution,
  outcome: row.outcome,
  resolvedAt: row.resolved_at,
  createdAt: row.created_at,
  updatedAt: row.updated_at,
});

const voteFromRow = (row: VoteRow): ApprovalRecord => ({
  id: row.id,
  escalationId: row.escalation_id,
  orgId: row.org_id,
  tier: row.tier,
  userId: row.user_id,
  voterIdentity: row.voter_identity,
  decision: row.decision,
  note: row.note,
  createdAt: row.created_at,
});

/** Ids are uuids; anything else names no escalation (and must not reach a uuid cast). */
const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;
export const isEscalationId = (id: string): boolean => UUID.test(id);

export async function insertEscalation(tx: Queryable, escalation: Escalation): Promise<void> {
  const e = escalation;
  await tx.query(
    `INSERT INTO escalations (id, org_id, status, agent_id, escalation_reason, proposed_action, risk_score, tiers, tier,
       min_approvers, fallback_decision, timeout_at, metadata, binding_hash, created_by, request_id, resolution, outcome,
       resolved_at, created_at, updated_at, creator_identity, bound_facts, bound_facts_hash)
     VALUES ($1, $2, $3, $4, $5, $6::jsonb, $7, $8::jsonb, $9, $10, $11, $12, $13::jsonb, $14, $15, $16, $17, $18, $19, $20, $21, $22, $23::jsonb, $24)`,
    [
      e.id, e.orgId, e.status, e.agentId, e.escalationReason,
      e.proposedAction === null ? null : JSON.stringify(e.proposedAction), e.riskScore, JSON.stringify(e.tiers), e.tier,
      e.minApprovers, e.fallbackDecision, e.timeoutAt, JSON.stringify(e.metadata), e.bindingHash, e.createdBy, e.requestId,
      e.resolution, e.outcome, e.resolvedAt, e.createdAt, e.updatedAt, e.creatorIdentity,
      e.boundFacts === null ? null : JSON.stringify(e.boundFacts),
      // What `reuse_approvals` finds it by (migration 0017).
      e.boundFacts === null ? null : bindingHash(e.orgId, e.boundFacts),
    ],
  );
}

/** Writes what can change after creation: the status, the tier and its timeout, and the resolution. */
export async function updateEscalationState(tx: Queryable, escalation: Escalation): Promise<void> {
  const e = escalation;
  await tx.query(
    `UPDATE escalations SET status = $3, tier = $4, timeout_at = $5, resolution = $6, outcome = $7, resolved_at = $8, updated_at = $9
      WHERE org_id = $1 AND id = $2`,
    [e.orgId, e.id, e.status, e.tier, e.timeoutAt, e.resolution, e.outcome, e.resolvedAt, e.updatedAt],
  );
}

export async function findEscalation(db: Queryable, orgId: string, id: string): Promise<Escalation | null> {
  if (!isEscalationId(id)) return null;
  const [row] = await db.query<EscalationRow>('SELECT * FROM escalations WHERE org_id = $1 AND id = $2', [orgId, id]);
  return row ? fromRow(row) : null;
}

/**
 * The escalation, locked until the transaction ends: every change to an escalation holds this
 * lock, so two votes (or a vote and the sweeper) never both see it open and both settle it.
 */
export async function lockEscalation(tx: Queryable, orgId: string, id: string, options: { skipLocked?: boolean } = {}): Promise<Escalation | null> {
  if (!isEscalationId(id)) return null;
  const [row] = await tx.query<EscalationRow>(
    `SELECT * FROM escalations WHERE org_id = $1 AND id = $2 FOR UPDATE${options.skipLocked ? ' SKIP LOCKED' : ''}`,
    [orgId, id],
  );
  return row ? fromRow(row) : null;
}

/**
 * Inserts the vote; null when this credential, or another credential of the same identity, has
 * already voted on the escalation (either unique index: migrations 0006 and 0011).
 */
export async function insertVote(tx: Queryable, vote: ApprovalRecord): Promise<ApprovalRecord | null> {
  const rows = await tx.query<VoteRow>(
    `INSERT INTO escalation_votes (id, escalation_id, org_id, tier, user_id, decision, note, created_at, voter_identity)
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)
     ON CONFLICT DO NOTHING RETURNING *`,
    [vote.id, vote.escalationId, vote.orgId, vote.tier, vote.userId, vote.decision, vote.note, vote.createdAt, vote.voterIdentity],
  );
  return rows[0] ? voteFromRow(rows[0]) : null;
}

export async function tallyTier(db: Queryable, escalationId: string, tier: number): Promise<Tally> {
  const [row] = await db.query<{ approvals: number; rejections: number }>(
    `SELECT count(*) FILTER (WHERE decision = 'approve')::int8 AS approvals, count(*) FILTER (WHERE decision = 'reject')::int8 AS rejections
       FROM escalation_votes WHERE escalation_id = $1 AND tier = $2`,
    [escalationId, tier],
  );
  return { approvals: row?.approvals ?? 0, rejections: row?.rejections ?? 0 };
}

/** Every vote on the escalation, oldest first. */
export async function listVotes(db: Queryable, escalationId: string): Promise<ApprovalRecord[]> {
  const rows = await db.query<VoteRow>('SELECT * FROM escalation_votes WHERE escalation_id = $1 ORDER BY created_at, id', [escalationId]);
  return rows.map(voteFromRow);
}

export interface EscalationListFilters {
  status?: EscalationStatus | undefined;
  /** Only escalations before this position (newest first): the decoded cursor. */
  before?: { createdAt: Date; id: string } | undefined;
  limit: number;
}

/** One page of an organization's escalations, newest first, with one row more to tell whether another page exists. */
export async function listEscalationRows(db: Queryable, orgId: string, filters: EscalationListFilters): Promise<{ escalations: Escalation[]; more: boolean }> {
  const conditions = ['org_id = $1'];
  const params: unknown[] = [orgId];
  if (filters.status !== undefined) {
    params.push(filters.status);
    conditions.push(`status = $${params.length}`);
  }
  if (filters.before !== undefined) {
    params.push(filters.before.createdAt, filters.before.id);
    conditions.push(`(created_at, id) < ($${params.length - 1}, $${params.length}::uuid)`);
  }
  params.push(filters.limit + 1);
  const rows = await db.query<EscalationRow>(
    `SELECT * FROM escalations WHERE ${conditions.join(' AND ')} ORDER BY created_at DESC, id DESC LIMIT $${params.length}`,
    params,
  );
  return { escalations: rows.slice(0, filters.limit).map(fromRow), more: rows.length > filters.limit };
}

/** Open escalations whose current tier has run out by `now`, earliest first (all organizations, or one). */
export async function dueEscalations(db: Queryable, now: Date, limit: number, orgId?: string): Promise<Array<{ id: string; orgId: string }>> {
  const rows = await db.query<{ id: string; org_id: string }>(
    `SELECT id, org_id FROM escalations
      WHERE status IN ('pending', 'escalated') AND timeout_at <= $1 ${orgId === undefined ? '' : 'AND org_id = $3'}
      ORDER BY timeout_at, id LIMIT $2`,
    orgId === undefined ? [now, limit] : [now, limit, orgId],
  );
  return rows.map((row) => ({ id: row.id, orgId: row.org_id }));
}
