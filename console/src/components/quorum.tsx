/**
 * An escalation's quorum progress, as the server computed it (authority/escalations/quorum.ts),
 * and every vote cast with who cast it, which way and their note. Counts are spelled out in
 * words so that nothing depends on reading a bar or a colour.
 */
import type { ApprovalRecordWire, QuorumProgressWire, SignedInSession } from '../api';
import { formatDateTime, quorumLabel } from '../format';
import type { EscalationItem } from '../inbox-data';
import { Identity } from './identity';

export function QuorumProgress({ progress, tiers }: { progress: QuorumProgressWire; tiers: number }) {
  return (
    <div class="quorum" data-testid="quorum-progress">
      <p>
        <strong>
          {progress.approvals} of {progress.approvalsRequired}
        </strong>{' '}
        approvals needed to approve; <strong>
          {progress.rejections} of {progress.rejectionsRequired}
        </strong>{' '}
        rejections needed to reject.
      </p>
      <p class="muted">
        {progress.votesCast} {progress.votesCast === 1 ? 'vote' : 'votes'} cast, {progress.votesRemaining} still possible, from a pool of{' '}
        {progress.approverPoolSize} ({quorumLabel(progress.quorumRequired)}); approver tier {progress.tier + 1} of {tiers}.
      </p>
    </div>
  );
}

function Vote({ vote, session, currentTier }: { vote: ApprovalRecordWire; session: Pick<SignedInSession, 'identity'>; currentTier: number }) {
  return (
    <li data-testid="vote" data-decision={vote.decision}>
      <span class="who-voted">
        <Identity identity={vote.userId} session={session} />
      </span>{' '}
      <span class={`verdict verdict-${vote.decision}`}>{vote.decision === 'approve' ? 'approved' : 'rejected'}</span>{' '}
      <span class="muted">
        <time dateTime={vote.createdAt}>{formatDateTime(vote.createdAt)}</time>
        {vote.tier !== currentTier && `, in tier ${vote.tier + 1}`}
      </span>
      {vote.note !== null && <q class="vote-note">{vote.note}</q>}
    </li>
  );
}

export function VoteList({ item, session }: { item: EscalationItem; session: Pick<SignedInSession, 'identity'> }) {
  if (item.votes.length === 0) return <p class="muted">No votes yet.</p>;
  return (
    <ul class="votes">
      {item.votes.map((vote) => (
        <Vote key={vote.id} vote={vote} session={session} currentTier={item.escalation.tier} />
      ))}
    </ul>
  );
}
