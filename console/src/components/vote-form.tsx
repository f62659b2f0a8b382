/**
 * Approve or reject, with an optional note. The note lives in this component's own state, so the
 * inbox refreshing around it every few seconds never loses what the person is typing; it is
 * cleared only once the vote went through. A refusal shows the server's message as it is.
 */
import { useState } from 'preact/hooks';
import type { VoteDecision } from '../api';

/** The most a note may hold (shared/wire: approvals and escalations alike). */
const MAX_NOTE = 2000;

interface Props {
  itemId: string;
  /** Resolves to null when the vote was recorded, else the message to show. */
  onVote: (decision: VoteDecision, note: string) => Promise<string | null>;
}

export function VoteForm({ itemId, onVote }: Props) {
  const [note, setNote] = useState('');
  const [sending, setSending] = useState<VoteDecision | null>(null);
  const [problem, setProblem] = useState<string | null>(null);
  const noteId = `note-${itemId}`;

  const vote = async (decision: VoteDecision): Promise<void> => {
    setSending(decision);
    setProblem(null);
    const refusal = await onVote(decision, note);
    setSending(null);
    if (refusal === null) setNote('');
    else setProblem(refusal);
  };

  return (
    <form class="vote-form" onSubmit={(event) => event.preventDefault()}>
      <label for={noteId}>Note (optional)</label>
      <textarea
        id={noteId}
        name="note"
        rows={3}
        maxLength={MAX_NOTE}
        value={note}
        onInput={(event) => setNote(event.currentTarget.value)}
        data-testid="vote-note"
      />
      <div class="actions">
        <button type="button" class="button primary" disabled={sending !== null} onClick={() => void vote('approve')} data-testid="approve">
          {sending === 'approve' ? 'Approving…' : 'Approve'}
        </button>
        <button type="button" class="button danger" disabled={sending !== null} onClick={() => void vote('reject')} data-testid="reject">
          {sending === 'reject' ? 'Rejecting…' : 'Reject'}
        </button>
      </div>
      {problem !== null && (
        <p role="alert" class="error" data-testid="vote-error">
          {problem}
        </p>
      )}
    </form>
  );
}
