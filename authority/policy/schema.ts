/**
 * The policy document: what a human writes (YAML or JSON), validated with zod. Strict: an
 * unknown key is an error, because a misspelt key (`lifetime_second`) silently ignored would
 * change what the policy means. Fields left out here are resolved in compile.ts, in this order:
 * the class's own value, then the document's `defaults`, then BUILTIN_DEFAULTS.
 *
 * @example
 *   version: 1
 *   name: acme
 *   actor_groups:
 *     finance: [finance-bot]
 *   action_classes:
 *     - id: payments.wire
 *       match: { action_type: payments.wire }
 *       actor_groups: [finance]
 *       bind: [account_code]
 *       risk:
 *         base: 0.2
 *         factors:
 *           - name: large_amount
 *             when: 'has(context.amount_usd) && context.amount_usd > 10000'
 *             weight: 0.3
 *             description: Over 10,000 USD
 *       rules:
 *         - id: small
 *           when: 'has(context.amount_usd) && context.amount_usd <= 10000'
 *           decision: allow
 *           reason: AMOUNT_WITHIN_LIMIT
 *       default: deny
 */
import { z } from 'zod';

export const DECISIONS = ['allow', 'deny', 'hold', 'escalate'] as const;
export const QUORUMS = ['single_approver', 'simple_majority', 'two_thirds', 'unanimous'] as const;
export const MODES = ['live', 'shadow'] as const;

/** Engine-owned reason codes; a rule may not reuse them, so a code always means one thing. */
export const RESERVED_REASONS = [
  'NO_MATCHING_CLASS',
  'ACTOR_NOT_AUTHORIZED',
  'CONDITION_ERROR',
  'CONDITION_BUDGET_EXCEEDED',
  'DEFAULT_ALLOW',
  'DEFAULT_DENY',
  'DEFAULT_HOLD',
  'DEFAULT_ESCALATE',
] as const;

/** What applies when neither the class nor the document's `defaults` says: fail closed. */
export const BUILTIN_DEFAULTS = {
  mode: 'live',
  decision: 'deny',
  permit: { required: true, lifetime_seconds: 60 },
  escalation: { quorum: 'single_approver', timeout_seconds: 3600, fallback: 'reject' },
  hold: { timeout_seconds: 3600 },
} as const;

export const MAX_PERMIT_LIFETIME_SECONDS = 300;
/** Thirty days: longer than any sane approval wait, short enough to catch a typo of units. */
const MAX_WAIT_SECONDS = 30 * 24 * 3600;

const UPPER_SNAKE = /^[A-Z][A-Z0-9]*(_[A-Z0-9]+)*$/;
const IDENT = /^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$/;
const ACTION_PATTERN = /^[a-z0-9_-]+(\.[a-z0-9_-]+)*(\.\*)?$/;
const CONTEXT_KEY = /^[A-Za-z_][A-Za-z0-9_]{0,63}$/;

const identifier = (what: string) =>
  z.string().regex(IDENT, { message: `${what} must be 1–128 letters, digits, '_', '.', ':' or '-', starting with a letter or digit` });

const code = (what: string) =>
  z.string().regex(UPPER_SNAKE, { message: `${what} must be a stable UPPER_SNAKE code such as AMOUNT_OVER_LIMIT` });

/** A CEL expression; compiled (and its errors located) in compile.ts. */
const celExpression = z.string().refine((text) => text.trim() !== '', { message: 'a condition must not be empty' });

const decision = z.enum(DECISIONS);

const uniqueStrings = (items: readonly string[], ctx: z.RefinementCtx, what: string) => {
  const seen = new Set<string>();
  items.forEach((item, index) => {
    if (seen.has(item)) ctx.addIssue({ code: 'custom', path: [index], message: `duplicate ${what} "${item}"` });
    seen.add(item);
  });
};

const uniqueIds = <T>(
  items: readonly T[],
  idOf: (item: T) => string,
  field: string,
  ctx: z.RefinementCtx,
  what: string,
  at: PropertyKey[] = [],
) => {
  const seen = new Set<string>();
  items.forEach((item, index) => {
    const id = idOf(item);
    if (seen.has(id)) ctx.addIssue({ code: 'custom', path: [...at, index, field], message: `duplicate ${what} "${id}"` });
    seen.add(id);
  });
};

export const EscalationSchema = z
  .strictObject({
    quorum: z.enum(QUORUMS).default(BUILTIN_DEFAULTS.escalation.quorum),
    /** N, the number of eligible approvers; the quorum thresholds are computed from it. */
    approver_pool_size: z.number().int().min(1).max(1000).optional(),
    /** Advisory: it does not change the quorum calculation, which N alone sets. */
    min_approvers: z.number().int().min(1).max(1000).optional(),
    timeout_seconds: z.number().int().min(1).max(MAX_WAIT_SECONDS).default(BUILTIN_DEFAULTS.escalation.timeout_seconds),
    /** Applied on timeout, on chain exhaustion, or when all votes are cast without a threshold. */
    fallback: z.enum(['approve', 'reject']).default(BUILTIN_DEFAULTS.escalation.fallback),
  })
  .superRefine((escalation, ctx) => {
    if (escalation.quorum !== 'single_approver' && escalation.approver_pool_size === undefined) {
      ctx.addIssue({
        code: 'custom',
        path: ['approver_pool_size'],
        message: `quorum ${escalation.quorum} needs approver_pool_size (the number of eligible approvers)`,
      });
    }
    if (
      escalation.min_approvers !== undefined &&
      escalation.approver_pool_size !== undefined &&
      escalation.min_approvers > escalation.approver_pool_size
    ) {
      ctx.addIssue({ code: 'custom', path: ['min_approvers'], message: 'min_approvers cannot exceed approver_pool_size' });
    }
  });

export const HoldSchema = z.strictObject({
  timeout_seconds: z.number().int().min(1).max(MAX_WAIT_SECONDS).default(BUILTIN_DEFAULTS.hold.timeout_seconds),
});

const PermitSchema = z.strictObject({
  required: z.boolean().optional(),
  lifetime_seconds: z
    .number()
    .int()
    .min(1)
    .max(MAX_PERMIT_LIFETIME_SECONDS, { message: `lifetime_seconds must be at most ${MAX_PERMIT_LIFETIME_SECONDS} (permits are short-lived)` })
    .optional(),
});

const RemediationSchema = z.strictObject({
  code: code('remediation code'),
  message: z.string().trim().min(1),
});

export const RuleSchema = z.strictObject({
  id: identifier('rule id'),
  description: z.string().optional(),
  /** Absent: the rule always matches (a catch-all, usually last). */
  when: celExpression.optional(),
  decision,
  reason: code('reason').refine((reason) => !(RESERVED_REASONS as readonly string[]).includes(reason), {
    message: `reason must not be one of the engine's own codes (${RESERVED_REASONS.join(', ')})`,
  }),
  remediation: RemediationSchema.optional(),
});

const RiskFactorSchema = z.strictObject({
  name: identifier('risk factor name'),
  when: celExpression,
  /** Negative weights are allowed: a mitigating fact lowers the score (the sum is clamped). */
  weight: z.number().min(-1).max(1),
  description: z.string().trim().min(1),
});

const RiskSchema = z.strictObject({
  base: z.number().min(0).max(1).default(0),
  factors: z
    .array(RiskFactorSchema)
    .default([])
    .superRefine((factors, ctx) => uniqueIds(factors, (f) => f.name, 'name', ctx, 'risk factor name')),
});

const MatchSchema = z.strictObject({
  action_type: z.string().regex(ACTION_PATTERN, {
    message: 'action_type must be a dotted lowercase action type (deploy.production) or a prefix pattern ending in .* (deploy.*)',
  }),
  /** Narrows the match; when false the next matching class is tried. Cannot read `risk`. */
  when: celExpression.optional(),
});

const actorId = z.string().min(1).max(256);

export const ActionClassSchema = z
  .strictObject({
    id: identifier('class id'),
    description: z.string().optional(),
    match: MatchSchema,
    /** Actor ids allowed to request this class; "*" means any authenticated actor. */
    actors: z
      .array(actorId)
      .default([])
      .superRefine((actors, ctx) => uniqueStrings(actors, ctx, 'actor')),
    actor_groups: z
      .array(z.string().min(1))
      .default([])
      .superRefine((groups, ctx) => uniqueStrings(groups, ctx, 'actor group')),
    mode: z.enum(MODES).optional(),
    permit: PermitSchema.optional(),
    /** Top-level context keys bound into the permit besides the standard facts. */
    bind: z
      .array(z.string().regex(CONTEXT_KEY, { message: 'bind entries are top-level context keys such as account_code' }))
      .default([])
      .superRefine((keys, ctx) => uniqueStrings(keys, ctx, 'bind key')),
    risk: RiskSchema.optional(),
    rules: z
      .array(RuleSchema)
      .default([])
      .superRefine((rules, ctx) => uniqueIds(rules, (r) => r.id, 'id', ctx, 'rule id')),
    /** The decision when no rule matches. */
    default: decision.optional(),
    escalation: EscalationSchema.optional(),
    hold: HoldSchema.optional(),
  })
  .superRefine((cls, ctx) => {
    if (cls.actors.length === 0 && cls.actor_groups.length === 0) {
      ctx.addIssue({
        code: 'custom',
        path: ['actors'],
        message: 'say who may request this class: actors and/or actor_groups (actors: ["*"] for any actor)',
      });
    }
  });

const DefaultsSchema = z.strictObject({
  mode: z.enum(MODES).optional(),
  /** A class's decision when none of its rules matches. */
  decision: decision.optional(),
  permit: PermitSchema.optional(),
  escalation: EscalationSchema.optional(),
  hold: HoldSchema.optional(),
});

export const PolicyDocumentSchema = z
  .strictObject({
    /** The document format version (not the stored revision, which the policy store counts). */
    version: z.literal(1, { message: 'version must be 1 (the policy format version)' }),
    name: z.string().min(1).max(200).optional(),
    description: z.string().optional(),
    defaults: DefaultsSchema.optional(),
    actor_groups: z
      .record(
        z.string().regex(IDENT, { message: 'group names are letters, digits, "_", ".", ":" or "-"' }),
        z.array(actorId).superRefine((ids, ctx) => uniqueStrings(ids, ctx, 'actor')),
      )
      .default({}),
    action_classes: z.array(ActionClassSchema),
  })
  .superRefine((doc, ctx) => {
    uniqueIds(doc.action_classes, (c) => c.id, 'id', ctx, 'class id', ['action_classes']);
    const seenPatterns = new Map<string, string>();
    doc.action_classes.forEach((cls, index) => {
      cls.actor_groups.forEach((group, g) => {
        if (!Object.hasOwn(doc.actor_groups, group)) {
          ctx.addIssue({ code: 'custom', path: ['action_classes', index, 'actor_groups', g], message: `unknown actor group "${group}" (define it under actor_groups)` });
        }
      });
      // A class without `when` takes every request of its pattern: a later class with the same
      // pattern could never be reached, which is always a mistake worth reporting.
      const shadowedBy = seenPatterns.get(cls.match.action_type);
      if (shadowedBy !== undefined) {
        ctx.addIssue({
          code: 'custom',
          path: ['action_classes', index, 'match', 'action_type'],
          message: `unreachable: class "${shadowedBy}" already matches every "${cls.match.action_type}" request (give it a match.when, or merge the classes)`,
        });
      } else if (cls.match.when === undefined) {
        seenPatterns.set(cls.match.action_type, cls.id);
      }
    });
  });

export type PolicyDocument = z.output<typeof PolicyDocumentSchema>;
export type ActionClassDocument = z.output<typeof ActionClassSchema>;
export type RuleDocument = z.output<typeof RuleSchema>;
export type EscalationDocument = z.output<typeof EscalationSchema>;
