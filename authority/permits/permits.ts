/**
 * Permit records: issued by evaluate, consumed at a gate, revoked by an operator. `expired` is
 * not stored: an issued permit past its expiry is reported as expired.
 *
 * Revocation writes the record, its audit event and the shared store's revocation entry in one
 * step: if the store cannot be reached, nothing changes and the caller gets 503, so a permit is
 * never shown as revoked while gates would still accept it.
 *
 * @example
 *   const permit = await getPermit(db, orgId, jti, clock); // with its derived status
 */
import type { z } from 'zod';
import { CountersignError } from '../../shared/errors.js';
import type { PermitRecord as PermitRecordWire } from '../../shared/wire/permits.js';
import { PERMIT_LEEWAY_SECONDS } from '../../shared/permits/claims.js';
import { permitStoreKey } from '../../shared/permits/store-keys.js';
import type { SharedStore } from '../../shared/store/types.js';
import { appendAuditEvent } from '../audit/chain.js';
import type { Principal } from '../auth/principal.js';
import type { Db, Queryable } from '../store/db.js';
import type { Clock } from '../time.js';

export type PermitStatus = 'issued' | 'consumed' | 'revoked' | 'expired';

/** What evaluate writes when it issues a permit. */
export interface NewPermit {
  id: string;
  orgId: string;
  evaluationId: string;
  requestId: string;
  actionType: string;
  actorId: string;
  bindingHash: string;
  boundFacts: Record<string, unknown>;
  kid: string;
  issuedAt: Date;
  expiresAt: Date;
}

export interface PermitRecord extends NewPermit {
  status: PermitStatus;
  consumedAt: Date | null;
  revokedAt: Date | null;
  revokedBy: string | null;
  revocationReason: string | null;
}

interface PermitRow {
  id: string;
  org_id: string;
  evaluation_id: string;
  request_id: string;
  action_type: string;
  actor_id: string;
  binding_hash: string;
  bound_facts: Record<string, unknown>;
  kid: string;
  status: 'issued' | 'consumed' | 'revoked';
  issued_at: Date;
  expires_at: Date;
  consumed_at: Date | null;
  revoked_at: Date | null;
  revoked_by: string | null;
  revocation_reason: string | null;
}

const fromRow = (row: PermitRow, nowMs: number): PermitRecord => ({
  id: row.id,
  orgId: row.org_id,
  evaluationId: row.evaluation_id,
  requestId: row.request_id,
  actionType: row.action_type,
  actorId: row.actor_id,
  bindingHash: row.binding_hash,
  boundFacts: row.bound_facts,
  kid: row.kid,
  status: row.status === 'issued' && row.expires_at.getTime() <= nowMs ? 'expired' : row.status,
  issuedAt: row.issued_at,
  expiresAt: row.expires_at,
  consumedAt: row.consumed_at,
  revokedAt: row.revoked_at,
  revokedBy: row.revoked_by,
  revocationReason: row.revocation_reason,
});

export async function getPermit(db: Queryable, orgId: string, id: string, clock: Clock): Promise<PermitRecord | null> {
  const rows = await db.query<PermitRow>('SELECT * FROM permits WHERE org_id = $1 AND id = $2', [orgId, id]);
  return rows[0] ? fromRow(rows[0], clock.now()) : null;
}

export async function requirePermit(db: Queryable, orgId: string, id: string, clock: Clock): Promise<PermitRecord> {
  const permit = await getPermit(db, orgId, id, clock);
  if (!permit) throw new CountersignError('not_found', 'no such permit in this organization');
  return permit;
}

export interface PermitFilters {
  status?: PermitStatus | undefined;
  actorId?: string | undefined;
  actionType?: string | undefined;
  /** Permits issued before this cursor position (newest first). */
  before?: { issuedAt: Date; id: string } | undefined;
  limit: number;
}

export async function listPermits(db: Queryable, orgId: string, filters: PermitFilters, clock: Clock): Promise<{ permits: PermitRecord[]; total: number }> {
  const now = new Date(clock.now());
  const where = ['org_id = $1'];
  const params: unknown[] = [orgId];
  const add = (clause: (n: number) => string, value: unknown) => {
    params.push(value);
    where.push(clause(params.length));
  };
  if (filters.actorId !== undefined) add((n) => `actor_id = $${n}`, filters.actorId);
  if (filters.actionType !== undefined) add((n) => `action_type = $${n}`, filters.actionType);
  if (filters.status === 'expired') add((n) => `status = 'issued' AND expires_at <= $${n}`, now);
  else if (filters.status === 'issued') add((n) => `status = 'issued' AND expires_at > $${n}`, now);
  else if (filters.status !== undefined) add((n) => `status = $${n}`, filters.status);
  const [{ total } = { total: 0 }] = await db.query<{ total: number }>(`SELECT count(*)::int AS total FROM permits WHERE ${where.join(' AND ')}`, params);
  if (filters.before) {
    params.push(filters.before.issuedAt, filters.before.id);
    where.push(`(issued_at, id) < ($${params.length - 1}, $${params.length})`);
  }
  params.push(filters.limit);
  const rows = await db.query<PermitRow>(
    `SELECT * FROM permits WHERE ${where.join(' AND ')} ORDER BY issued_at DESC, id DESC LIMIT $${params.length}`,
    params,
  );
  return { permits: rows.map((row) => fromRow(row, now.getTime())), total };
}

/** Marks a permit consumed (a gate used it); false when it was not in state issued. */
export async function markConsumed(tx: Queryable, orgId: string, id: string, at: Date): Promise<boolean> {
  const rows = await tx.query("UPDATE permits SET status = 'consumed', consumed_at = $3 WHERE org_id = $1 AND id = $2 AND status = 'issued' RETURNING id", [orgId, id, at]);
  return rows.length > 0;
}

/**
 * markConsumed for many permits in one statement (the drain's batch), in id order so two
 * transactions marking overlapping permits wait for each other instead of deadlocking.
 */
export async function markManyConsumed(tx: Queryable, orgId: string, uses: ReadonlyArray<{ id: string; at: Date }>): Promise<void> {
  if (uses.length === 0) return;
  await tx.query(
    `UPDATE permits SET status = 'consumed', consumed_at = used.at
     FROM (SELECT id, min(at) AS at FROM unnest($2::text[], $3::timestamptz[]) AS u(id, at) GROUP BY id ORDER BY id) AS used
     WHERE permits.org_id = $1 AND permits.id = used.id AND permits.status = 'issued'`,
    [orgId, uses.map((use) => use.id), uses.map((use) => use.at)],
  );
}

export async function revokePermit(
  deps: { db: Db; store: SharedStore; clock: Clock },
  principal: Principal,
  id: string,
  reason: string | null,
  requestId: string,
): Promise<PermitRecord> {
  const now = new Date(deps.clock.now());
  const revoked = await deps.db.transaction(async (tx) => {
    const rows = await tx.query<PermitRow>('SELECT * FROM permits WHERE org_id = $1 AND id = $2 FOR UPDATE', [principal.org.id, id]);
    const row = rows[0];
    if (!row) throw new CountersignError('not_found', 'no such permit in this organization');
    const current = fromRow(row, now.getTime());
    if (current.status === 'revoked') return current;
    // Only a live permit can be revoked: a consumed one has been used, an expired one no gate accepts.
    if (current.status !== 'issued') throw new CountersignError('conflict', `the permit is ${current.status}; only an issued permit can be revoked`);
    const updated = await tx.query<PermitRow>(
      "UPDATE permits SET status = 'revoked', revoked_at = $3, revoked_by = $4, revocation_reason = $5 WHERE org_id = $1 AND id = $2 RETURNING *",
      [principal.org.id, id, now, principal.credential, reason],
    );
    // Inside the transaction: if the gates cannot learn of it, the revocation does not happen.
    // Before the audit append, which holds the organization's chain lock until commit.
    const ttlMs = Math.max(1, row.expires_at.getTime() + PERMIT_LEEWAY_SECONDS * 1000 - now.getTime());
    try {
      await deps.store.revoke(permitStoreKey(principal.org.id, id), ttlMs);
    } catch (error) {
      throw new CountersignError('service_unavailable', 'the shared store is not reachable, so gates could not learn of the revocation; nothing was changed', { cause: error });
    }
    await appendAuditEvent(
      tx,
      {
        orgId: principal.org.id,
        type: 'permit.revoked',
        actorId: principal.credential,
        decision: null,
        resourceType: 'permit',
        resourceId: id,
        requestId,
        credential: principal.credential,
        occurredAt: now,
        details: { reason, action_type: row.action_type, actor_id: row.actor_id },
      },
      now,
    );
    return fromRow(updated[0] as PermitRow, now.getTime());
  });
  return revoked;
}

export function permitToWire(permit: PermitRecord): z.infer<typeof PermitRecordWire> {
  return {
    id: permit.id,
    organization_id: permit.orgId,
    evaluation_id: permit.evaluationId,
    request_id: permit.requestId,
    action_type: permit.actionType,
    actor_id: permit.actorId,
    binding_hash: permit.bindingHash,
    bound_facts: permit.boundFacts,
    kid: permit.kid,
    status: permit.status,
    issued_at: permit.issuedAt.toISOString(),
    expires_at: permit.expiresAt.toISOString(),
    consumed_at: permit.consumedAt?.toISOString() ?? null,
    revoked_at: permit.revokedAt?.toISOString() ?? null,
    revoked_by: permit.revokedBy,
    revocation_reason: permit.revocationReason,
  };
}
