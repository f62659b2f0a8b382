/**
 * Escalations, approval records and quorum progress in their wire form
 * (shared/wire/escalations.ts): ISO timestamps with milliseconds, the current tier's quorum
 * spelled out at the top level as the API lists it.
 *
 * @example
 *   reply.send({ escalation: escalationToWire(escalation), approvalRecords: records.map(approvalRecordToWire),
 *                quorumProgress: quorumProgressToWire(escalation, tally) });
 */
import type { ApprovalRecordWire, EscalationWire, QuorumProgressWire } from '../../shared/wire/escalations.js';
import { isoOrNull } from '../time.js';
import { currentTier, isOpen, type ApprovalRecord, type Escalation } from './lifecycle.js';
import { quorumProgress, type Tally } from './quorum.js';

export function escalationToWire(escalation: Escalation): EscalationWire {
  const tier = currentTier(escalation);
  return {
    id: escalation.id,
    status: escalation.status,
    orgId: escalation.orgId,
    agentId: escalation.agentId,
    escalationReason: escalation.escalationReason,
    quorumRequired: tier.quorumRequired,
    approverPoolSize: tier.approverPoolSize,
    fallbackDecision: escalation.fallbackDecision,
    timeoutAt: escalation.timeoutAt.toISOString(),
    createdAt: escalation.createdAt.toISOString(),
    proposedAction: escalation.proposedAction,
    riskScore: escalation.riskScore,
    minApprovers: escalation.minApprovers,
    metadata: escalation.metadata,
    tier: escalation.tier,
    tiers: escalation.tiers.map((entry) => ({ quorumRequired: entry.quorumRequired, approverPoolSize: entry.approverPoolSize, timeoutMs: entry.timeoutMs })),
    resolution: escalation.resolution,
    outcome: escalation.outcome,
    resolvedAt: isoOrNull(escalation.resolvedAt),
    createdBy: escalation.createdBy,
    bindingHash: escalation.bindingHash,
    boundFacts: escalation.boundFacts,
    updatedAt: escalation.updatedAt.toISOString(),
  };
}

export function approvalRecordToWire(record: ApprovalRecord): ApprovalRecordWire {
  return {
    id: record.id,
    escalationId: record.escalationId,
    userId: record.userId,
    decision: record.decision,
    note: record.note,
    tier: record.tier,
    createdAt: record.createdAt.toISOString(),
  };
}

/** The current tier's progress; `tally` counts that tier's votes only. */
export function quorumProgressToWire(escalation: Escalation, tally: Tally): QuorumProgressWire {
  const tier = currentTier(escalation);
  return {
    tier: escalation.tier,
    quorumRequired: tier.quorumRequired,
    approverPoolSize: tier.approverPoolSize,
    ...quorumProgress(tier.quorumRequired, tier.approverPoolSize, tally, isOpen(escalation)),
  };
}

/** The tally of `tier` from the records already read. */
export function tallyOf(records: readonly ApprovalRecord[], tier: number): Tally {
  const tally: Tally = { approvals: 0, rejections: 0 };
  for (const record of records) {
    if (record.tier !== tier) continue;
    if (record.decision === 'approve') tally.approvals += 1;
    else tally.rejections += 1;
  }
  return tally;
}
