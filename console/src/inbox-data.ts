/**
 * What the inbox shows, gathered from the public API: pending approval requests, open
 * escalations with their votes and quorum progress, and each action's bound facts.
 *
 * Approval requests and the escalations evaluate opens carry their action's bound facts
 * (environment, target, amount, account and the class's own bound keys), so whoever may read
 * the request sees what a vote would let through, with no other permission.
 */
import {
  ApiError,
  getEscalation,
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
  /** The action's bound facts, other than action type and actor (shown on their own). */
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

/** The bound facts as the inbox lists them: the standard ones first, in the order people read an action by; then the policy's own. */
function boundView(facts: Record<string, unknown>): FactsView {
  const names = Object.keys(facts).filter((name) => !OWN_FIELDS.has(name));
  const ordered = [...STANDARD_FACTS.filter((name) => names.includes(name)), ...names.filter((name) => !STANDARD_FACTS.includes(name)).sort()];
  return { kind: 'bound', facts: ordered.map((name) => ({ name, label: factLabel(name), value: factValue(name, facts[name]) })) };
}

function approvalItem(approval: ApprovalRecord): ApprovalItem {
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
    facts: boundView(approval.bound_facts),
  };
}

/** What an escalation is about: the bound facts evaluate gave it, else what its creator proposed. */
function escalationFacts(escalation: EscalationWire): FactsView {
  if (escalation.boundFacts !== null) return boundView(escalation.boundFacts);
  const entries = Object.entries(escalation.proposedAction ?? {}).map(([name, value]) => ({ name, label: name, value: factValue(name, value) }));
  return entries.length > 0 ? { kind: 'proposed', facts: entries } : { kind: 'unavailable', why: 'This escalation was created through the API and describes no action beyond its reason.' };
}

export function escalationItem(escalation: EscalationWire, votes: ApprovalRecordWire[], progress: QuorumProgressWire): EscalationItem {
  const proposed = isRecord(escalation.proposedAction) ? escalation.proposedAction : {};
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
    facts: escalationFacts(escalation),
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
  return list.approvals.map(approvalItem);
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
        return escalationItem(detail.escalation, detail.approvalRecords, detail.quorumProgress);
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
