/**
 * The audit events of an escalation's life, built from its state before and after a change:
 *
 *   escalation.created         on creation (actor: the requesting agent)
 *   escalation.vote_recorded   each vote (actor and decision: the voter's)
 *   escalation.resolved        approved or rejected by votes (`resolution` quorum or fallback),
 *                              or auto_approved at creation; decision: the outcome
 *   escalation.timed_out       each tier that ran out: `status` escalated (with the next tier)
 *                              or timed_out (with the fallback outcome); occurred at the timeout
 *
 * Every event carries the escalation's `metadata` in its details, so a consumer filtering on it
 * (a ticket id, say) sees the whole story.
 *
 * @example
 *   await appendAuditEvents(tx, [...timeoutEvents(after, steps, context), ...voteEvents(after, record, tally, context)], now);
 */
import type { NewAuditEvent } from '../audit/types.js';
import { currentTier, type ApprovalRecord, type Escalation, type TimeoutStep } from './lifecycle.js';
import type { Tally } from './quorum.js';

/** Who caused a change and when it was recorded. */
export interface ChangeContext {
  /** `api_key:<id>`, `user:<id>`, or `system` for the sweeper. */
  credential: string;
  requestId: string | null;
  now: Date;
}

type EventBase = Pick<NewAuditEvent, 'orgId' | 'resourceType' | 'resourceId' | 'requestId' | 'credential' | 'occurredAt'>;

function base(escalation: Escalation, context: ChangeContext, occurredAt = context.now): EventBase {
  return {
    orgId: escalation.orgId,
    resourceType: 'escalation',
    resourceId: escalation.id,
    requestId: context.requestId,
    credential: context.credential,
    occurredAt,
  };
}

const tiersDetail = (escalation: Escalation) =>
  escalation.tiers.map((tier) => ({ quorum_required: tier.quorumRequired, approver_pool_size: tier.approverPoolSize, timeout_ms: tier.timeoutMs }));

export function createdEvents(escalation: Escalation, context: ChangeContext, autoApproveBelow: number | null): NewAuditEvent[] {
  const tier = currentTier(escalation);
  const created: NewAuditEvent = {
    ...base(escalation, context),
    type: 'escalation.created',
    actorId: escalation.agentId,
    decision: null,
    details: {
      status: escalation.status,
      agent_id: escalation.agentId,
      escalation_reason: escalation.escalationReason,
      proposed_action: escalation.proposedAction,
      risk_score: escalation.riskScore,
      quorum_required: tier.quorumRequired,
      approver_pool_size: tier.approverPoolSize,
      min_approvers: escalation.minApprovers,
      fallback_decision: escalation.fallbackDecision,
      tiers: tiersDetail(escalation),
      timeout_at: escalation.timeoutAt.toISOString(),
      binding_hash: escalation.bindingHash,
      metadata: escalation.metadata,
    },
  };
  if (escalation.status !== 'auto_approved') return [created];
  return [
    created,
    {
      ...base(escalation, context),
      type: 'escalation.resolved',
      actorId: escalation.agentId,
      decision: 'approve',
      details: {
        status: escalation.status,
        resolution: 'auto_approve',
        outcome: 'approve',
        risk_score: escalation.riskScore,
        auto_approve_below: autoApproveBelow,
        metadata: escalation.metadata,
      },
    },
  ];
}

/** `after` is the escalation once the vote was counted; `tally` the current tier's, including the vote. */
export function voteEvents(after: Escalation, record: ApprovalRecord, tally: Tally, context: ChangeContext): NewAuditEvent[] {
  const recorded: NewAuditEvent = {
    ...base(after, context),
    type: 'escalation.vote_recorded',
    actorId: record.userId,
    decision: record.decision,
    details: {
      vote_id: record.id,
      tier: record.tier,
      note: record.note,
      approvals: tally.approvals,
      rejections: tally.rejections,
      status: after.status,
      metadata: after.metadata,
    },
  };
  if (after.resolution === null) return [recorded];
  return [
    recorded,
    {
      ...base(after, context),
      type: 'escalation.resolved',
      actorId: record.userId,
      decision: after.outcome,
      details: {
        status: after.status,
        resolution: after.resolution,
        outcome: after.outcome,
        tier: after.tier,
        approvals: tally.approvals,
        rejections: tally.rejections,
        metadata: after.metadata,
      },
    },
  ];
}

/** One `escalation.timed_out` per step, dated when the tier ran out. */
export function timeoutEvents(after: Escalation, steps: readonly TimeoutStep[], context: ChangeContext): NewAuditEvent[] {
  return steps.map((step) => {
    const exhausted = step.toTier === null;
    const following = step.toTier === null ? undefined : after.tiers[step.toTier];
    return {
      ...base(after, context, step.at),
      type: 'escalation.timed_out',
      actorId: null,
      decision: exhausted ? after.fallbackDecision : null,
      details: {
        tier: step.fromTier,
        timed_out_at: step.at.toISOString(),
        status: exhausted ? 'timed_out' : 'escalated',
        next_tier: step.toTier,
        next_timeout_at: following ? new Date(step.at.getTime() + following.timeoutMs).toISOString() : null,
        resolution: exhausted ? 'timeout' : null,
        outcome: exhausted ? after.fallbackDecision : null,
        metadata: after.metadata,
      },
    };
  });
}
