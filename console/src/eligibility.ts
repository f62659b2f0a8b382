/**
 * Whether the signed-in person may vote on an item, judged in the browser only to explain
 * beforehand what the server would refuse: the server decides (it compares identities, the
 * owners of API keys included, which the console cannot see), and its refusal is shown if it
 * says no anyway. The rules mirror authority/approvals/approval-requests.ts (resolve) and
 * authority/escalations/escalations.ts (`isRequester`, one vote per identity).
 */
import type { SignedInSession } from './api';
import type { InboxItem } from './inbox-data';

/** The permission each kind of vote needs (the approvals and escalations routes). */
export function votePermission(item: InboxItem): 'approvals:write' | 'hitl:approve' {
  return item.kind === 'approval' ? 'approvals:write' : 'hitl:approve';
}

/** `identity` without its `user:` / `api_key:` prefix, as records sometimes name people. */
function bareId(identity: string): string {
  const colon = identity.indexOf(':');
  return colon === -1 ? identity : identity.slice(colon + 1);
}

function isActor(item: InboxItem, identity: string): boolean {
  return item.actor === identity || `user:${item.actor}` === identity || (item.kind === 'escalation' && item.actor === bareId(identity));
}

/** Why this person cannot vote on `item`, or null when the console sees no reason. */
export function voteBlockedReason(item: InboxItem, session: SignedInSession): string | null {
  const { identity } = session;
  if (item.requestedBy === identity) return 'You asked for this action, so someone else must approve it.';
  if (isActor(item, identity)) return 'This action would be carried out as you (you are its actor), so someone else must approve it.';
  if (item.kind === 'escalation') {
    const mine = item.votes.find((vote) => vote.userId === identity);
    if (mine) return `You have already voted (${mine.decision}).`;
  }
  const needed = votePermission(item);
  if (!session.permissions.includes(needed)) {
    return session.role !== null
      ? `Your role (${session.role}) cannot approve or reject this: it needs the ${needed} permission.`
      : `This API key cannot approve or reject this: its scopes do not include ${needed}.`;
  }
  return null;
}
