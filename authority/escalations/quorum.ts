/**
 * Quorum arithmetic, pure: how many votes each side of a tier needs, what a vote does to the
 * tally, and how far a tier is from deciding. N is the tier's approver pool size.
 *
 *   tier              approve when                 reject when
 *   single_approver   the first vote is approve    the first vote is reject
 *   simple_majority   approvals ≥ floor(N/2) + 1   rejections ≥ floor(N/2) + 1
 *   two_thirds        approvals ≥ ceil(2N/3)       rejections ≥ ceil(2N/3)
 *   unanimous         all N votes approve          any single reject
 *
 * When all N votes are cast and neither threshold is reached, the fallback decision applies
 * (`resolution: "fallback"`); a threshold reached is `resolution: "quorum"`. A tier that has
 * decided takes no further votes, so the two sides can never both be reached.
 *
 * @example
 *   quorumThresholds('two_thirds', 4);                         // { approve: 3, reject: 3 }
 *   settleVotes('simple_majority', 4, 'reject', ['approve', 'reject', 'approve', 'reject']);
 *   // { status: 'rejected', resolution: 'fallback', decidedAtVote: 4 }
 */
import type { QuorumTier, VoteDecision } from '../../shared/wire/escalations.js';

export interface Thresholds {
  /** Approve votes that approve. */
  approve: number;
  /** Reject votes that reject. */
  reject: number;
}

export interface Tally {
  approvals: number;
  rejections: number;
}

export type TierOutcome =
  | { status: 'pending'; resolution: null }
  | { status: 'approved' | 'rejected'; resolution: 'quorum' | 'fallback' };

const PENDING: TierOutcome = { status: 'pending', resolution: null };

function checkPool(poolSize: number): void {
  if (!Number.isInteger(poolSize) || poolSize < 1) throw new RangeError(`approver pool size must be a positive integer, not ${poolSize}`);
}

export function quorumThresholds(tier: QuorumTier, poolSize: number): Thresholds {
  checkPool(poolSize);
  switch (tier) {
    case 'single_approver':
      return { approve: 1, reject: 1 };
    case 'simple_majority': {
      const majority = Math.floor(poolSize / 2) + 1;
      return { approve: majority, reject: majority };
    }
    case 'two_thirds': {
      // ceil(2N/3) in integers: no floating point near the thresholds.
      const twoThirds = Math.floor((2 * poolSize + 2) / 3);
      return { approve: twoThirds, reject: twoThirds };
    }
    case 'unanimous':
      return { approve: poolSize, reject: 1 };
  }
}

/**
 * What the tier has decided after `vote`, given the tally that already includes it. The side
 * that just voted is checked first: only it can have crossed its threshold with this vote.
 */
export function outcomeAfterVote(tier: QuorumTier, poolSize: number, fallback: VoteDecision, tally: Tally, vote: VoteDecision): TierOutcome {
  const needed = quorumThresholds(tier, poolSize);
  if (vote === 'approve' && tally.approvals >= needed.approve) return { status: 'approved', resolution: 'quorum' };
  if (vote === 'reject' && tally.rejections >= needed.reject) return { status: 'rejected', resolution: 'quorum' };
  if (tally.approvals + tally.rejections >= poolSize) {
    return { status: fallback === 'approve' ? 'approved' : 'rejected', resolution: 'fallback' };
  }
  return PENDING;
}

/**
 * Replays `votes` in order as a tier would take them: the first vote that decides ends it (the
 * rest would be refused). `decidedAtVote` is that vote's 1-based position, null while pending.
 */
export function settleVotes(
  tier: QuorumTier,
  poolSize: number,
  fallback: VoteDecision,
  votes: readonly VoteDecision[],
): TierOutcome & { decidedAtVote: number | null } {
  const tally: Tally = { approvals: 0, rejections: 0 };
  for (const [index, vote] of votes.entries()) {
    if (vote === 'approve') tally.approvals += 1;
    else tally.rejections += 1;
    const outcome = outcomeAfterVote(tier, poolSize, fallback, tally, vote);
    if (outcome.status !== 'pending') return { ...outcome, decidedAtVote: index + 1 };
  }
  return { ...PENDING, decidedAtVote: null };
}

export interface QuorumProgress extends Tally {
  approvalsRequired: number;
  rejectionsRequired: number;
  votesCast: number;
  /** Votes the tier can still take; 0 once it (or the escalation) is final. */
  votesRemaining: number;
}

export function quorumProgress(tier: QuorumTier, poolSize: number, tally: Tally, open: boolean): QuorumProgress {
  const needed = quorumThresholds(tier, poolSize);
  const votesCast = tally.approvals + tally.rejections;
  return {
    approvals: tally.approvals,
    rejections: tally.rejections,
    approvalsRequired: needed.approve,
    rejectionsRequired: needed.reject,
    votesCast,
    votesRemaining: open ? Math.max(0, poolSize - votesCast) : 0,
  };
}
