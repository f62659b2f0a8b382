/**
 * Replay: the evaluations recorded since an instant, decided again under a candidate policy, and
 * every decision that would change, grouped by action class and transition. The candidate decides
 * through decideAsEvaluate (the evaluate path's decision) with the facts recorded at the time:
 * the request's context, the approvals as they were judged then, and the instant it was decided
 * as `now`, so change windows replay as they were.
 *
 * Nothing is written: the evaluations are read in READ ONLY transactions (recorded.ts), and no
 * audit event records a replay.
 *
 * @example
 *   const report = await replayEvaluations(db, candidate, { since, orgs, limit: 10_000 });
 *   report.totals.changed;  // 3
 *   report.groups[0];       // { action_class: 'payments', from: 'hold', to: 'escalate', count: 3 }
 */
import type { Db } from '../../store/db.js';
import { decideAsEvaluate } from '../../evaluate/decide.js';
import type { CompiledPolicy, Decision } from '../types.js';
import { recordedEvaluations, type RecordedEvaluation } from './recorded.js';

export interface ReplayOptions {
  since: Date;
  orgs: ReadonlyArray<{ id: string; name: string }>;
  /** At most this many evaluations are replayed (the newest beyond it are left out and reported). */
  limit: number;
  pageSize?: number;
}

export interface ChangedDecision {
  evaluation_id: string;
  org: string;
  at: string;
  action_type: string;
  actor_id: string;
  /** The class that governs the request under the candidate, else the one recorded. */
  action_class: string | null;
  from: { decision: Decision; reasons: string[]; action_class: string | null };
  to: { decision: Decision; reasons: string[]; action_class: string | null };
}

export interface TransitionGroup {
  action_class: string | null;
  from: Decision;
  to: Decision;
  count: number;
}

export interface ReplayReport {
  since: string;
  orgs: string[];
  limit: number;
  /** True when more evaluations were recorded than `limit`: the replay covered the oldest ones only. */
  truncated: boolean;
  totals: {
    replayed: number;
    unchanged: number;
    changed: number;
    /** Same decision, other reason codes: not a change of decision, counted for information. */
    reasons_changed: number;
  };
  groups: TransitionGroup[];
  changes: ChangedDecision[];
}

const sameList = (a: readonly string[], b: readonly string[]): boolean => a.length === b.length && a.every((item, i) => b[i] === item);

/** The candidate's decision for one recorded evaluation. */
export function redecide(candidate: CompiledPolicy, recorded: RecordedEvaluation): { decision: Decision; reasons: string[]; actionClass: string | null } {
  const decided = decideAsEvaluate(
    candidate,
    { action_type: recorded.actionType, actor_id: recorded.actorId, context: recorded.context },
    { accepted: recorded.accepted, statuses: recorded.approvals, now: recorded.at },
  );
  return { decision: decided.decision, reasons: decided.reasonCodes, actionClass: decided.actionClass };
}

export async function replayEvaluations(db: Db, candidate: CompiledPolicy, options: ReplayOptions): Promise<ReplayReport> {
  const source = recordedEvaluations(db, { orgs: options.orgs, since: options.since, limit: options.limit, pageSize: options.pageSize ?? 500 });
  const totals = { replayed: 0, unchanged: 0, changed: 0, reasons_changed: 0 };
  const changes: ChangedDecision[] = [];
  const groups = new Map<string, TransitionGroup>();
  for await (const page of source.pages) {
    for (const recorded of page) {
      totals.replayed += 1;
      const now = redecide(candidate, recorded);
      if (now.decision === recorded.decision) {
        totals.unchanged += 1;
        if (!sameList(now.reasons, recorded.reasons)) totals.reasons_changed += 1;
        continue;
      }
      totals.changed += 1;
      const actionClass = now.actionClass ?? recorded.actionClass;
      changes.push({
        evaluation_id: recorded.id,
        org: recorded.orgName,
        at: recorded.at.toISOString(),
        action_type: recorded.actionType,
        actor_id: recorded.actorId,
        action_class: actionClass,
        from: { decision: recorded.decision, reasons: recorded.reasons, action_class: recorded.actionClass },
        to: { decision: now.decision, reasons: now.reasons, action_class: now.actionClass },
      });
      const key = JSON.stringify([actionClass, recorded.decision, now.decision]);
      const group = groups.get(key) ?? { action_class: actionClass, from: recorded.decision, to: now.decision, count: 0 };
      group.count += 1;
      groups.set(key, group);
    }
  }
  return {
    since: options.since.toISOString(),
    orgs: options.orgs.map((org) => org.name),
    limit: options.limit,
    truncated: source.truncated(),
    totals,
    groups: [...groups.values()].sort(
      (a, b) => (a.action_class ?? '').localeCompare(b.action_class ?? '') || b.count - a.count || a.from.localeCompare(b.from) || a.to.localeCompare(b.to),
    ),
    changes,
  };
}

const UNITS: Record<string, number> = { s: 1_000, m: 60_000, h: 3_600_000, d: 86_400_000, w: 604_800_000 };

/**
 * `--since`: a duration back from `now` (`30m`, `24h`, `7d`, `2w`, `90s`) or an ISO 8601 instant.
 * Null when it is neither.
 */
export function parseSince(value: string, now: Date): Date | null {
  const duration = /^(\d+)([smhdw])$/.exec(value.trim());
  if (duration) return new Date(now.getTime() - Number(duration[1]) * (UNITS[duration[2] ?? 'h'] ?? 0));
  if (!/^\d{4}-\d{2}-\d{2}(T|$)/.test(value.trim())) return null;
  const instant = new Date(value.trim());
  return Number.isNaN(instant.getTime()) ? null : instant;
}
