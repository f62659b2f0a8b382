/**
 * AuthZEN 1.0 in evaluate's terms, both ways, without I/O.
 *
 * In: an access evaluation becomes an evaluate wire request.
 *
 *   subject.id                 → actor_id; an id longer than 256 characters (evaluate's bound)
 *                                becomes `sha256:<hex digest of the id>`, the full id staying in
 *                                context.subject.id
 *   action.name                → action_type, by the action-name rule (action-names.ts)
 *   resource.type, resource.id → context.target, a bound fact: the decision and any approval it
 *                                opens are for this resource and no other
 *   subject, action, resource  → context.subject, context.action, context.resource, as sent
 *                                (properties included), for policy conditions
 *   context                    → the rest of the context, key by key (`placeContext`)
 *
 * The AuthZEN context is free-form, so its keys can collide with ours. A key the entities fill
 * (`subject`, `action`, `resource`, `target`), the namespace key `authzen_context` itself, and a key
 * evaluate gives a meaning (`environment`, `amount_usd`, `account_code`, `approvals`) whose value
 * is not of evaluate's type, all go under `context.authzen_context.<key>` as sent. So nothing in
 * the context can pose as the entities or bind another resource, a key of ours means what evaluate
 * says it means, and no request is refused for its context.
 *
 * Out: an evaluate response becomes `{decision, context}` by picking named fields, so nothing the
 * facade does not name (a permit token above all) can reach an AuthZEN caller.
 *
 * @example
 *   const request = toEvaluateRequest({
 *     subject: { type: 'service', id: 'finance-bot' }, action: { name: 'payments.wire' },
 *     resource: { type: 'account', id: 'OPS-001' }, context: { amount_usd: 500, environment: { region: 'eu' } },
 *   }, names);
 *   request.context.target;          // { type: 'account', id: 'OPS-001' }
 *   request.context.authzen_context; // { environment: { region: 'eu' } }
 */
import { hash } from 'node:crypto';
import { CountersignError } from '../../shared/errors.js';
import {
  AuthzenEvaluationItem,
  AuthzenEvaluationRequest,
  type AuthzenContext,
  type AuthzenDecision,
  type AuthzenDecisionContext,
  type AuthzenEvaluationDecision,
  type AuthzenEvaluationsRequest,
  type EvaluationsSemantic,
} from '../../shared/wire/authzen.js';
import { EvaluateContext, EvaluateWireRequest, type EvaluateResponse } from '../../shared/wire/evaluate.js';
import { invalidRequest } from '../http/errors.js';
import type { ActionNameMapping } from './action-names.js';

/** One evaluation with every entity present (a batch entry after its defaults). */
export type AuthzenEvaluation = AuthzenEvaluationRequest;

/** Where context keys that cannot be ours go. */
export const SET_ASIDE_KEY = 'authzen_context';

/** Keys the request's entities fill; the caller's context never sets them. */
const ENTITY_KEYS = new Set(['subject', 'action', 'resource', 'target', SET_ASIDE_KEY]);

/** Evaluate's typed keys, each kept only when its value has evaluate's type. */
const TYPED_KEYS = new Map(Object.entries(EvaluateContext.shape));

/** evaluate bounds actor_id to this; a longer subject id is represented by its digest. */
export const MAX_ACTOR_ID = 256;

/** A batch entry, ready to decide or already refused. */
export type PlannedEntry = { ok: true; evaluation: AuthzenEvaluation } | { ok: false; error: CountersignError };

/** What a request to the batch endpoint asks for. */
export type EvaluationsPlan =
  | { form: 'single'; evaluation: AuthzenEvaluation }
  | { form: 'batch'; entries: PlannedEntry[]; semantic: EvaluationsSemantic; includeContext: boolean };

/** The actor_id of a subject id. */
export function actorIdOf(subjectId: string): string {
  return subjectId.length <= MAX_ACTOR_ID ? subjectId : `sha256:${hash('sha256', subjectId, 'hex')}`;
}

/** The AuthZEN context placed into evaluate's: see the module comment. */
export function placeContext(context: AuthzenContext = {}): Record<string, unknown> {
  const placed: Record<string, unknown> = {};
  const aside: Record<string, unknown> = {};
  for (const [key, value] of Object.entries(context)) {
    const typed = TYPED_KEYS.get(key);
    const ours = ENTITY_KEYS.has(key) || (typed !== undefined && !typed.safeParse(value).success);
    (ours ? aside : placed)[key] = value;
  }
  if (Object.keys(aside).length > 0) placed[SET_ASIDE_KEY] = aside;
  return placed;
}

/**
 * The evaluate wire request for `evaluation`. The AuthZEN schema and `placeContext` already hold
 * every rule evaluate checks, so a refusal here is a 400 that names the AuthZEN field (under
 * `where`, a batch entry's position), never a 500.
 */
export function toEvaluateRequest(evaluation: AuthzenEvaluation, names: ActionNameMapping, where = ''): EvaluateWireRequest {
  const { subject, action, resource } = evaluation;
  // The entity keys go last, after the caller's context, which placeContext keeps them out of all the same.
  const context = Object.assign({}, placeContext(evaluation.context), { subject, action, resource, target: { type: resource.type, id: resource.id } });
  const parsed = EvaluateWireRequest.safeParse({ action_type: names.toActionType(action.name), actor_id: actorIdOf(subject.id), context });
  if (parsed.success) return parsed.data;
  throw new CountersignError('invalid_request', 'the AuthZEN request does not map onto an evaluation', {
    details: parsed.error.issues.map((issue) => ({ path: [where, issue.path.map(String).join('.')].filter(Boolean).join('.') || '(body)', message: issue.message })),
  });
}

/** The issues of `error` as details under `prefix`. */
function prefixed(error: CountersignError, prefix: string): CountersignError {
  const details = (error.details ?? []).map((detail) => Object.assign({}, detail, { path: detail.path === '(body)' ? prefix : `${prefix}.${detail.path}` }));
  return new CountersignError('invalid_request', `evaluation ${prefix.split('.')[1]} is incomplete or malformed`, { details });
}

type Entity<K extends 'subject' | 'action' | 'resource'> = AuthzenEvaluationItem[K];

/** An entry's entity replaces the default's as a whole, except that a required field it leaves out comes from the default. */
function completeEntity<K extends 'subject' | 'action' | 'resource'>(own: Entity<K>, fallback: Entity<K>): Entity<K> {
  if (own === undefined) return fallback;
  if (fallback === undefined) return own;
  const required = Object.fromEntries(Object.entries(fallback).filter(([key]) => key !== 'properties'));
  return Object.assign({}, required, own) as Entity<K>;
}

function planEntry(raw: unknown, defaults: AuthzenEvaluationItem, index: number): PlannedEntry {
  const where = `evaluations.${index}`;
  const item = AuthzenEvaluationItem.safeParse(raw);
  if (!item.success) return { ok: false, error: prefixed(invalidRequest(item.error), where) };
  const merged = {
    subject: completeEntity(item.data.subject, defaults.subject),
    action: completeEntity(item.data.action, defaults.action),
    resource: completeEntity(item.data.resource, defaults.resource),
    context: item.data.context ?? defaults.context,
  };
  const complete = AuthzenEvaluationRequest.safeParse(merged);
  if (!complete.success) return { ok: false, error: prefixed(invalidRequest(complete.error), where) };
  return { ok: true, evaluation: complete.data };
}

/**
 * What a batch request asks for. No entries (or an empty list): the top level is one evaluation
 * and must be complete (400 otherwise). With entries, the top-level subject, action, resource and
 * context are defaults: an entry's own entity replaces the default as a whole (its `properties`
 * too), except that a required field it leaves out (`type`, `id`, `name`) comes from the default;
 * an entry's own context replaces the default context. An entry that ends up incomplete or
 * malformed is planned as refused; the others are decided.
 */
export function planEvaluations(request: AuthzenEvaluationsRequest): EvaluationsPlan {
  const { evaluations = [], options = {}, ...defaults } = request;
  if (evaluations.length === 0) {
    const single = AuthzenEvaluationRequest.safeParse(defaults);
    if (!single.success) throw invalidRequest(single.error);
    return { form: 'single', evaluation: single.data };
  }
  return {
    form: 'batch',
    semantic: options.evaluations_semantic ?? 'execute_all',
    includeContext: options.include_context === true,
    entries: evaluations.map((raw, index) => planEntry(raw, defaults, index)),
  };
}

/** The AuthZEN answer to an evaluate response: `true` only for allow; the rest in `context`. */
export function decisionOf(response: EvaluateResponse, actionType: string): AuthzenDecision {
  const context: AuthzenDecisionContext = {
    decision: response.decision,
    reason_codes: response.decisionObject.reason_codes,
    action_type: actionType,
    request_id: response.request_id,
    evaluation_id: response.evaluation_id,
    mode: response.mode,
    risk_score: response.risk_score,
    human_approval_status: response.human_approval_status,
  };
  if (response.remediation) context.remediation = response.remediation;
  if (response.approval_request_id) context.approval_request_id = response.approval_request_id;
  if (response.escalation_id) context.escalation_id = response.escalation_id;
  return { decision: response.decision === 'allow', context };
}

/** A batch entry that could not be decided: closed, with the error it met. */
export function errorDecisionOf(error: CountersignError): AuthzenEvaluationDecision {
  const details = error.details && error.details.length > 0 ? { details: error.details } : {};
  return { decision: false, context: { error: { status: error.status, code: error.code, message: error.message, ...details } } };
}

/** Whether a batch stops after `answer`: at the first false for deny_on_first_deny, the first true for permit_on_first_permit. */
export function stopsAfter(semantic: EvaluationsSemantic, answer: AuthzenEvaluationDecision): boolean {
  if (semantic === 'deny_on_first_deny') return !answer.decision;
  if (semantic === 'permit_on_first_permit') return answer.decision;
  return false;
}
