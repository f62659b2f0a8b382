/**
 * The AuthZEN Authorization API 1.0 (OpenID AuthZEN) on the wire: the access evaluation request,
 * its batch form (top-level defaults, `evaluations`, `options`), the decision answers and the
 * Policy Decision Point metadata document. The authority answers them as a facade over evaluate
 * (authority/authzen/): decisions only, never a permit. The search APIs are in authzen-search.ts.
 *
 * As AuthZEN asks, a receiver ignores what it does not know: keys other than the ones named here,
 * at the top level, in an entity, in `options` or in a batch entry, are dropped before anything
 * reads the request. The bounded-input rules still apply to the whole body (depth, finite
 * numbers, well-formed text without NUL), so nothing unrecordable reaches the audit log.
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
import { Decision, EvaluateResponse } from './evaluate.js';

/**
 * How many evaluations one batch may list. Each is a full decision with its own audit event (and
 * perhaps an approval request), drawn one by one from the `evaluate` bucket: bounded input. The
 * `evaluate` bucket's default burst is as large, so an idle organization can send the largest batch.
 */
export const MAX_AUTHZEN_EVALUATIONS = 100;

/** Further attributes of an entity: any JSON object, kept in the evaluation's context for policy conditions. */
const Properties = z.record(z.string(), z.unknown());

export const AuthzenSubject = z.object({
  type: z.string().min(1).max(256),
  /** Any length: the evaluation's actor_id is this id, or its digest when longer than 256 characters. */
  id: z.string().min(1),
  properties: Properties.optional(),
});
export type AuthzenSubject = z.infer<typeof AuthzenSubject>;

export const AuthzenAction = z.object({
  /** Any name; it becomes the evaluation's action_type by the authority's action-name rule. */
  name: z.string().min(1),
  properties: Properties.optional(),
});
export type AuthzenAction = z.infer<typeof AuthzenAction>;

export const AuthzenResource = z.object({
  /** With `id`, the evaluation's bound context.target. */
  type: z.string().min(1).max(256),
  id: z.string().min(1).max(1024),
  properties: Properties.optional(),
});
export type AuthzenResource = z.infer<typeof AuthzenResource>;

/** The AuthZEN context: any JSON object. How its keys reach the policy is authority/authzen/mapping.ts's rule. */
export const AuthzenContext = z.record(z.string(), z.unknown());
export type AuthzenContext = z.infer<typeof AuthzenContext>;

/** `POST /access/v1/evaluation`. */
export const AuthzenEvaluationRequest = z.object({
  subject: AuthzenSubject,
  action: AuthzenAction,
  resource: AuthzenResource,
  context: AuthzenContext.optional(),
});
export type AuthzenEvaluationRequest = z.infer<typeof AuthzenEvaluationRequest>;

/** A default or an entry of a batch: any part of each entity, completed from the other. */
export const AuthzenEvaluationItem = z.object({
  subject: AuthzenSubject.partial().optional(),
  action: AuthzenAction.partial().optional(),
  resource: AuthzenResource.partial().optional(),
  context: AuthzenContext.optional(),
});
export type AuthzenEvaluationItem = z.infer<typeof AuthzenEvaluationItem>;

export const EvaluationsSemantic = z.enum(['execute_all', 'deny_on_first_deny', 'permit_on_first_permit']);
export type EvaluationsSemantic = z.infer<typeof EvaluationsSemantic>;

/**
 * `POST /access/v1/evaluations`. Without `evaluations` (or with an empty list) it is one
 * evaluation of the top-level subject, action, resource and context. With them, the top-level keys
 * are defaults (authority/authzen/mapping.ts, `planEvaluations`). An entry is read on its own: one
 * that is incomplete or malformed is answered `false` with its error, and the others are decided.
 */
export const AuthzenEvaluationsRequest = AuthzenEvaluationItem.extend({
  /** Decided in order; what an entry leaves out comes from the top level. */
  evaluations: z
    .array(
      z.unknown().describe(
        'An AuthzenEvaluationItem: `subject`, `action`, `resource` and `context`, each optional. Read on its own, so an entry that is not one is answered `false` with its error rather than failing the batch.',
      ),
    )
    .max(MAX_AUTHZEN_EVALUATIONS)
    .optional(),
  /** Options of the batch; those this authority does not know are ignored. */
  options: z
    .looseObject({
      /** `execute_all` unless given. */
      evaluations_semantic: EvaluationsSemantic.optional(),
      /** true: each decided entry carries its `context` (Countersign's decision behind it). Entries answer `{decision}` alone unless asked. */
      include_context: z.boolean().optional(),
    })
    .optional(),
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
  /** The action type the policy decided on (the action name after the action-name rule). */
  action_type: z.string(),
});
export type AuthzenDecisionContext = z.infer<typeof AuthzenDecisionContext>;

const codes = Object.keys(ERROR_CATALOGUE) as [ErrorCode, ...ErrorCode[]];

/** The error of a batch entry that could not be decided (incomplete, malformed, its request id taken): closed. */
export const AuthzenEntryError = z.object({
  status: z.number().int(),
  code: z.enum(codes),
  message: z.string(),
  details: z.array(z.object({ path: z.string(), message: z.string() })).optional(),
});
export const AuthzenErrorContext = z.object({ error: AuthzenEntryError });
export type AuthzenErrorContext = z.infer<typeof AuthzenErrorContext>;

/** The answer to one evaluation. */
export const AuthzenDecision = z.object({
  /** true only when Countersign decided allow. */
  decision: z.boolean(),
  context: AuthzenDecisionContext,
});
export type AuthzenDecision = z.infer<typeof AuthzenDecision>;

/** One entry of a batch answer: a decision (with its context when asked), or `false` with the entry's error. */
export const AuthzenEvaluationDecision = z.object({
  /** true only when Countersign decided allow; false for an entry that could not be decided. */
  decision: z.boolean(),
  context: z.union([AuthzenDecisionContext, AuthzenErrorContext]).optional(),
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
  search_subject_endpoint: z.string(),
  search_action_endpoint: z.string(),
});
export type AuthzenConfiguration = z.infer<typeof AuthzenConfiguration>;
