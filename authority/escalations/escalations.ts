/**
 * Escalations: creating one, voting on it, applying its timeouts, and reading it. Every change
 * runs in one transaction that locks the escalation's row, writes the new state, and appends its
 * audit events (then hands them to the webhook outbox) last, so state and record commit together.
 *
 * `createEscalation` works inside a caller's transaction: evaluate opens an escalation in the
 * transaction that records the `escalate` decision. `readEscalation` is the read-only view with
 * due timeouts applied, for callers that must not write (checking an escalation presented as an
 * approval); the sweeper or the next change records those timeouts.
 *
 * @example
 *   const escalation = await db.transaction((tx) =>
 *     createEscalation(tx, { orgId, agentId: 'deploy-bot', escalationReason: 'schema change', timeoutMs: 600_000, createdBy: 'api_key:…' }, clock));
 *   const vote = await castVote(db, { orgId, escalationId: escalation.id, voter, decision: 'approve', note: null, requestId }, clock);
 *   vote.kind; // 'recorded' | 'not_found' | 'requester' | 'final' | 'duplicate'
 */
import { randomUUID } from 'node:crypto';
import { CountersignError } from '../../shared/errors.js';
import type { EscalationStatus, QuorumTier, VoteDecision } from '../../shared/wire/escalations.js';
import { MAX_APPROVER_POOL, MAX_ESCALATION_TIMEOUT_MS, unrecordableProblem } from '../../shared/wire/escalations.js';
import { appendAuditEvents } from '../audit/chain.js';
import type { NewAuditEvent } from '../audit/types.js';
import { identityOfCredential } from '../auth/identity.js';
import type { AuthorityConfig } from '../config.js';
import type { Db, Queryable } from '../store/db.js';
import type { Clock } from '../time.js';
import { createdEvents, timeoutEvents, voteEvents, type ChangeContext } from './audit-events.js';
import {
  applyDueTimeouts,
  applyVote,
  isOpen,
  qualifiesForAutoApproval,
  type ApprovalRecord,
  type Escalation,
  type EscalationTier,
} from './lifecycle.js';
import type { Tally } from './quorum.js';
import { dueEscalations, findEscalation, insertEscalation, insertVote, lockEscalation, tallyTier, updateEscalationState } from './store.js';

export interface NewEscalationTier {
  quorumRequired: QuorumTier;
  /** Required except for single_approver (then 1). */
  approverPoolSize?: number | null | undefined;
  timeoutMs: number;
}

export interface NewEscalation {
  /** Chosen by the caller when it must name the escalation before creating it (evaluate); else random. */
  id?: string | undefined;
  orgId: string;
  agentId: string;
  escalationReason: string;
  proposedAction?: Record<string, unknown> | null | undefined;
  riskScore?: number | null | undefined;
  /** The first tier; default single_approver. */
  quorumRequired?: QuorumTier | undefined;
  approverPoolSize?: number | null | undefined;
  /** Advisory only. */
  minApprovers?: number | null | undefined;
  timeoutMs: number;
  /** Tiers asked after the first one times out, in order. */
  chain?: readonly NewEscalationTier[] | undefined;
  /** Default reject. */
  fallbackDecision?: VoteDecision | undefined;
  metadata?: Record<string, unknown> | undefined;
  /** The credential creating it (`api_key:<id>`, `user:<id>`): it may not vote. */
  createdBy: string;
  /** The identity behind `createdBy`; looked up from the credential when absent (evaluate's path). */
  creatorIdentity?: string | undefined;
  requestId?: string | null | undefined;
  /** The action's binding hash and bound facts when evaluate opens it; none via the API. */
  binding?: { hash: string; facts: Record<string, unknown> } | null | undefined;
  /** The organization's auto-approve threshold (`autoApproveThreshold`); null or absent: off. */
  autoApproveBelow?: number | null | undefined;
}

/**
 * Whoever votes: their credential, the plain ids that also name them (user id, key id), and the
 * identity behind the credential (auth/identity.ts), which is what quorums count.
 */
export interface Voter {
  credential: string;
  aliases: readonly string[];
  identity: string;
}

/** What a change moved the escalation into, in order: for the metrics. */
export type Transitions = EscalationStatus[];

/** The organization's auto-approve threshold from configuration (its own, else the global one); null: off. */
export function autoApproveThreshold(config: AuthorityConfig['escalations'], orgId: string): number | null {
  const own = config.organizations[orgId];
  return own === undefined ? config.auto_approve_below : own.auto_approve_below;
}

function invalid(path: string, message: string): CountersignError {
  return new CountersignError('invalid_request', `${path}: ${message}`, { details: [{ path, message }] });
}

function tierOf(tier: NewEscalationTier, path: string): EscalationTier {
  const pool = tier.approverPoolSize ?? null;
  if (pool === null && tier.quorumRequired !== 'single_approver') {
    throw invalid(`${path}.approverPoolSize`, `quorumRequired ${tier.quorumRequired} needs approverPoolSize`);
  }
  if (pool !== null && (!Number.isInteger(pool) || pool < 1 || pool > MAX_APPROVER_POOL)) {
    throw invalid(`${path}.approverPoolSize`, `must be an integer from 1 to ${MAX_APPROVER_POOL}`);
  }
  if (!Number.isInteger(tier.timeoutMs) || tier.timeoutMs < 1 || tier.timeoutMs > MAX_ESCALATION_TIMEOUT_MS) {
    throw invalid(`${path}.timeoutMs`, `must be an integer from 1 to ${MAX_ESCALATION_TIMEOUT_MS}`);
  }
  return { quorumRequired: tier.quorumRequired, approverPoolSize: pool ?? 1, timeoutMs: tier.timeoutMs };
}

/**
 * Creates an escalation inside `tx` and appends its audit events there: `pending`, or
 * `auto_approved` (final) when its risk score is below `autoApproveBelow`.
 */
export async function createEscalation(tx: Queryable, input: NewEscalation, clock: Clock): Promise<Escalation> {
  const now = new Date(clock.now());
  const first = tierOf({ quorumRequired: input.quorumRequired ?? 'single_approver', approverPoolSize: input.approverPoolSize, timeoutMs: input.timeoutMs }, 'quorumConfig');
  const tiers = [first, ...(input.chain ?? []).map((tier, index) => tierOf(tier, `escalationChain.${index}`))];
  const riskScore = input.riskScore ?? null;
  if (riskScore !== null && !(riskScore >= 0 && riskScore <= 1)) throw invalid('riskScore', 'must be between 0 and 1');
  // The route's schema refuses these already; other callers (evaluate passes the action's context)
  // get the same 400 here rather than a failed insert.
  for (const [path, value] of [['agentId', input.agentId], ['escalationReason', input.escalationReason], ['proposedAction', input.proposedAction], ['metadata', input.metadata]] as const) {
    const problem = unrecordableProblem(value);
    if (problem !== null) throw invalid(path, problem);
  }
  const threshold = input.autoApproveBelow ?? null;
  const auto = qualifiesForAutoApproval(riskScore, threshold);
  const fallbackDecision = input.fallbackDecision ?? 'reject';
  const escalation: Escalation = {
    id: input.id ?? randomUUID(),
    orgId: input.orgId,
    status: auto ? 'auto_approved' : 'pending',
    agentId: input.agentId,
    escalationReason: input.escalationReason,
    proposedAction: input.proposedAction ?? null,
    riskScore,
    tiers,
    tier: 0,
    minApprovers: input.minApprovers ?? null,
    fallbackDecision,
    timeoutAt: new Date(now.getTime() + first.timeoutMs),
    metadata: input.metadata ?? {},
    bindingHash: input.binding?.hash ?? null,
    boundFacts: input.binding?.facts ?? null,
    createdBy: input.createdBy,
    creatorIdentity: input.creatorIdentity ?? (await identityOfCredential(tx, input.orgId, input.createdBy)),
    requestId: input.requestId ?? null,
    resolution: auto ? 'auto_approve' : null,
    outcome: auto ? 'approve' : null,
    resolvedAt: auto ? now : null,
    createdAt: now,
    updatedAt: now,
  };
  await insertEscalation(tx, escalation);
  await appendAuditEvents(tx, createdEvents(escalation, { credential: input.createdBy, requestId: escalation.requestId, now }, threshold), now);
  return escalation;
}

/**
 * The escalation as of now, due timeouts applied in the view only (nothing is written); null when
 * the organization has no such escalation. Safe inside any transaction or none.
 */
export async function readEscalation(db: Queryable, orgId: string, id: string, clock: Clock): Promise<Escalation | null> {
  const stored = await findEscalation(db, orgId, id);
  return stored && applyDueTimeouts(stored, new Date(clock.now())).escalation;
}

/** Records the due timeouts of a locked escalation: its new state and one event per tier that ran out. */
async function recordTimeouts(tx: Queryable, locked: Escalation, context: ChangeContext): Promise<{ escalation: Escalation; events: NewAuditEvent[]; transitions: Transitions }> {
  const { escalation, steps } = applyDueTimeouts(locked, context.now);
  if (steps.length === 0) return { escalation, events: [], transitions: [] };
  await updateEscalationState(tx, escalation);
  return {
    escalation,
    events: timeoutEvents(escalation, steps, context),
    transitions: steps.map((step) => (step.toTier === null ? 'timed_out' : 'escalated')),
  };
}

const SYSTEM: Pick<ChangeContext, 'credential' | 'requestId'> = { credential: 'system', requestId: null };

/**
 * Records the escalation's due timeouts, if any, and returns it as it now stands (null when the
 * organization has no such escalation). Another transaction holding the row (a vote) will apply
 * them itself, so this one does not wait for it.
 */
export async function settleEscalation(db: Db, orgId: string, id: string, clock: Clock): Promise<{ escalation: Escalation; transitions: Transitions } | null> {
  const now = new Date(clock.now());
  return db.transaction(async (tx) => {
    const locked = await lockEscalation(tx, orgId, id, { skipLocked: true });
    if (!locked) {
      const busy = await findEscalation(tx, orgId, id);
      return busy && { escalation: applyDueTimeouts(busy, now).escalation, transitions: [] };
    }
    const settled = await recordTimeouts(tx, locked, { ...SYSTEM, now });
    await appendAuditEvents(tx, settled.events, now);
    return { escalation: settled.escalation, transitions: settled.transitions };
  });
}

/**
 * Records the timeouts of up to `limit` escalations that are due (of every organization, or of
 * `orgId`): one transaction each, so one that cannot be recorded does not hold up the others.
 */
export async function settleDueEscalations(
  db: Db,
  clock: Clock,
  options: { limit: number; orgId?: string | undefined },
): Promise<{ settled: number; transitions: Transitions; failures: unknown[] }> {
  const due = await dueEscalations(db, new Date(clock.now()), options.limit, options.orgId);
  const transitions: Transitions = [];
  const failures: unknown[] = [];
  let settled = 0;
  for (const { id, orgId } of due) {
    try {
      const result = await settleEscalation(db, orgId, id, clock);
      if (result && result.transitions.length > 0) {
        settled += 1;
        transitions.push(...result.transitions);
      }
    } catch (error) {
      failures.push(error);
    }
  }
  return { settled, transitions, failures };
}

export interface VoteInput {
  orgId: string;
  escalationId: string;
  voter: Voter;
  decision: VoteDecision;
  note: string | null;
  requestId: string | null;
}

export type VoteResult =
  | { kind: 'recorded'; escalation: Escalation; record: ApprovalRecord; tally: Tally; transitions: Transitions }
  | { kind: 'not_found' }
  /** The requester (its agent, or the identity that created it through any of its credentials) may not vote. */
  | { kind: 'requester'; transitions: Transitions }
  /** Already final (perhaps by a timeout this very call recorded). */
  | { kind: 'final'; escalation: Escalation; transitions: Transitions }
  | { kind: 'duplicate'; transitions: Transitions };

export function isRequester(escalation: Pick<Escalation, 'agentId' | 'createdBy' | 'creatorIdentity'>, voter: Voter): boolean {
  return (
    escalation.createdBy === voter.credential ||
    escalation.creatorIdentity === voter.identity ||
    escalation.agentId === voter.credential ||
    escalation.agentId === voter.identity ||
    voter.aliases.includes(escalation.agentId)
  );
}

/**
 * Casts one vote under the escalation's row lock: concurrent votes queue on it, so exactly one
 * of them settles the escalation and the later ones find it final. Timeouts due by now are
 * recorded first (and stay recorded even when the vote is then refused).
 */
export async function castVote(db: Db, input: VoteInput, clock: Clock): Promise<VoteResult> {
  const now = new Date(clock.now());
  const context: ChangeContext = { credential: input.voter.credential, requestId: input.requestId, now };
  return db.transaction(async (tx): Promise<VoteResult> => {
    const locked = await lockEscalation(tx, input.orgId, input.escalationId);
    if (!locked) return { kind: 'not_found' };
    const timed = await recordTimeouts(tx, locked, context);
    const refuse = async (result: VoteResult): Promise<VoteResult> => {
      await appendAuditEvents(tx, timed.events, now);
      return result;
    };
    if (isRequester(timed.escalation, input.voter)) return refuse({ kind: 'requester', transitions: timed.transitions });
    if (!isOpen(timed.escalation)) return refuse({ kind: 'final', escalation: timed.escalation, transitions: timed.transitions });

    const vote = await insertVote(tx, {
      id: randomUUID(),
      escalationId: locked.id,
      orgId: locked.orgId,
      tier: timed.escalation.tier,
      userId: input.voter.credential,
      voterIdentity: input.voter.identity,
      decision: input.decision,
      note: input.note,
      createdAt: now,
    });
    if (!vote) return refuse({ kind: 'duplicate', transitions: timed.transitions });
    const tally = await tallyTier(tx, locked.id, timed.escalation.tier);
    const { escalation } = applyVote(timed.escalation, tally, input.decision, now);
    await updateEscalationState(tx, escalation);
    await appendAuditEvents(tx, [...timed.events, ...voteEvents(escalation, vote, tally, context)], now);
    const transitions = escalation.status === timed.escalation.status ? timed.transitions : [...timed.transitions, escalation.status];
    return { kind: 'recorded', escalation, record: vote, tally, transitions };
  });
}
