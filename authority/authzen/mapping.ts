/**
 * AuthZEN 1.0 in evaluate's terms, both ways, without I/O.
 *
 * In: an access evaluation becomes an evaluate wire request.
 *
 *   subject.id                 → actor_id
 *   action.name                → action_type (validated as evaluate validates it)
 *   resource.type, resource.id → context.target, a bound fact: the decision and any approval it
 *                                opens are for this resource and no other
 *   subject, action, resource  → context.subject, context.action, context.resource, as sent
 *                                (properties included), for policy conditions
 *   context                    → the rest of the context (environment, amount_usd, account_code,
 *                                approvals, anything else)
 *
 * The AuthZEN context cannot carry `subject`, `action`, `resource` or `target` (the wire schema
 * refuses them with 400), so what the entities say is never overridden or impersonated, and the
 * entity keys are written last all the same.
 *
 * Out: an evaluate response becomes `{decision, context}` by picking named fields, so nothing the
 * facade does not name (a permit token above all) can reach an AuthZEN caller.
 *
 * @example
 *   const request = toEvaluateRequest({
 *     subject: { type: 'service', id: 'finance-bot' }, action: { name: 'payments.wire' },
 *     resource: { type: 'account', id: 'OPS-001' }, context: { amount_usd: 500 },
 *   });
 *   request.context.target; // { type: 'account', id: 'OPS-001' }
 *   decisionOf(await evaluateAction(deps, principal, request, id, { permit: 'never', via: 'authzen' })).decision; // true on allow
 */
import { CountersignError } from '../../shared/errors.js';
import type {
  AuthzenDecision,
  AuthzenDecisionContext,
  AuthzenEvaluationDecision,
  AuthzenEvaluationRequest,
  AuthzenEvaluationsRequest,
  EvaluationsSemantic,
} from '../../shared/wire/authzen.js';
import { EvaluateWireRequest, type EvaluateResponse } from '../../shared/wire/evaluate.js';

/** One evaluation with every entity present (a batch entry after its defaults). */
export type AuthzenEvaluation = AuthzenEvaluationRequest;

/** What a request to the batch endpoint asks for. */
export type EvaluationsPlan =
  | { form: 'single'; evaluation: AuthzenEvaluation }
  | { form: 'batch'; evaluations: AuthzenEvaluation[]; semantic: EvaluationsSemantic };

/** Where evaluate's field names come from in the AuthZEN request, for error paths. */
function authzenPath(wirePath: string): string {
  if (wirePath === 'action_type') return 'action.name';
  if (wirePath === 'actor_id') return 'subject.id';
  if (wirePath.startsWith('context.target.')) return `resource.${wirePath.slice('context.target.'.length)}`;
  return wirePath;
}

/**
 * The evaluate wire request for `evaluation`, validated as evaluate validates its body. The
 * AuthZEN schema already holds every rule this checks, so a refusal here is a 400 that names the
 * AuthZEN field (under `where`, a batch entry's position), never a 500.
 */
export function toEvaluateRequest(evaluation: AuthzenEvaluation, where = ''): EvaluateWireRequest {
  const { subject, action, resource } = evaluation;
  // The AuthZEN schema refuses these four keys in the caller's context (RESERVED_CONTEXT_KEYS), so
  // the order does not decide between them; the spread goes last (test/unit/leading-spread.test.ts).
  const context = {
    subject,
    action,
    resource,
    target: { type: resource.type, id: resource.id },
    ...evaluation.context,
  };
  const parsed = EvaluateWireRequest.safeParse({ action_type: action.name, actor_id: subject.id, context });
  if (parsed.success) return parsed.data;
  throw new CountersignError('invalid_request', 'the AuthZEN request does not map onto an evaluation', {
    details: parsed.error.issues.map((issue) => {
      const path = authzenPath(issue.path.map(String).join('.'));
      return { path: [where, path].filter(Boolean).join('.') || '(body)', message: issue.message };
    }),
  });
}

/**
 * The evaluations a batch request asks for, each with the top-level defaults applied: an entry's
 * own subject, action, resource or context replaces the default as a whole. No entries (or an
 * empty list) is the single form.
 */
export function planEvaluations(request: AuthzenEvaluationsRequest): EvaluationsPlan {
  const entries = request.evaluations ?? [];
  const semantic = request.options?.evaluations_semantic ?? 'execute_all';
  if (entries.length === 0) return { form: 'single', evaluation: complete(request, request, '') };
  return { form: 'batch', semantic, evaluations: entries.map((entry, index) => complete(entry, request, `evaluations.${index}`)) };
}

function complete(entry: Partial<AuthzenEvaluation>, defaults: Partial<AuthzenEvaluation>, where: string): AuthzenEvaluation {
  const subject = entry.subject ?? defaults.subject;
  const action = entry.action ?? defaults.action;
  const resource = entry.resource ?? defaults.resource;
  const context = entry.context ?? defaults.context;
  // The wire schema refuses a request that leaves one out; this only keeps the types honest.
  if (!subject || !action || !resource) {
    const missing = !subject ? 'subject' : !action ? 'action' : 'resource';
    throw new CountersignError('invalid_request', 'the request does not match the schema', {
      details: [{ path: [where, missing].filter(Boolean).join('.'), message: `a ${missing} is required` }],
    });
  }
  return { subject, action, resource, ...(context === undefined ? {} : { context }) };
}

/** The AuthZEN answer to an evaluate response: `true` only for allow; the rest in `context`. */
export function decisionOf(response: EvaluateResponse): AuthzenDecision {
  const context: AuthzenDecisionContext = {
    decision: response.decision,
    reason_codes: response.decisionObject.reason_codes,
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
  return { decision: false, context: { error: { status: error.status, code: error.code, message: error.message } } };
}

/** Whether a batch stops after `answer`: at the first false for deny_on_first_deny, the first true for permit_on_first_permit. */
export function stopsAfter(semantic: EvaluationsSemantic, answer: AuthzenEvaluationDecision): boolean {
  if (semantic === 'deny_on_first_deny') return !answer.decision;
  if (semantic === 'permit_on_first_permit') return answer.decision;
  return false;
}
