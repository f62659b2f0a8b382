/**
 * One approval request or escalation: the exact action, its risk and the policy's reasons, who
 * asked and when, the time left, and for escalations the quorum and the votes. Then either the
 * vote form or why this person cannot vote, and, after a vote, what came of it.
 */
import type { SignedInSession, VoteDecision } from '../api';
import { voteBlockedReason } from '../eligibility';
import { formatDateTime, formatRisk, statusLabel, timeLeft } from '../format';
import type { Fact, InboxItem } from '../inbox-data';
import { Identity } from './identity';
import { QuorumProgress, VoteList } from './quorum';
import { VoteForm } from './vote-form';
import { Row } from './parts';

interface Props {
  item: InboxItem;
  session: SignedInSession;
  nowMs: number;
  /** What the person's own vote came to, once they voted here. */
  outcome: string | null;
  /** Absent for items already decided: they take no more votes. */
  onVote?: (item: InboxItem, decision: VoteDecision, note: string) => Promise<string | null>;
  /** The item the page's link names: marked, and its title can take the focus. */
  linked?: boolean;
}

const isOpen = (status: string): boolean => status === 'pending' || status === 'escalated';

function FactRows({ facts }: { facts: Fact[] }) {
  return (
    <>
      {facts.map((fact) => (
        <Row key={fact.name} label={fact.label}>
          <span data-fact={fact.name}>{fact.value}</span>
        </Row>
      ))}
    </>
  );
}

export function InboxItemCard({ item, session, nowMs, outcome, onVote, linked = false }: Props) {
  const titleId = `item-${item.id}-title`;
  const kindLabel = item.kind === 'approval' ? 'Approval request' : 'Escalation';
  const open = isOpen(item.status);
  const blocked = open ? voteBlockedReason(item, session) : null;
  const facts = item.facts;
  return (
    <article
      class={linked ? 'item linked' : 'item'}
      aria-labelledby={titleId}
      aria-current={linked ? 'true' : undefined}
      data-testid="inbox-item"
      data-id={item.id}
      data-kind={item.kind}
      data-status={item.status}
    >
      <h3 id={titleId} tabIndex={linked ? -1 : undefined}>
        <span class="kind">{kindLabel}:</span> {item.actionType ?? 'no action type given'}
      </h3>
      <p class="status-line">
        <span class={`badge badge-${item.status}`} data-testid="item-status">
          {statusLabel(item.status)}
        </span>{' '}
        {open && <span data-testid="time-left">{timeLeft(item.deadline, nowMs)}</span>}
      </p>
      <dl class="facts">
        <Row label="Action type">{item.actionType ?? 'not given'}</Row>
        <Row label="Actor">{item.actor}</Row>
        {facts.kind === 'bound' && <FactRows facts={facts.facts} />}
        <Row label="Risk score">{formatRisk(item.riskScore)}</Row>
        <Row label="Reasons">
          {item.reasonCodes.length > 0 ? (
            <ul class="codes">
              {item.reasonCodes.map((code) => (
                <li key={code}>
                  <code>{code}</code>
                </li>
              ))}
            </ul>
          ) : item.kind === 'escalation' ? (
            item.escalation.escalationReason
          ) : (
            'none given'
          )}
        </Row>
        <Row label="Requested by">
          <Identity identity={item.requestedBy} session={session} />
        </Row>
        <Row label="Requested at">
          <time dateTime={item.requestedAt}>{formatDateTime(item.requestedAt)}</time>
        </Row>
        <Row label={item.kind === 'escalation' ? 'Current tier ends' : 'Expires'}>
          <time dateTime={item.deadline}>{formatDateTime(item.deadline)}</time>
        </Row>
      </dl>
      {facts.kind === 'unavailable' && <p class="muted">{facts.why}</p>}
      {facts.kind === 'proposed' && (
        <>
          <p class="muted">Proposed action, as its creator described it (not bound to any permit):</p>
          <dl class="facts">
            <FactRows facts={facts.facts} />
          </dl>
        </>
      )}
      {item.kind === 'escalation' && (
        <>
          <h4>Quorum</h4>
          <QuorumProgress progress={item.progress} tiers={item.escalation.tiers.length} />
          <h4>Votes</h4>
          <VoteList item={item} session={session} />
        </>
      )}
      {outcome !== null && (
        <p class="outcome" data-testid="vote-outcome">
          {outcome}
        </p>
      )}
      {open && onVote && blocked !== null && (
        <p class="blocked" data-testid="vote-blocked-reason">
          {blocked}
        </p>
      )}
      {open && onVote && blocked === null && <VoteForm itemId={item.id} onVote={(decision, note) => onVote(item, decision, note)} />}
    </article>
  );
}
