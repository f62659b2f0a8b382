/**
 * The inbox: what waits for a decision, refreshed every five seconds while the page is visible,
 * and the person's own decisions of this visit with what came of them.
 *
 * A link to one item (`?approval=<id>` or `?escalation=<id>`, as the MCP gate's hold answers give)
 * marks that item and moves the focus to it once it is loaded; if it no longer waits, the page
 * says so.
 *
 * Refreshes replace the data, never the components: each item keeps its key, so a half-written
 * note survives them. After a vote the inbox refreshes at once; until that answer arrives, the
 * vote's own response is shown, so the item never looks as if the vote had not happened.
 */
import { useEffect, useRef, useState } from 'preact/hooks';
import { resolveApproval, respondToEscalation, type SignedInSession, type VoteDecision } from '../api';
import { InboxItemCard } from '../components/inbox-item';
import { messageOf } from '../components/parts';
import { formatClock, statusLabel } from '../format';
import { escalationItem, loadInbox, type InboxItem, type InboxSnapshot } from '../inbox-data';
import { useLatestLoad } from '../latest-load';
import { usePageTitle } from '../page-title';
import { useSearch } from '../router';

const REFRESH_MS = 5000;

interface Outcome {
  item: InboxItem;
  message: string;
  /** When the vote's answer came (ms): a refresh started earlier does not know of it yet. */
  at: number;
}

interface Loaded extends InboxSnapshot {
  /** When this refresh started (ms). */
  startedAt: number;
}

const isOpen = (item: InboxItem): boolean => item.status === 'pending' || item.status === 'escalated';

/** The item a link names (`?approval=<id>` or `?escalation=<id>`), or null. */
function linkedItem(search: URLSearchParams): { kind: InboxItem['kind']; id: string } | null {
  const approval = search.get('approval');
  if (approval) return { kind: 'approval', id: approval };
  const escalation = search.get('escalation');
  return escalation ? { kind: 'escalation', id: escalation } : null;
}

/** What one vote came to, in words, from the server's answer. */
async function castVote(item: InboxItem, decision: VoteDecision, note: string): Promise<{ item: InboxItem; message: string }> {
  const verb = decision === 'approve' ? 'approved' : 'rejected';
  if (item.kind === 'approval') {
    const approval = await resolveApproval(item.id, decision, note);
    return { item: { ...item, approval, status: approval.status }, message: `You ${verb} this request. It is now: ${statusLabel(approval.status)}.` };
  }
  const result = await respondToEscalation(item.id, decision, note);
  const votes = [...item.votes.filter((vote) => vote.id !== result.record.id), result.record];
  const updated = escalationItem(result.escalation, votes, result.quorumProgress);
  const { approvals, approvalsRequired, rejections, rejectionsRequired } = result.quorumProgress;
  return {
    item: updated,
    message:
      `Your vote (${verb}) was recorded. The escalation is now: ${statusLabel(result.escalation.status)}` +
      (isOpen(updated) ? `; ${approvals} of ${approvalsRequired} approvals and ${rejections} of ${rejectionsRequired} rejections so far.` : '.'),
  };
}

export function InboxPage({ session }: { session: SignedInSession }) {
  usePageTitle('Inbox');
  const [loaded, setLoaded] = useState<Loaded | null>(null);
  const [problem, setProblem] = useState<string | null>(null);
  const [outcomes, setOutcomes] = useState<ReadonlyMap<string, Outcome>>(new Map());
  const [announcement, setAnnouncement] = useState('');
  const sessionRef = useRef(session);
  sessionRef.current = session;
  const linked = linkedItem(useSearch());
  const focusedLink = useRef<string | null>(null);

  /** `now` abandons a running refresh, whose answer may predate a vote; the timer's waits for it. */
  const load = useLatestLoad(
    async (signal) => {
      const startedAt = Date.now();
      return { ...(await loadInbox(sessionRef.current, signal)), startedAt };
    },
    setLoaded,
    setProblem,
  );
  const refresh = (now = false): Promise<void> => load({ ifIdle: !now });

  useEffect(() => {
    void refresh();
    const tick = (): void => {
      if (document.visibilityState === 'visible') void refresh();
    };
    const timer = window.setInterval(tick, REFRESH_MS);
    document.addEventListener('visibilitychange', tick);
    return () => {
      window.clearInterval(timer);
      document.removeEventListener('visibilitychange', tick);
    };
  }, []);

  const onVote = async (item: InboxItem, decision: VoteDecision, note: string): Promise<string | null> => {
    try {
      const outcome = await castVote(item, decision, note);
      setOutcomes((previous) => new Map(previous).set(item.id, { ...outcome, at: Date.now() }));
      setAnnouncement(outcome.message);
      return null;
    } catch (error) {
      return messageOf(error);
    } finally {
      // Voted or refused (already decided, say): either way the list may have changed.
      void refresh(true);
    }
  };

  const nowMs = Date.now();
  const current = (item: InboxItem): InboxItem => {
    const outcome = outcomes.get(item.id);
    return outcome && loaded && outcome.at > loaded.startedAt ? outcome.item : item;
  };
  const waiting = (loaded?.items ?? []).map(current).filter(isOpen);
  const decided = [...outcomes.values()].filter((outcome) => !isOpen(outcome.item) || !waiting.some((item) => item.id === outcome.item.id)).reverse();
  const isLinked = (item: InboxItem): boolean => linked !== null && item.kind === linked.kind && item.id === linked.id;
  const linkedWaits = waiting.some(isLinked);

  // Once, when the linked item first appears: bring it into view with the focus on its title.
  useEffect(() => {
    if (linked === null || !linkedWaits || focusedLink.current === linked.id) return;
    focusedLink.current = linked.id;
    const title = document.getElementById(`item-${linked.id}-title`);
    title?.scrollIntoView({ block: 'start' });
    title?.focus();
  }, [linked?.id, linkedWaits]);

  return (
    <>
      <h1 id="page-title" tabIndex={-1}>
        Inbox
      </h1>
      <p>
        Approval requests and escalations of {session.organization.name} that wait for a decision.
        {loaded !== null && (
          <span class="muted" data-testid="updated-at">
            {' '}
            Updated {formatClock(loaded.startedAt)}; this list refreshes by itself.
          </span>
        )}
      </p>
      {problem !== null && (
        <div role="alert" class="alert" data-testid="inbox-error">
          <p>{loaded === null ? problem : `The inbox could not be refreshed: ${problem}`}</p>
          <button type="button" class="button secondary" onClick={() => void refresh(true)}>
            Try again
          </button>
        </div>
      )}
      {loaded !== null && linked !== null && !linkedWaits && !decided.some((outcome) => isLinked(outcome.item)) && (
        <p class="notice" data-testid="linked-missing">
          The {linked.kind === 'approval' ? 'approval request' : 'escalation'} {linked.id} that the link names does not wait for a decision: it was
          decided or expired, or it is not one you can see.
        </p>
      )}
      {loaded?.notices.map((notice) => (
        <p key={notice} class="notice">
          {notice}
        </p>
      ))}
      <section aria-labelledby="waiting-heading">
        <h2 id="waiting-heading">Waiting for a decision{loaded !== null && ` (${waiting.length})`}</h2>
        {loaded === null && problem === null && <p role="status">Loading…</p>}
        {loaded !== null && waiting.length === 0 && <p data-testid="inbox-empty">Nothing is waiting for a decision.</p>}
        {waiting.length > 0 && (
          <ul class="items">
            {waiting.map((item) => (
              <li key={`${item.kind}:${item.id}`}>
                <InboxItemCard item={item} session={session} nowMs={nowMs} outcome={outcomes.get(item.id)?.message ?? null} onVote={onVote} linked={isLinked(item)} />
              </li>
            ))}
          </ul>
        )}
      </section>
      {decided.length > 0 && (
        <section aria-labelledby="decided-heading">
          <h2 id="decided-heading">Your decisions on this visit</h2>
          <ul class="items">
            {decided.map((outcome) => (
              <li key={`${outcome.item.kind}:${outcome.item.id}`}>
                <InboxItemCard item={outcome.item} session={session} nowMs={nowMs} outcome={outcome.message} />
              </li>
            ))}
          </ul>
        </section>
      )}
      <p class="visually-hidden" aria-live="polite" data-testid="announcement">
        {announcement}
      </p>
    </>
  );
}
