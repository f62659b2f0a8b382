/**
 * The evaluations recorded in the audit log, read back for replay, a page at a time and only
 * inside READ ONLY transactions (the database itself refuses any write from here).
 *
 * Source: the `evaluation.decided` audit events. Each carries every fact the decision read (the
 * action type, the actor, the whole request context, the mode), the decision, its reason codes
 * and action class, and what became of the approvals presented; the event's `resource_id` is the
 * evaluation's id and `occurred_at` the instant it was decided (the `now` its conditions saw).
 * Approvals that were accepted are completed from their own rows (kind, who approved), since the
 * engine reads those facts; their acceptance is taken as recorded, not judged again.
 *
 * @example
 *   for await (const page of recordedEvaluations(db, { orgs, since, limit: 10_000, pageSize: 500 })) {
 *     for (const evaluation of page) replayOne(evaluation);
 *   }
 */
import type { ApprovalStatus } from '../../evaluate/approvals.js';
import type { Db, Queryable } from '../../store/db.js';
import type { CheckedApproval, Decision } from '../types.js';

export interface RecordedEvaluation {
  /** The evaluation id (the audit event's resource_id). */
  id: string;
  orgId: string;
  orgName: string;
  /** When it was decided: the `now` of its conditions. */
  at: Date;
  actionType: string;
  actorId: string;
  context: Record<string, unknown>;
  mode: string;
  decision: Decision;
  reasons: string[];
  actionClass: string | null;
  approvals: ApprovalStatus[];
  /** The accepted approvals as the engine saw them. */
  accepted: CheckedApproval[];
}

export interface ReadOptions {
  orgs: ReadonlyArray<{ id: string; name: string }>;
  since: Date;
  /** At most this many evaluations in all. */
  limit: number;
  pageSize: number;
}

interface EventRow {
  org_id: string;
  sequence: number;
  resource_id: string | null;
  decision: string | null;
  occurred_at: Date;
  payload: { details?: Record<string, unknown> };
}

const DECISIONS = new Set<string>(['allow', 'deny', 'hold', 'escalate']);

/** Runs `fn` in a transaction the database holds to READ ONLY. */
export function readOnly<T>(db: Db, fn: (tx: Queryable) => Promise<T>): Promise<T> {
  return db.transaction(async (tx) => {
    await tx.query('SET TRANSACTION READ ONLY');
    return fn(tx);
  });
}

const strings = (value: unknown): string[] => (Array.isArray(value) ? value.filter((item): item is string => typeof item === 'string') : []);
const record = (value: unknown): Record<string, unknown> =>
  typeof value === 'object' && value !== null && !Array.isArray(value) ? (value as Record<string, unknown>) : {};

function statusesOf(value: unknown): ApprovalStatus[] {
  if (!Array.isArray(value)) return [];
  return value.flatMap((item) => {
    const status = record(item);
    if (typeof status.id !== 'string' || typeof status.accepted !== 'boolean') return [];
    return [{ id: status.id, accepted: status.accepted, reason: typeof status.reason === 'string' ? status.reason : null }];
  });
}

/** Kind and approvers of the accepted approvals on a page, from approval_requests and escalation votes. */
async function acceptedApprovals(tx: Queryable, orgId: string, ids: string[]): Promise<Map<string, CheckedApproval>> {
  const found = new Map<string, CheckedApproval>();
  const uuids = [...new Set(ids.map((id) => id.toLowerCase()))].filter((id) => /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/.test(id));
  if (uuids.length === 0) return found;
  const requests = await tx.query<{ id: string; resolved_by: string | null }>(
    'SELECT id::text AS id, resolved_by FROM approval_requests WHERE org_id = $1 AND id = ANY($2::uuid[])',
    [orgId, uuids],
  );
  for (const row of requests) found.set(row.id, { id: row.id, kind: 'approval', approvedBy: row.resolved_by ? [row.resolved_by] : [] });
  const escalations = await tx.query<{ id: string; voters: string[] | null }>(
    `SELECT e.id::text AS id, array_remove(array_agg(v.user_id ORDER BY v.created_at), NULL) AS voters
     FROM escalations e LEFT JOIN escalation_votes v ON v.escalation_id = e.id AND v.decision = 'approve'
     WHERE e.org_id = $1 AND e.id = ANY($2::uuid[]) GROUP BY e.id`,
    [orgId, uuids],
  );
  for (const row of escalations) found.set(row.id, { id: row.id, kind: 'escalation', approvedBy: row.voters ?? [] });
  return found;
}

function toRecorded(row: EventRow, orgName: string, approvals: Map<string, CheckedApproval>): RecordedEvaluation | null {
  const details = record(row.payload.details);
  if (!row.resource_id || typeof details.action_type !== 'string' || typeof details.actor_id !== 'string') return null;
  if (!row.decision || !DECISIONS.has(row.decision)) return null;
  const statuses = statusesOf(details.approvals);
  const accepted = statuses.flatMap((status) => {
    if (!status.accepted) return [];
    const approval = approvals.get(status.id.toLowerCase());
    // An accepted approval whose row is gone still counted: keep it, with no approvers known.
    return [approval ?? { id: status.id.toLowerCase(), kind: 'approval' as const, approvedBy: [] }];
  });
  return {
    id: row.resource_id,
    orgId: row.org_id,
    orgName,
    at: row.occurred_at,
    actionType: details.action_type,
    actorId: details.actor_id,
    context: record(details.context),
    mode: typeof details.mode === 'string' ? details.mode : 'live',
    decision: row.decision as Decision,
    reasons: strings(details.reason_codes),
    actionClass: typeof details.action_class === 'string' ? details.action_class : null,
    approvals: statuses,
    accepted,
  };
}

/**
 * The recorded evaluations of `orgs` since `since`, oldest first per organization, in pages of
 * `pageSize`, at most `limit` in all. Each page is one READ ONLY transaction; the keyset
 * (occurred_at, sequence) continues where the previous page ended, so no page is unbounded.
 * `truncated()` tells afterwards whether evaluations beyond the limit were left unread.
 */
export function recordedEvaluations(db: Db, options: ReadOptions): { pages: AsyncGenerator<RecordedEvaluation[]>; truncated(): boolean } {
  let truncated = false;
  type Cursor = { at: Date; sequence: number } | null;
  const read = (orgId: string, cursor: Cursor, take: number) =>
    readOnly(db, async (tx) => {
      const rows = await tx.query<EventRow>(
        `SELECT org_id::text AS org_id, sequence, resource_id, decision, occurred_at, payload
         FROM audit_events
         WHERE org_id = $1 AND type = 'evaluation.decided' AND occurred_at >= $2
           AND ($3::timestamptz IS NULL OR (occurred_at, sequence) > ($3::timestamptz, $4::bigint))
         ORDER BY occurred_at, sequence
         LIMIT $5`,
        [orgId, options.since, cursor?.at ?? null, cursor?.sequence ?? 0, take],
      );
      const acceptedIds = rows.flatMap((row) => statusesOf(record(row.payload.details).approvals).filter((s) => s.accepted).map((s) => s.id));
      return { rows, approvals: await acceptedApprovals(tx, orgId, acceptedIds) };
    });

  async function* pages(): AsyncGenerator<RecordedEvaluation[]> {
    let remaining = options.limit;
    for (const org of options.orgs) {
      let cursor: Cursor = null;
      while (true) {
        if (remaining <= 0) {
          // The limit is reached: one probe tells whether anything was left unread.
          if ((await read(org.id, cursor, 1)).rows.length > 0) {
            truncated = true;
            return;
          }
          break;
        }
        const take = Math.min(options.pageSize, remaining);
        const page = await read(org.id, cursor, take);
        remaining -= page.rows.length;
        const last = page.rows.at(-1);
        if (last) {
          cursor = { at: last.occurred_at, sequence: last.sequence };
          yield page.rows.flatMap((row) => toRecorded(row, org.name, page.approvals) ?? []);
        }
        if (page.rows.length < take) break;
      }
    }
  }
  return { pages: pages(), truncated: () => truncated };
}
