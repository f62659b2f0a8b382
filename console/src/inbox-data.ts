/**
 * What the inbox shows, gathered from the public API: pending approval requests, open
 * escalations with their votes and quorum progress, and each action's bound facts.
 *
 * Approval records carry only the action's type and actor; the rest of the action (environment,
 * target, amount, …) is in the evaluation's `evaluation.decided` audit event, read once per
 * evaluation (it never changes) when the session holds audit:read. Without it, the item says so.
 */
import {
  ApiError,
  getEscalation,
  getEvaluationEvent,
  isAbort,
  listEscalations,
  listPendingApprovals,
  type ApprovalRecord,
  type ApprovalRecordWire,
  type EscalationWire,
  type QuorumProgressWire,
  type SignedInSession,
} from './api';
import { factLabel, factValue } from './format';

export interface Fact {
  name: string;
  label: string;
  value: string;
}

export type FactsView =
  /** The evaluation's bound facts, other than action type and actor (shown on their own). */
  | { kind: 'bound'; facts: Fact[] }
  /** An escalation created through the API: a free-form payload, bound to nothing. */
  | { kind: 'proposed'; facts: Fact[] }
  | { kind: 'unavailable'; why: string };

interface Common {
  id: string;
  actionType: string | null;
  actor: string;
  riskScore: number | null;
  reasonCodes: string[];
  requestedBy: string;
  requestedAt: string;
  deadline: string;
  status: string;
  facts: FactsView;
}

export interface ApprovalItem extends Common {
  kind: 'approval';
  approval: ApprovalRecord;
}

export interface EscalationItem extends Common {
  kind: 'escalation';
  escalation: EscalationWire;
  votes: ApprovalRecordWire[];
  progress: QuorumProgressWire;
}

export type InboxItem = ApprovalItem | EscalationItem;

export interface InboxSnapshot {
  items: InboxItem[];
  /** Things the person should know about what is not shown. */
  notices: string[];
}

const STANDARD_FACTS = ['environment', 'target', 'amount_usd', 'account_code'];
const OWN_FIELDS = new Set(['action_type', 'actor_id']);

const isRecord = (value: unknown): value is Record<string, unknown> => typeof value === 'object' && value !== null && !Array.isArray(value);
const strings = (value: unknown): string[] | null => (Array.isArray(value) && value.every((item) => typeof item === 'string') ? value : null);

/** The facts of `context` that were bound: `names` when the evaluation listed them, else the standard ones it holds. */
function boundFrom(context: Record<string, unknown>, names: string[] | null): Fact[] {
  // The standard facts first, in the order people read an action by; then the policy's own.
  const ordered = names === null ? STANDARD_FACTS : [...STANDARD_FACTS.filter((name) => names.includes(name)), ...names.filter((name) => !STANDARD_FACTS.includes(name))];
  return ordered
    .filter((name) => !OWN_FIELDS.has(name) && context[name] !== undefined)
    .map((name) => ({ name, label: factLabel(name), value: factValue(name, context[name]) }));
}

// Evaluations never change, so their facts are read once per page load. Failures are not kept.
const evaluationFacts = new Map<string, Fact[]>();

async function factsOfEvaluation(evaluationId: string, session: SignedInSession, fallback: FactsView | null, signal: AbortSignal): Promise<FactsView> {
  const known = evaluationFacts.get(evaluationId);
  if (known) return { kind: 'bound', facts: known };
  if (!session.permissions.includes('audit:read')) {
    return fallback ?? { kind: 'unavailable', why: 'The environment, target, amount and other bound facts are in the audit log, which needs the audit:read permission.' };
  }
  try {
    const event = await getEvaluationEvent(evaluationId, signal);
    const details = event?.payload.details;
    if (!details || !isRecord(details.context)) return fallback ?? { kind: 'unavailable', why: 'The evaluation behind this request was not found in the audit log.' };
    const facts = boundFrom(details.context, strings(details.bound_facts));
    evaluationFacts.set(evaluationId, facts);
    return { kind: 'bound', facts };
  } catch (error) {
    if (isAbort(error) || !(error instanceof ApiError) || error.status === 401) throw error;
    return fallback ?? { kind: 'unavailable', why: `The bound facts could not be read: ${error.message}` };
  }
}

async function approvalItem(approval: ApprovalRecord, session: SignedInSession, signal: AbortSignal): Promise<ApprovalItem> {
  return {
    kind: 'approval',
    id: approval.id,
    approval,
    actionType: approval.action_type,
    actor: approval.actor_id,
    riskScore: approval.risk_score,
    reasonCodes: approval.reason_codes,
    requestedBy: approval.requested_by,
    requestedAt: approval.created_at,
    deadline: approval.expires_at,
    status: approval.status,
    facts: await factsOfEvaluation(approval.evaluation_id, session, null, signal),
  };
}

/** An escalation's item; `facts` may be given when known already (after a vote). */
export async function escalationItem(
  escalation: EscalationWire,
  votes: ApprovalRecordWire[],
  progress: QuorumProgressWire,
  session: SignedInSession,
  signal: AbortSignal,
  facts?: FactsView,
): Promise<EscalationItem> {
  const proposed = isRecord(escalation.proposedAction) ? escalation.proposedAction : {};
  const evaluationId = escalation.metadata.evaluation_id;
  // Opened by evaluate: proposedAction is {action_type, actor_id, context} and metadata names the evaluation.
  const fromEvaluate = escalation.bindingHash !== null && typeof evaluationId === 'string';
  const context = isRecord(proposed.context) ? proposed.context : null;
  let view: FactsView;
  if (facts) view = facts;
  else if (fromEvaluate) {
    view = await factsOfEvaluation(evaluationId, session, context ? { kind: 'bound', facts: boundFrom(context, null) } : null, signal);
  } else {
    const entries = Object.entries(proposed).map(([name, value]) => ({ name, label: name, value: factValue(name, value) }));
    view = entries.length > 0 ? { kind: 'proposed', facts: entries } : { kind: 'unavailable', why: 'This escalation was created through the API and describes no action beyond its reason.' };
  }
  return {
    kind: 'escalation',
    id: escalation.id,
    escalation,
    votes,
    progress,
    actionType: typeof proposed.action_type === 'string' ? proposed.action_type : null,
    actor: escalation.agentId,
    riskScore: escalation.riskScore,
    reasonCodes: strings(escalation.metadata.reason_codes) ?? [],
    requestedBy: escalation.createdBy,
    requestedAt: escalation.createdAt,
    deadline: escalation.timeoutAt,
    status: escalation.status,
    facts: view,
  };
}

/** The pending approval requests; none, with a notice, when the signed-in person may not read them. */
async function pendingApprovals(session: SignedInSession, notices: string[], signal: AbortSignal): Promise<ApprovalItem[]> {
  if (!session.permissions.includes('approvals:read') && !session.permissions.includes('approvals:write')) {
    notices.push('Approval requests are not shown: they need the approvals:read permission.');
    return [];
  }
  const list = await listPendingApprovals(signal);
  if (list.next_cursor !== null) notices.push(`Only the newest ${list.approvals.length} pending approval requests are shown.`);
  return Promise.all(list.approvals.map((approval) => approvalItem(approval, session, signal)));
}

async function openEscalations(session: SignedInSession, notices: string[], signal: AbortSignal): Promise<EscalationItem[]> {
  let pages;
  try {
    pages = await Promise.all([listEscalations('pending', signal), listEscalations('escalated', signal)]);
  } catch (error) {
    // A hosted deployment serves no escalation endpoints at all: 404, as for an unknown path.
    if (error instanceof ApiError && error.status === 404) return [];
    throw error;
  }
  if (pages.some((page) => page.more)) notices.push('Only the newest 100 escalations of each status are shown.');
  const open = pages.flatMap((page) => page.escalations);
  const items = await Promise.all(
    open.map(async (escalation) => {
      try {
        const detail = await getEscalation(escalation.id, signal);
        return await escalationItem(detail.escalation, detail.approvalRecords, detail.quorumProgress, session, signal);
      } catch (error) {
        // Gone between the list and the detail: nothing to decide any more.
        if (error instanceof ApiError && error.status === 404) return null;
        throw error;
      }
    }),
  );
  return items.filter((item): item is EscalationItem => item !== null && (item.status === 'pending' || item.status === 'escalated'));
}

/** Everything waiting for a decision, the one closest to its deadline first. */
export async function loadInbox(session: SignedInSession, signal: AbortSignal): Promise<InboxSnapshot> {
  const notices: string[] = [];
  const [approvals, escalations] = await Promise.all([pendingApprovals(session, notices, signal), openEscalations(session, notices, signal)]);
  const items: InboxItem[] = [...approvals, ...escalations];
  items.sort((a, b) => Date.parse(a.deadline) - Date.parse(b.deadline));
  return { items, notices };
}
