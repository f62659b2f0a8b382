/**
 * An escalation's states and the pure moves between them (no I/O: the store and the audit
 * events come in escalations.ts).
 *
 *   (none)     ──create──▶ pending, or auto_approved when riskScore < the organization's threshold
 *   pending    ──vote────▶ approved | rejected (a threshold, or every vote cast: the fallback)
 *   pending    ──tier times out, another tier follows──▶ escalated (the next tier is asked)
 *   escalated  ──vote / time out──▶ as pending, counting the votes of the current tier only
 *   open       ──last tier times out──▶ timed_out (outcome: fallbackDecision)
 *
 * Timeouts are instants, not events: a tier ends at its `timeoutAt` whether or not anyone looks,
 * and the next tier starts then (not when the timeout is noticed), so the sweeper, a read and a
 * vote all derive the same history from the same row.
 *
 * @example
 *   const { escalation, steps } = applyDueTimeouts(stored, new Date(clock.now()));
 *   steps; // [{ fromTier: 0, toTier: 1, at }] → escalated; [{ fromTier: 1, toTier: null, at }] → timed_out
 */
import type { EscalationResolution, EscalationStatus, QuorumTier, VoteDecision } from '../../shared/wire/escalations.js';
import { outcomeAfterVote, type Tally, type TierOutcome } from './quorum.js';

export interface EscalationTier {
  quorumRequired: QuorumTier;
  approverPoolSize: number;
  timeoutMs: number;
}

export interface Escalation {
  id: string;
  orgId: string;
  status: EscalationStatus;
  agentId: string;
  escalationReason: string;
  proposedAction: Record<string, unknown> | null;
  riskScore: number | null;
  /** The approver tiers in order; `tier` indexes the one being asked. */
  tiers: EscalationTier[];
  tier: number;
  minApprovers: number | null;
  fallbackDecision: VoteDecision;
  /** When the current tier times out. */
  timeoutAt: Date;
  metadata: Record<string, unknown>;
  bindingHash: string | null;
  /** The action's bound facts, with `bindingHash`: escalations opened by evaluate; null via the API. */
  boundFacts: Record<string, unknown> | null;
  /** The credential that created it; with `agentId`, the requester who may not vote. */
  createdBy: string;
  /** The identity behind `createdBy` (auth/identity.ts): none of its keys may vote. */
  creatorIdentity: string;
  requestId: string | null;
  resolution: EscalationResolution | null;
  outcome: VoteDecision | null;
  resolvedAt: Date | null;
  createdAt: Date;
  updatedAt: Date;
}

export interface ApprovalRecord {
  id: string;
  escalationId: string;
  orgId: string;
  /** The credential that cast the vote. */
  userId: string;
  /** The identity behind it: one vote per identity and escalation. */
  voterIdentity: string;
  decision: VoteDecision;
  note: string | null;
  tier: number;
  createdAt: Date;
}

export const OPEN_STATUSES: readonly EscalationStatus[] = ['pending', 'escalated'];

export function isOpen(escalation: Pick<Escalation, 'status'>): boolean {
  return OPEN_STATUSES.includes(escalation.status);
}

export function currentTier(escalation: Pick<Escalation, 'tiers' | 'tier'>): EscalationTier {
  const tier = escalation.tiers[escalation.tier];
  if (!tier) throw new Error(`escalation has no tier ${escalation.tier}`);
  return tier;
}

export interface TimeoutStep {
  fromTier: number;
  /** The tier asked next; null when the chain was exhausted (the escalation timed out). */
  toTier: number | null;
  /** The instant the tier ran out. */
  at: Date;
}

/**
 * Every timeout due at `now`, applied in order: a reader that comes late walks through each tier
 * that ran out meanwhile. Returns the escalation unchanged (and no steps) when nothing is due.
 */
export function applyDueTimeouts(escalation: Escalation, now: Date): { escalation: Escalation; steps: TimeoutStep[] } {
  let next = escalation;
  const steps: TimeoutStep[] = [];
  while (isOpen(next) && next.timeoutAt.getTime() <= now.getTime()) {
    const at = next.timeoutAt;
    const following = next.tiers[next.tier + 1];
    if (following) {
      steps.push({ fromTier: next.tier, toTier: next.tier + 1, at });
      next = { ...next, status: 'escalated', tier: next.tier + 1, timeoutAt: new Date(at.getTime() + following.timeoutMs), updatedAt: now };
    } else {
      steps.push({ fromTier: next.tier, toTier: null, at });
      next = {
        ...next,
        status: 'timed_out',
        resolution: 'timeout',
        outcome: next.fallbackDecision,
        resolvedAt: at,
        updatedAt: now,
      };
    }
  }
  return { escalation: next, steps };
}

/**
 * The escalation after a vote, given the current tier's tally including that vote. The caller
 * has checked that it is open and that its timeouts were applied first.
 */
export function applyVote(escalation: Escalation, tally: Tally, vote: VoteDecision, now: Date): { escalation: Escalation; outcome: TierOutcome } {
  const tier = currentTier(escalation);
  const outcome = outcomeAfterVote(tier.quorumRequired, tier.approverPoolSize, escalation.fallbackDecision, tally, vote);
  if (outcome.status === 'pending') return { escalation: { ...escalation, updatedAt: now }, outcome };
  return {
    escalation: {
      ...escalation,
      status: outcome.status,
      resolution: outcome.resolution,
      outcome: outcome.status === 'approved' ? 'approve' : 'reject',
      resolvedAt: now,
      updatedAt: now,
    },
    outcome,
  };
}

/** Whether `riskScore` is low enough to approve without asking anyone; `threshold` null: never. */
export function qualifiesForAutoApproval(riskScore: number | null, threshold: number | null): boolean {
  return riskScore !== null && threshold !== null && riskScore < threshold;
}
