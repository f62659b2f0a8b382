/**
 * `POST /v1/evaluate` (also `/v1-evaluate`, `/functions/v1/v1-evaluate`) on the wire.
 *
 * Three request forms are accepted. The wire form:
 *   { "action_type": "payments.wire", "actor_id": "finance-bot",
 *     "context": { "environment": "production", "amount_usd": 500, "account_code": "OPS-001" } }
 * the agent helper form, mapped to it (see `fromAgentForm`):
 *   { "actor": {"id": "support-agent", "type": "agent"}, "action": {"type": "agent.tool.invoke"},
 *     "target": {"type": "tool", "id": "send_email", "environment": "production"}, "context": {…} }
 * and the SDK's legacy names, `action` and `agent` as strings (`fromLegacyForm`):
 *   { "action": "payments.wire", "agent": "finance-bot", "context": {…} }
 */
import { z } from 'zod';

export const ActionType = z
  .string()
  .min(1)
  .max(256)
  .regex(/^[a-z0-9_-]+(\.[a-z0-9_*-]+)*$/, { message: 'dotted lowercase, such as deploy.production or agent.tool.invoke' });

export const RequestId = z
  .string()
  .min(1)
  .max(128)
  .regex(/^[A-Za-z0-9._:-]+$/, { message: 'letters, digits and . _ : - only' });

export const Target = z
  .object({
    type: z.string().min(1).max(256),
    id: z.string().max(1024),
  })
  .strict();

export const EvaluateContext = z
  .object({
    environment: z.string().min(1).max(128).optional(),
    target: Target.optional(),
    amount_usd: z.number().finite().nonnegative().optional(),
    account_code: z.string().min(1).max(128).optional(),
    approvals: z.array(z.string().min(1).max(128)).max(16).optional(),
  })
  .catchall(z.unknown());
export type EvaluateContext = z.infer<typeof EvaluateContext>;

const Options = {
  /** Idempotency key: a repeat returns the original decision (and permit). */
  request_id: RequestId.optional(),
  /** Decide without issuing a permit: `mode: "shadow"`. */
  shadow: z.boolean().optional(),
  /** Include the rule trace in `decisionObject.explanation`. */
  explain: z.boolean().optional(),
  /** Reuse the approval opened for exactly this action by the same requester (authority/approvals/reuse.ts). */
  reuse_approvals: z
    .boolean()
    .optional()
    .describe(
      'For callers that cannot name an approval id (an unmodified MCP client behind the gate): a `hold` or `escalate` names the pending approval request or escalation already opened for exactly this action (every bound fact) by the same requesting identity instead of opening another, and one approved, unexpired and unused is applied as if given in `context.approvals`. A rejected or expired one is not reused: a new one opens, and `decisionObject.approvals` says why.',
    ),
};

export const EvaluateWireRequest = z.object({
  action_type: ActionType,
  actor_id: z.string().min(1).max(256),
  context: EvaluateContext.default({}),
  ...Options,
});
export type EvaluateWireRequest = z.infer<typeof EvaluateWireRequest>;

export const EvaluateAgentRequest = z.object({
  actor: z.object({ id: z.string().min(1).max(256), type: z.string().min(1).max(64).optional() }),
  action: z.object({ type: ActionType, id: z.string().min(1).max(256).optional() }),
  target: z
    .object({ type: z.string().min(1).max(256), id: z.string().max(1024), environment: z.string().min(1).max(128).optional() })
    .strict()
    .optional(),
  context: z.record(z.string(), z.unknown()).optional(),
  ...Options,
});
export type EvaluateAgentRequest = z.infer<typeof EvaluateAgentRequest>;

/**
 * The agent form in wire terms: action.type → action_type, actor.id → actor_id, target →
 * context.target (its environment → context.environment), actor.type → context.actor_type,
 * action.id → context.action_id.
 */
export function fromAgentForm(agent: EvaluateAgentRequest): z.input<typeof EvaluateWireRequest> {
  const context: Record<string, unknown> = { ...(agent.context ?? {}) };
  if (agent.target) {
    context.target = { type: agent.target.type, id: agent.target.id };
    if (agent.target.environment !== undefined) context.environment = agent.target.environment;
  }
  if (agent.actor.type !== undefined) context.actor_type = agent.actor.type;
  if (agent.action.id !== undefined) context.action_id = agent.action.id;
  const { request_id, shadow, explain, reuse_approvals } = agent;
  return { action_type: agent.action.type, actor_id: agent.actor.id, context, request_id, shadow, explain, reuse_approvals };
}

/**
 * The @atlasent/sdk's legacy names (its 1.x evaluate, its streaming protect, its 2.2 preflight):
 * `action` → `action_type`, `agent` → `actor_id`. Anything else it sends (its API key, which the
 * Authorization header already carries) is dropped unread.
 */
export const EvaluateLegacyRequest = z.object({
  action: ActionType,
  agent: z.string().min(1).max(256),
  context: EvaluateContext.default({}),
  ...Options,
});
export type EvaluateLegacyRequest = z.infer<typeof EvaluateLegacyRequest>;

function fromLegacyForm(legacy: EvaluateLegacyRequest): z.input<typeof EvaluateWireRequest> {
  const { action, agent, context, request_id, shadow, explain, reuse_approvals } = legacy;
  return { action_type: action, actor_id: agent, context, request_id, shadow, explain, reuse_approvals };
}

/**
 * Any form, as the wire form. Without `action_type`, `action` and `actor` mark the agent form and
 * a string `action` with `agent` the legacy names; errors then name that form's fields.
 */
export function parseEvaluateRequest(body: unknown): { success: true; data: EvaluateWireRequest } | { success: false; error: z.ZodError } {
  if (typeof body !== 'object' || body === null || 'action_type' in body) return EvaluateWireRequest.safeParse(body);
  if ('action' in body && 'actor' in body) {
    const agent = EvaluateAgentRequest.safeParse(body);
    return agent.success ? EvaluateWireRequest.safeParse(fromAgentForm(agent.data)) : agent;
  }
  if (typeof (body as { action?: unknown }).action === 'string' && 'agent' in body) {
    const legacy = EvaluateLegacyRequest.safeParse(body);
    return legacy.success ? EvaluateWireRequest.safeParse(fromLegacyForm(legacy.data)) : legacy;
  }
  return EvaluateWireRequest.safeParse(body);
}

/**
 * `?include=constraint_trace` (a comma list; no other value is known): the answer then carries
 * `constraint_trace`, the policy's rule-by-rule trace in the shape the SDK's preflight reads.
 */
export const EvaluateQuery = z.object({
  include: z
    .string()
    .max(200)
    .optional()
    .transform((value) => new Set(value === undefined || value === '' ? [] : value.split(',')))
    .refine((names) => [...names].every((name) => name === 'constraint_trace'), { message: 'the only value known is constraint_trace' }),
});

export const Decision = z.enum(['allow', 'deny', 'hold', 'escalate']);

export const RiskEnvelope = z.object({
  score: z.number(),
  base: z.number(),
  band: z.enum(['low', 'medium', 'high', 'critical']),
  factors: z.array(z.object({ name: z.string(), weight: z.number(), description: z.string() })),
});

export const Remediation = z.object({ code: z.string(), message: z.string() });

export const DecisionObject = z.object({
  decision: Decision,
  reason_codes: z.array(z.string()),
  action_class: z.string().nullable(),
  matched_rules: z.array(z.string()),
  policy: z.object({ id: z.string().nullable(), version: z.number().int().nullable() }),
  binding_hash: z.string(),
  bound_facts: z.array(z.string()),
  risk_envelope: RiskEnvelope,
  approvals: z.array(z.object({ id: z.string(), accepted: z.boolean(), reason: z.string().nullable() })),
  explanation: z.array(z.unknown()).optional(),
});

export const AuthorizationState = z.object({
  permit_requirement: z.enum(['required', 'not_required']),
  permit_status: z.enum(['present', 'not_issued']),
  verification_status: z.enum(['not_verified']),
});

/** One rule the policy considered, in order. */
export const ConstraintTraceStage = z.object({
  stage: z.literal('rule'),
  rule: z.string(),
  matched: z.boolean(),
  /** The rule's condition (CEL) or, when it could not be evaluated, why. */
  detail: z.string().nullable(),
  order: z.number().int(),
});

export const ConstraintTrace = z.object({
  rules_evaluated: z.array(
    z.object({
      /** The organization's policy id, or `none` when it has no policy. */
      policy_id: z.string(),
      decision: Decision,
      /** The policy version that decided (`v3`), or `none`. */
      fingerprint: z.string(),
      risk_score: z.number(),
      stages: z.array(ConstraintTraceStage),
    }),
  ),
  /** The policy whose evaluation produced a decision other than allow; null on allow. */
  matching_policy_id: z.string().nullable(),
});
export type ConstraintTrace = z.infer<typeof ConstraintTrace>;

export const EvaluateResponse = z.object({
  decision: Decision,
  authorization_state: AuthorizationState,
  permit_token: z.string().optional(),
  permit_id: z.string().optional(),
  request_id: z.string(),
  evaluation_id: z.string(),
  mode: z.enum(['live', 'shadow']),
  human_approval_required: z.boolean(),
  human_approval_status: z.enum(['not_required', 'pending', 'approved', 'rejected', 'expired']),
  /** When this decision stops being current (the permit lifetime of its action class). */
  expires_at: z.string(),
  /** The permit's expiry; null when no permit was issued. */
  permit_expires_at: z.string().nullable(),
  risk_score: z.number(),
  risk_envelope: RiskEnvelope,
  decisionObject: DecisionObject,
  remediation: z.array(Remediation).optional(),
  /** On a live hold: the approval request it opened (GET /v1/approvals/:id). */
  approval_request_id: z.string().optional(),
  /** On a live escalate: the escalation it opened (GET /v1/escalations/:id). */
  escalation_id: z.string().optional(),
  /** With `?include=constraint_trace` only. */
  constraint_trace: ConstraintTrace.optional(),
});
export type EvaluateResponse = z.infer<typeof EvaluateResponse>;
