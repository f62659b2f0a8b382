/**
 * Quorum arithmetic as a table over N = 1..7 for every tier: the thresholds written out by hand
 * from the quorum rules (docs/approvals.md), the vote sequences that matter (approve threshold
 * first, reject threshold first, every vote cast without either → the fallback, unanimous with one
 * reject), and every possible vote sequence up to N = 7 against a literal reading of the rules.
 */
import t from 'tap';
import { outcomeAfterVote, quorumProgress, quorumThresholds, settleVotes } from '../../authority/escalations/quorum.js';
import { QUORUM_TIERS, type QuorumTier, type VoteDecision } from '../../shared/wire/escalations.js';

const NS = [1, 2, 3, 4, 5, 6, 7] as const;

/** [approve, reject] thresholds for N = 1..7, by hand: floor(N/2)+1, ceil(2N/3), N and 1, 1 and 1. */
const THRESHOLDS: Record<QuorumTier, Array<[number, number]>> = {
  single_approver: [[1, 1], [1, 1], [1, 1], [1, 1], [1, 1], [1, 1], [1, 1]],
  simple_majority: [[1, 1], [2, 2], [2, 2], [3, 3], [3, 3], [4, 4], [4, 4]],
  two_thirds: [[1, 1], [2, 2], [2, 2], [3, 3], [4, 4], [4, 4], [5, 5]],
  unanimous: [[1, 1], [2, 1], [3, 1], [4, 1], [5, 1], [6, 1], [7, 1]],
};

/** N for which all N votes can be cast without either threshold (alternating votes reach ceil(N/2) on one side). */
const FALLBACK_REACHABLE: Record<QuorumTier, number[]> = {
  single_approver: [],
  simple_majority: [2, 4, 6],
  two_thirds: [2, 4, 5, 6, 7],
  unanimous: [],
};

const repeat = (vote: VoteDecision, n: number): VoteDecision[] => Array.from({ length: n }, () => vote);
const alternating = (first: VoteDecision, n: number): VoteDecision[] =>
  Array.from({ length: n }, (_, i) => (i % 2 === 0 ? first : first === 'approve' ? 'reject' : 'approve'));

t.test('thresholds for every tier and N = 1..7', async (t) => {
  for (const tier of QUORUM_TIERS) {
    for (const n of NS) {
      const [approve, reject] = THRESHOLDS[tier][n - 1] as [number, number];
      t.same(quorumThresholds(tier, n), { approve, reject }, `${tier}, N=${n}`);
    }
  }
  t.throws(() => quorumThresholds('simple_majority', 0), RangeError, 'a pool of 0 is a programming error');
  t.throws(() => quorumThresholds('two_thirds', 2.5), RangeError);
});

t.test('the approve threshold reached first approves at exactly that vote', async (t) => {
  for (const tier of QUORUM_TIERS) {
    for (const n of NS) {
      const [approve] = THRESHOLDS[tier][n - 1] as [number, number];
      for (const fallback of ['approve', 'reject'] as const) {
        t.same(settleVotes(tier, n, fallback, repeat('approve', n)), { status: 'approved', resolution: 'quorum', decidedAtVote: approve }, `${tier}, N=${n}, fallback ${fallback}`);
      }
      if (approve > 1) {
        t.same(settleVotes(tier, n, 'reject', repeat('approve', approve - 1)), { status: 'pending', resolution: null, decidedAtVote: null }, `${tier}, N=${n}: one approval short is pending`);
      }
    }
  }
});

t.test('the reject threshold reached first rejects at exactly that vote', async (t) => {
  for (const tier of QUORUM_TIERS) {
    for (const n of NS) {
      const [, reject] = THRESHOLDS[tier][n - 1] as [number, number];
      for (const fallback of ['approve', 'reject'] as const) {
        t.same(settleVotes(tier, n, fallback, repeat('reject', n)), { status: 'rejected', resolution: 'quorum', decidedAtVote: reject }, `${tier}, N=${n}, fallback ${fallback}`);
      }
    }
  }
});

t.test('every vote cast without either threshold: the fallback decides', async (t) => {
  for (const tier of QUORUM_TIERS) {
    for (const n of NS) {
      for (const first of ['approve', 'reject'] as const) {
        const votes = alternating(first, n);
        if (FALLBACK_REACHABLE[tier].includes(n)) {
          t.same(settleVotes(tier, n, 'approve', votes), { status: 'approved', resolution: 'fallback', decidedAtVote: n }, `${tier}, N=${n}, starting ${first}: fallback approve`);
          t.same(settleVotes(tier, n, 'reject', votes), { status: 'rejected', resolution: 'fallback', decidedAtVote: n }, `${tier}, N=${n}, starting ${first}: fallback reject`);
          t.same(settleVotes(tier, n, 'approve', votes.slice(0, n - 1)), { status: 'pending', resolution: null, decidedAtVote: null }, `${tier}, N=${n}: one vote short of all is still pending`);
        } else {
          t.equal(settleVotes(tier, n, 'approve', votes).resolution, 'quorum', `${tier}, N=${n}, starting ${first}: a threshold is always reached first`);
        }
      }
    }
  }
});

t.test('unanimous: one reject rejects, wherever it comes', async (t) => {
  for (const n of NS) {
    for (let position = 1; position <= n; position += 1) {
      const votes = [...repeat('approve', position - 1), 'reject' as const, ...repeat('approve', n - position)];
      t.same(settleVotes('unanimous', n, 'approve', votes), { status: 'rejected', resolution: 'quorum', decidedAtVote: position }, `N=${n}, reject at vote ${position}`);
    }
  }
});

t.test('single approver: the first vote decides', async (t) => {
  for (const n of NS) {
    t.same(settleVotes('single_approver', n, 'approve', ['reject', 'approve']), { status: 'rejected', resolution: 'quorum', decidedAtVote: 1 });
    t.same(settleVotes('single_approver', n, 'reject', ['approve', 'reject']), { status: 'approved', resolution: 'quorum', decidedAtVote: 1 });
  }
});

/** The quorum rules read literally, on the counts after each vote. */
function oracle(tier: QuorumTier, n: number, fallback: VoteDecision, votes: VoteDecision[]): { status: string; resolution: string | null; decidedAtVote: number | null } {
  let approvals = 0;
  let rejections = 0;
  for (const [index, vote] of votes.entries()) {
    if (vote === 'approve') approvals += 1;
    else rejections += 1;
    const at = index + 1;
    const approved =
      tier === 'single_approver' ? at === 1 && vote === 'approve'
      : tier === 'simple_majority' ? approvals >= Math.floor(n / 2) + 1
      : tier === 'two_thirds' ? approvals >= Math.ceil((2 * n) / 3)
      : approvals === n;
    const rejected =
      tier === 'single_approver' ? at === 1 && vote === 'reject'
      : tier === 'simple_majority' ? rejections >= Math.floor(n / 2) + 1
      : tier === 'two_thirds' ? rejections >= Math.ceil((2 * n) / 3)
      : rejections >= 1;
    if (approved) return { status: 'approved', resolution: 'quorum', decidedAtVote: at };
    if (rejected) return { status: 'rejected', resolution: 'quorum', decidedAtVote: at };
    if (at === n) return { status: fallback === 'approve' ? 'approved' : 'rejected', resolution: 'fallback', decidedAtVote: at };
  }
  return { status: 'pending', resolution: null, decidedAtVote: null };
}

t.test('every vote sequence up to N = 7 agrees with the rules read literally', async (t) => {
  let compared = 0;
  let disagreements = 0;
  for (const tier of QUORUM_TIERS) {
    for (const n of NS) {
      for (let length = 0; length <= n; length += 1) {
        for (let bits = 0; bits < 2 ** length; bits += 1) {
          const votes = Array.from({ length }, (_, i): VoteDecision => ((bits >> i) & 1 ? 'reject' : 'approve'));
          for (const fallback of ['approve', 'reject'] as const) {
            const got = settleVotes(tier, n, fallback, votes);
            const want = oracle(tier, n, fallback, votes);
            compared += 1;
            if (got.status !== want.status || got.resolution !== want.resolution || got.decidedAtVote !== want.decidedAtVote) {
              disagreements += 1;
              if (disagreements <= 5) t.fail(`${tier} N=${n} ${votes.join(',')} fallback ${fallback}: got ${JSON.stringify(got)}, want ${JSON.stringify(want)}`);
            }
          }
        }
      }
    }
  }
  t.equal(disagreements, 0, `${compared} sequences compared, none disagree`);
});

t.test('a vote that completes the pool without a threshold takes the fallback; a crossing vote does not', async (t) => {
  t.same(outcomeAfterVote('simple_majority', 2, 'approve', { approvals: 1, rejections: 1 }, 'reject'), { status: 'approved', resolution: 'fallback' });
  t.same(outcomeAfterVote('two_thirds', 4, 'reject', { approvals: 2, rejections: 2 }, 'approve'), { status: 'rejected', resolution: 'fallback' });
  t.same(outcomeAfterVote('two_thirds', 3, 'reject', { approvals: 2, rejections: 1 }, 'approve'), { status: 'approved', resolution: 'quorum' }, 'the last vote crossing a threshold is quorum, not fallback');
});

t.test('progress: counts, what each side needs, votes remaining', async (t) => {
  t.same(quorumProgress('two_thirds', 6, { approvals: 2, rejections: 1 }, true), {
    approvals: 2, rejections: 1, approvalsRequired: 4, rejectionsRequired: 4, votesCast: 3, votesRemaining: 3,
  });
  t.same(quorumProgress('unanimous', 3, { approvals: 0, rejections: 0 }, true), {
    approvals: 0, rejections: 0, approvalsRequired: 3, rejectionsRequired: 1, votesCast: 0, votesRemaining: 3,
  });
  t.equal(quorumProgress('simple_majority', 5, { approvals: 3, rejections: 0 }, false).votesRemaining, 0, 'a final escalation takes no more votes');
});
