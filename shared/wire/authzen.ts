/**
 * The AuthZEN Authorization API 1.0 (OpenID AuthZEN) on the wire: the access evaluation request,
 * its batch form (top-level defaults, `evaluations`, `options.evaluations_semantic`), the decision
 * answers and the Policy Decision Point metadata document. The authority answers them as a facade
 * over evaluate (authority/authzen/): decisions only, never a permit.
 *
 * Entities are strict: an AuthZEN subject, action or resource carries its extra attributes in
 * `properties`, so any other key is a malformed request (400), not something quietly dropped
 * before the policy could see it.
 *
 * @example
 *   AuthzenEvaluationRequest.parse({
 *     subject: { type: 'service', id: 'finance-bot' },
 *     action: { name: 'payments.wire' },
 *     resource: { type: 'account', id: 'OPS-001' },
 *     context: { environment: 'production', amount_usd: 500, account_code: 'OPS-001' },
 *   });
 */
import { z } from 'zod';
import { ERROR_CATALOGUE, type ErrorCode } from '../errors.js';
import { ActionType, Decision, EvaluateContext, EvaluateResponse } from './evaluate.js';

/**
 * How many evaluations one batch may list. Each is a full decision with its own audit event (and
 * perhaps an approval request), drawn one by one from the `evaluate` bucket: bounded input.
 */
export const MAX_AUTHZEN_EVALUATIONS = 20;

/**
 * Keys of the evaluate context that come from the request's subject, action and resource. The
 * AuthZEN `context` may not carry them (400): nothing in it can pose as the entities, nor bind a
 * resource other than the one named.
 */
export const RESERVED_CONTEXT_KEYS = ['subject', 'action', 'resource', 'target'] as const;

/** Further attributes of an entity: any JSON object, kept in the evaluation's context for policy conditions. */
const Properties = z.record(z.string(), z.unknown());

export const AuthzenSubject = z
  .object({
    type: z.string().min(1).max(256),
    /** The evaluation's actor_id. */
    id: z.string().min(1).max(256),
    properties: Properties.optional(),
  })
  .strict();
export type AuthzenSubject = z.infer<typeof AuthzenSubject>;

export const AuthzenAction = z
  .object({
    /** The evaluation's action_type, with its rules: dotted lowercase, such as payments.wire. */
    name: ActionType,
    properties: Properties.optional(),
  })
  .strict();
export type AuthzenAction = z.infer<typeof AuthzenAction>;

export const AuthzenResource = z
  .object({
    /** With `id`, the evaluation's bound context.target. */
    type: z.string().min(1).max(256),
    id: z.string().min(1).max(1024),
    properties: Properties.optional(),
  })
  .strict();
export type AuthzenResource = z.infer<typeof AuthzenResource>;

type Issues = z.core.$RefinementCtx;

function refuseReservedKeys(context: Record<string, unknown> | undefined, path: Array<string | number>, ctx: Issues): void {
  for (const key of RESERVED_CONTEXT_KEYS) {
    if (context && Object.hasOwn(context, key)) {
      ctx.addIssue({ code: 'custom', path: [...path, key], message: `set from the request's ${key === 'target' ? 'resource' : key}; not accepted in context` });
    }
  }
}

/** `POST /access/v1/evaluation`. */
export const AuthzenEvaluationRequest = z
  .object({
    subject: AuthzenSubject,
    action: AuthzenAction,
    resource: AuthzenResource,
    context: EvaluateContext.optional(),
  })
  .strict()
  .superRefine((request, ctx) => refuseReservedKeys(request.context, ['context'], ctx));
export type AuthzenEvaluationRequest = z.infer<typeof AuthzenEvaluationRequest>;

/** One entry of `evaluations`: whatever it leaves out comes from the request's top level. */
export const AuthzenEvaluationItem = z
  .object({
    subject: AuthzenSubject.optional(),
    action: AuthzenAction.optional(),
    resource: AuthzenResource.optional(),
    context: EvaluateContext.optional(),
  })
  .strict();

export const EvaluationsSemantic = z.enum(['execute_all', 'deny_on_first_deny', 'permit_on_first_permit']);
export type EvaluationsSemantic = z.infer<typeof EvaluationsSemantic>;

const ENTITIES = ['subject', 'action', 'resource'] as const;

/**
 * `POST /access/v1/evaluations`. Without `evaluations` (or with an empty list) it is one
 * evaluation of the top-level subject, action, resource and context. With them, the top-level keys
 * are defaults: a key an entry gives replaces the default as a whole (context included, not
 * merged), and every entry must end up with a subject, an action and a resource.
 */
export const AuthzenEvaluationsRequest = z
  .object({
    subject: AuthzenSubject.optional(),
    action: AuthzenAction.optional(),
    resource: AuthzenResource.optional(),
    context: EvaluateContext.optional(),
    /** Decided in order; what an entry leaves out comes from the top level. */
    evaluations: z.array(AuthzenEvaluationItem).max(MAX_AUTHZEN_EVALUATIONS).optional(),
    /** Options of the batch; those this authority does not know are ignored. `execute_all` unless given. */
    options: z.looseObject({ evaluations_semantic: EvaluationsSemantic.optional() }).optional(),
  })
  .strict()
  .superRefine((request, ctx) => {
    refuseReservedKeys(request.context, ['context'], ctx);
    const items = request.evaluations ?? [];
    if (items.length === 0) {
      for (const key of ENTITIES) {
        if (!request[key]) ctx.addIssue({ code: 'custom', path: [key], message: 'required when `evaluations` is absent or empty' });
      }
      return;
    }
    items.forEach((item, index) => {
      refuseReservedKeys(item.context, ['evaluations', index, 'context'], ctx);
      for (const key of ENTITIES) {
        if (!item[key] && !request[key]) {
          ctx.addIssue({ code: 'custom', path: ['evaluations', index, key], message: `required: neither this evaluation nor the request's top level gives a ${key}` });
        }
      }
    });
  });
export type AuthzenEvaluationsRequest = z.infer<typeof AuthzenEvaluationsRequest>;

/** What the answer's `context` says: Countersign's own decision and what it opened. Never a permit. */
export const AuthzenDecisionContext = EvaluateResponse.pick({
  request_id: true,
  evaluation_id: true,
  mode: true,
  risk_score: true,
  human_approval_status: true,
  remediation: true,
  approval_request_id: true,
  escalation_id: true,
}).extend({
  /** Countersign's decision; only allow answers `decision: true`. */
  decision: Decision,
  /** Why: the decision object's reason codes. */
  reason_codes: z.array(z.string()),
});
export type AuthzenDecisionContext = z.infer<typeof AuthzenDecisionContext>;

const codes = Object.keys(ERROR_CATALOGUE) as [ErrorCode, ...ErrorCode[]];

/** An entry of a batch that could not be decided (its request id taken by another credential, say): closed. */
export const AuthzenErrorContext = z.object({
  error: z.object({ status: z.number().int(), code: z.enum(codes), message: z.string() }),
});
export type AuthzenErrorContext = z.infer<typeof AuthzenErrorContext>;

/** The answer to one evaluation. */
export const AuthzenDecision = z.object({
  /** true only when Countersign decided allow. */
  decision: z.boolean(),
  context: AuthzenDecisionContext,
});
export type AuthzenDecision = z.infer<typeof AuthzenDecision>;

/** One entry of a batch answer: a decision, or `false` with the entry's error. */
export const AuthzenEvaluationDecision = z.object({
  /** true only when Countersign decided allow; false for an entry that could not be decided. */
  decision: z.boolean(),
  context: z.union([AuthzenDecisionContext, AuthzenErrorContext]),
});
export type AuthzenEvaluationDecision = z.infer<typeof AuthzenEvaluationDecision>;

/** The answer to a batch, in the order of the request; shorter when a semantic stopped early. */
export const AuthzenEvaluationsResponse = z.object({ evaluations: z.array(AuthzenEvaluationDecision) });
export type AuthzenEvaluationsResponse = z.infer<typeof AuthzenEvaluationsResponse>;

/** `GET /.well-known/authzen-configuration`: absolute URLs, no secrets. */
export const AuthzenConfiguration = z.object({
  /** The base URL of this authority: console.public_url, else the request's scheme and Host. */
  policy_decision_point: z.string(),
  access_evaluation_endpoint: z.string(),
  access_evaluations_endpoint: z.string(),
});
export type AuthzenConfiguration = z.infer<typeof AuthzenConfiguration>;
