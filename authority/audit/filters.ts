/**
 * The audit filters as the routes receive them, in the terms of events.ts: event type names with
 * the @atlasent/sdk's aliases resolved (`evaluate.allow` → `evaluation.decided` with decision
 * `allow`), and an export's filters as the sequence range its bundle covers.
 *
 * @example
 *   typeFilters(['evaluate.deny', 'policy.updated']);
 *   // { types: ['policy.updated'], typedDecisions: [{ type: 'evaluation.decided', decision: 'deny' }] }
 */
import { CountersignError } from '../../shared/errors.js';
import { SDK_EVENT_TYPE_ALIASES, type AuditExportRequest, type SdkEventTypeAlias } from '../../shared/wire/audit.js';
import type { Queryable } from '../store/db.js';
import { matchingSequenceRange, type AuditEventFilters } from './events.js';
import type { ExportRange } from './export.js';

function isAlias(name: string): name is SdkEventTypeAlias {
  return Object.hasOwn(SDK_EVENT_TYPE_ALIASES, name);
}

/** Type names (checked by the wire schema) as the event filters: plain types, and type + decision pairs. */
export function typeFilters(names: readonly string[]): Pick<AuditEventFilters, 'types' | 'typedDecisions'> {
  const unique = [...new Set(names)];
  const types = unique.filter((name) => !isAlias(name));
  const typedDecisions = unique.filter(isAlias).map((name) => SDK_EVENT_TYPE_ALIASES[name]);
  return { types: types.length > 0 ? types : undefined, typedDecisions: typedDecisions.length > 0 ? typedDecisions : undefined };
}

/** `from`/`to` as dates; `to` must be later than `from` (400, naming where it came from). */
export function timeWindow(from: string | undefined, to: string | undefined, where: 'query' | 'body'): { from?: Date; to?: Date } {
  const window = { from: from === undefined ? undefined : new Date(from), to: to === undefined ? undefined : new Date(to) };
  if (window.from !== undefined && window.to !== undefined && window.to <= window.from) {
    throw new CountersignError('invalid_request', '"to" must be later than "from"', { details: [{ path: `${where}.to`, message: 'must be later than from' }] });
  }
  return window;
}

/** A sequence range past every event: its bundle is empty. */
const NOTHING: ExportRange = { fromSequence: Number.MAX_SAFE_INTEGER };

/**
 * The range an export covers: its sequence bounds, narrowed by the SDK's filters to the first
 * and last matching event (the events between them included, so the bundle stays a gap-free,
 * verifiable piece of the chain).
 */
export async function exportRange(db: Queryable, orgId: string, body: AuditExportRequest): Promise<ExportRange> {
  const range: ExportRange = { fromSequence: body.from_sequence, toSequence: body.to_sequence };
  const filtered = body.types !== undefined || body.actor_id !== undefined || body.from !== undefined || body.to !== undefined;
  if (!filtered) return range;
  const matching = await matchingSequenceRange(
    db,
    orgId,
    Object.assign({ actorId: body.actor_id }, typeFilters(body.types ?? []), timeWindow(body.from, body.to, 'body')),
  );
  if (matching === null) return NOTHING;
  const first = Math.max(matching.first, range.fromSequence ?? 1);
  const last = Math.min(matching.last, range.toSequence ?? matching.last);
  return first > last ? NOTHING : { fromSequence: first, toSequence: last };
}
