/**
 * Human-in-the-loop escalations on the wire (self-hosted control plane only):
 * `POST /v1/escalations`, `GET /v1/escalations`, `GET /v1/escalations/:id` and
 * `POST /v1/escalations/:id/respond`. Field names are camelCase, as the API gives them.
 *
 * An escalation waits for votes of an approver tier (`quorumRequired` over `approverPoolSize`
 * approvers). A tier that times out hands the escalation to the next tier of `tiers` (status
 * `escalated`); the last one ends it as `timed_out`, where `fallbackDecision` applies.
 *
 * @example
 *   CreateEscalationRequest.parse({
 *     agentId: 'deploy-bot', escalationReason: 'production schema change',
 *     quorumConfig: { quorumRequired: 'two_thirds', approverPoolSize: 3 }, timeoutMs: 600_000,
 *   });
 *   const { escalation, quorumProgress } = EscalationDetailResponse.parse(await response.json());
 */
import { z } from 'zod';
import { BoundFacts } from './approvals.js';
import { isRecordable, RECORDABLE_MESSAGE } from './recordable-text.js';

export const QUORUM_TIERS = ['single_approver', 'simple_majority', 'two_thirds', 'unanimous'] as const;
export type QuorumTier = (typeof QUORUM_TIERS)[number];

export const VOTE_DECISIONS = ['approve', 'reject'] as const;
export type VoteDecision = (typeof VOTE_DECISIONS)[number];

/** What an escalation can be. `pending` and `escalated` are open; the others are final. */
export const ESCALATION_STATUSES = ['pending', 'escalated', 'approved', 'rejected', 'timed_out', 'auto_approved'] as const;
export type EscalationStatus = (typeof ESCALATION_STATUSES)[number];

/**
 * How a final escalation got there: `quorum` (a threshold was reached), `fallback` (every vote
 * was cast and neither threshold was), `timeout` (the last tier ran out), `auto_approve` (its risk
 * score was below the organization's threshold).
 */
export const ESCALATION_RESOLUTIONS = ['quorum', 'fallback', 'timeout', 'auto_approve'] as const;
export type EscalationResolution = (typeof ESCALATION_RESOLUTIONS)[number];

/** Thirty days, as for waits in policies: longer than any sane approval, short enough to catch a unit typo. */
export const MAX_ESCALATION_TIMEOUT_MS = 30 * 24 * 3600 * 1000;
/** The largest approver pool, as in policies. */
export const MAX_APPROVER_POOL = 1000;
/** Tiers after the first one. */
export const MAX_ESCALATION_CHAIN = 8;
/** Nesting of `proposedAction` and `metadata`: deep enough for any real payload, bounded for storage. */
const MAX_JSON_DEPTH = 32;

// NUL cannot be stored in Postgres text or jsonb, and a lone surrogate has no canonical JSON form
// for the audit chain: both are refused here (isRecordable) instead of failing (500) where they are written.
/** Why `value` cannot be recorded as it is, or null. Iterative, so no input can exhaust the stack. */
export function unrecordableProblem(value: unknown): string | null {
  const pending: Array<{ value: unknown; depth: number }> = [{ value, depth: 0 }];
  while (pending.length > 0) {
    const { value: item, depth } = pending.pop() as { value: unknown; depth: number };
    if (typeof item === 'string') {
      if (!isRecordable(item)) return `text ${RECORDABLE_MESSAGE.message}`;
    } else if (item !== null && typeof item === 'object') {
      if (depth >= MAX_JSON_DEPTH) return `nested deeper than ${MAX_JSON_DEPTH} levels`;
      for (const [key, child] of Object.entries(item)) {
        if (!isRecordable(key)) return `keys ${RECORDABLE_MESSAGE.message}`;
        pending.push({ value: child, depth: depth + 1 });
      }
    }
  }
  return null;
}

const Text = (max: number) =>
  z
    .string()
    .trim()
    .min(1)
    .max(max)
    .refine(isRecordable, RECORDABLE_MESSAGE);

const JsonObject = z.record(z.string(), z.unknown()).superRefine((value, ctx) => {
  const problem = unrecordableProblem(value);
  if (problem !== null) ctx.addIssue({ code: 'custom', message: problem });
});

const PoolSize = z.number().int().min(1).max(MAX_APPROVER_POOL);
const TimeoutMs = z
  .number()
  .int()
  .positive()
  .max(MAX_ESCALATION_TIMEOUT_MS, { message: `at most ${MAX_ESCALATION_TIMEOUT_MS} ms (30 days)` });

/** Pool size is what the thresholds are computed from, so only single_approver can do without it. */
function requirePoolSize(tier: { quorumRequired: QuorumTier; approverPoolSize?: number | undefined }, ctx: z.RefinementCtx, at: PropertyKey[]): void {
  if (tier.quorumRequired !== 'single_approver' && tier.approverPoolSize === undefined) {
    ctx.addIssue({
      code: 'custom',
      path: [...at, 'approverPoolSize'],
      message: `quorumRequired ${tier.quorumRequired} needs approverPoolSize (the number of eligible approvers)`,
    });
  }
}

export const QuorumConfig = z
  .object({
    quorumRequired: z.enum(QUORUM_TIERS).default('single_approver'),
    /** Advisory only: it does not change the quorum calculation. */
    minApprovers: PoolSize.optional(),
    approverPoolSize: PoolSize.optional(),
    fallbackDecision: z.enum(VOTE_DECISIONS).default('reject'),
  })
  .strict()
  .superRefine((config, ctx) => {
    requirePoolSize(config, ctx, []);
    if (config.minApprovers !== undefined && config.approverPoolSize !== undefined && config.minApprovers > config.approverPoolSize) {
      ctx.addIssue({ code: 'custom', path: ['minApprovers'], message: 'minApprovers cannot exceed approverPoolSize' });
    }
  });

/** A further approver tier: who is asked when the previous tier times out. */
export const EscalationChainTier = z
  .object({
    quorumRequired: z.enum(QUORUM_TIERS).default('single_approver'),
    approverPoolSize: PoolSize.optional(),
    /** How long this tier has; the organization's default when absent. */
    timeoutMs: TimeoutMs.optional(),
  })
  .strict()
  .superRefine((tier, ctx) => requirePoolSize(tier, ctx, []));

export const CreateEscalationRequest = z
  .object({
    agentId: Text(256),
    escalationReason: Text(2000),
    /** Free-form payload kept for audit. */
    proposedAction: JsonObject.optional(),
    riskScore: z.number().min(0).max(1).optional(),
    /** Absent: single_approver, fallback reject. */
    quorumConfig: QuorumConfig.optional(),
    /** Time the first tier has; the organization's default when absent. */
    timeoutMs: TimeoutMs.optional(),
    /** Tiers after the first, in order. */
    escalationChain: z.array(EscalationChainTier).min(1).max(MAX_ESCALATION_CHAIN).optional(),
    /** Forwarded into every audit event of the escalation. */
    metadata: JsonObject.optional(),
  })
  .strict();
export type CreateEscalationRequest = z.infer<typeof CreateEscalationRequest>;

export const EscalationTierWire = z.object({
  quorumRequired: z.enum(QUORUM_TIERS),
  approverPoolSize: z.number().int(),
  timeoutMs: z.number().int(),
});

export const EscalationWire = z.object({
  id: z.string(),
  status: z.enum(ESCALATION_STATUSES),
  orgId: z.string(),
  agentId: z.string(),
  escalationReason: z.string(),
  /** Of the current tier. */
  quorumRequired: z.enum(QUORUM_TIERS),
  /** Of the current tier (1 for a single_approver tier given none). */
  approverPoolSize: z.number().int(),
  fallbackDecision: z.enum(VOTE_DECISIONS),
  /** When the current tier times out. */
  timeoutAt: z.string(),
  createdAt: z.string(),
  proposedAction: z.record(z.string(), z.unknown()).nullable(),
  riskScore: z.number().nullable(),
  minApprovers: z.number().int().nullable(),
  metadata: z.record(z.string(), z.unknown()),
  /** Index in `tiers` of the tier being asked (0: the first). */
  tier: z.number().int(),
  tiers: z.array(EscalationTierWire),
  resolution: z.enum(ESCALATION_RESOLUTIONS).nullable(),
  /** On a final escalation, what it amounts to (for timed_out: the fallback decision); null while open. */
  outcome: z.enum(VOTE_DECISIONS).nullable(),
  resolvedAt: z.string().nullable(),
  /** The credential that created it (it may not vote). */
  createdBy: z.string(),
  /** The binding hash of the action, for escalations opened by evaluate; null otherwise. */
  bindingHash: z.string().nullable(),
  /** The action's bound facts, for escalations opened by evaluate; null for those created through the API. */
  boundFacts: BoundFacts.nullable(),
  updatedAt: z.string(),
});
export type EscalationWire = z.infer<typeof EscalationWire>;

export const ApprovalRecordWire = z.object({
  id: z.string(),
  escalationId: z.string(),
  /** The voter's credential: `user:<id>` or `api_key:<id>`. */
  userId: z.string(),
  decision: z.enum(VOTE_DECISIONS),
  note: z.string().nullable(),
  /** The tier the vote was cast in. */
  tier: z.number().int(),
  createdAt: z.string(),
});
export type ApprovalRecordWire = z.infer<typeof ApprovalRecordWire>;

/** The current tier's count. Once the escalation is final, `votesRemaining` is 0. */
export const QuorumProgressWire = z.object({
  tier: z.number().int(),
  quorumRequired: z.enum(QUORUM_TIERS),
  approverPoolSize: z.number().int(),
  approvals: z.number().int(),
  rejections: z.number().int(),
  approvalsRequired: z.number().int(),
  rejectionsRequired: z.number().int(),
  votesCast: z.number().int(),
  votesRemaining: z.number().int(),
});
export type QuorumProgressWire = z.infer<typeof QuorumProgressWire>;

export const EscalationIdParams = z.object({ id: z.string().max(200) });

export const DEFAULT_ESCALATION_PAGE = 100;
export const MAX_ESCALATION_PAGE = 500;

export const ListEscalationsQuery = z
  .object({
    status: z.enum(ESCALATION_STATUSES).optional(),
    limit: z.coerce.number().int().min(1).max(MAX_ESCALATION_PAGE).default(DEFAULT_ESCALATION_PAGE),
    /** The `X-Next-Cursor` of the previous page. */
    cursor: z.string().max(200).optional(),
  });

/** Newest first; `X-Next-Cursor` names the next page when there is one. */
export const ListEscalationsResponse = z.array(EscalationWire);

export const EscalationDetailResponse = z.object({
  escalation: EscalationWire,
  approvalRecords: z.array(ApprovalRecordWire),
  quorumProgress: QuorumProgressWire,
});

export const RespondRequest = z
  .object({
    decision: z.enum(VOTE_DECISIONS),
    /** Stored in the approval record; an empty note is no note. */
    note: z
      .string()
      .trim()
      .max(2000)
      .refine(isRecordable, RECORDABLE_MESSAGE)
      .optional(),
  })
  .strict();
export type RespondRequest = z.infer<typeof RespondRequest>;

export const RespondResponse = z.object({
  escalation: EscalationWire,
  record: ApprovalRecordWire,
  quorumProgress: QuorumProgressWire,
});
