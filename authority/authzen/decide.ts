/**
 * Deciding AuthZEN evaluations: each one through evaluate's own core (evaluateAction), so the
 * policy, presented approvals, the approval request a hold opens and the escalation an escalate
 * opens, idempotency, group commit and the audit event are exactly evaluate's. The one difference
 * is the option `permit: 'never'`: an allow issues no permit. Every evaluation is recorded with
 * `via: 'authzen'`.
 *
 * A batch is decided one entry at a time, in order: `deny_on_first_deny` and
 * `permit_on_first_permit` stop as soon as their answer is known (the entries after it are neither
 * decided nor recorded), and each entry's audit event follows the previous one. Entry `i` is
 * recorded under request id `<X-Request-ID>/<i>`, a form no header or body request_id can take, so
 * a repeated batch repeats entry by entry and never collides with a single evaluation.
 *
 * `X-Request-ID` is the idempotency key, as on evaluate: the same question under the same id gets
 * its recorded answer. Policy enforcement points often pass the X-Request-ID of the request they
 * guard on to every check they make for it, though, so another question under an id already used
 * is not refused (evaluate's 409): it is decided and recorded under `<id>#<digest of the question>`,
 * which makes it idempotent in turn.
 *
 * Every 409 of the first attempt is retried under the derived id, whatever its cause, so a
 * credential cannot tell from the answer whether another one asked the same question under that id
 * (evaluate's refusals say nothing about the first request either).
 *
 * An entry that is incomplete or malformed (mapping.ts plans it so) is answered `false` with its
 * error and decided by nobody: no request id, no audit event. An entry that cannot be decided for
 * a reason of its own (4xx: another credential holds both its request id and the id derived for
 * this question, or its subject is an actor the API key may not speak for, say) is answered the
 * same way, as AuthZEN asks. A failure of the service itself (503: the audit log cannot be
 * written) fails the whole request: entries already decided stay recorded, and the caller, having
 * no answer, must treat every entry as denied.
 *
 * Decided entries answer `{decision}` alone, as AuthZEN's examples and the working group's
 * interoperability runners expect, unless the request's `options.include_context` asks for each
 * one's `context`; a refused entry always carries its error.
 *
 * @example
 *   const answer = await decideAccess(deps, principal, evaluation, request.id);
 *   const answers = await decideEvaluations(deps, principal, plan, request.id);
 */
import { CountersignError } from '../../shared/errors.js';
import type { AuthzenDecision, AuthzenEvaluationDecision } from '../../shared/wire/authzen.js';
import type { EvaluateWireRequest } from '../../shared/wire/evaluate.js';
import { assertMaySpeakFor } from '../api-keys/actors.js';
import type { Principal } from '../auth/principal.js';
import { evaluateAction, requestFingerprint, type EvaluateDeps, type EvaluateOptions } from '../evaluate/evaluate.js';
import type { ActionNameMapping } from './action-names.js';
import { decisionOf, errorDecisionOf, stopsAfter, toEvaluateRequest, type AuthzenEvaluation, type EvaluationsPlan } from './mapping.js';

/** Evaluate's dependencies and the action-name rule. */
export interface AuthzenDecideDeps extends EvaluateDeps {
  names: ActionNameMapping;
}

/** How the facade calls the core: decisions only, and marked as AuthZEN's in the audit log. */
export const AUTHZEN_EVALUATION: EvaluateOptions = Object.freeze({ permit: 'never', via: 'authzen' });

/** The request id of entry `index` of a batch sent with `requestId`. */
export function batchEntryRequestId(requestId: string, index: number): string {
  return `${requestId}/${index}`;
}

/** The request id of a question asked under `requestId` after another question was recorded under it. */
function questionRequestId(requestId: string, request: EvaluateWireRequest): string {
  return `${requestId}#${requestFingerprint(request, AUTHZEN_EVALUATION).slice(0, 16)}`;
}

/** One evaluation, decided and recorded; errors are the caller's (the error envelope). */
export async function decideAccess(deps: AuthzenDecideDeps, principal: Principal, evaluation: AuthzenEvaluation, requestId: string, where = ''): Promise<AuthzenDecision> {
  const request = toEvaluateRequest(evaluation, deps.names, where);
  assertMaySpeakFor(principal, request.actor_id);
  try {
    return decisionOf(await evaluateAction(deps, principal, request, requestId, AUTHZEN_EVALUATION), request.action_type);
  } catch (error) {
    if (!(error instanceof CountersignError && error.code === 'conflict')) throw error;
    return decisionOf(await evaluateAction(deps, principal, request, questionRequestId(requestId, request), AUTHZEN_EVALUATION), request.action_type);
  }
}

/** The entries of a batch, in order, up to where its semantic stops. */
export async function decideEvaluations(
  deps: AuthzenDecideDeps,
  principal: Principal,
  plan: Extract<EvaluationsPlan, { form: 'batch' }>,
  requestId: string,
): Promise<AuthzenEvaluationDecision[]> {
  const answers: AuthzenEvaluationDecision[] = [];
  for (const [index, entry] of plan.entries.entries()) {
    let answer: AuthzenEvaluationDecision;
    if (!entry.ok) {
      answer = errorDecisionOf(entry.error);
    } else {
      try {
        const decided = await decideAccess(deps, principal, entry.evaluation, batchEntryRequestId(requestId, index), `evaluations.${index}`);
        answer = plan.includeContext ? decided : { decision: decided.decision };
      } catch (error) {
        if (!isEntryError(error)) throw error;
        answer = errorDecisionOf(error);
      }
    }
    answers.push(answer);
    if (stopsAfter(plan.semantic, answer)) break;
  }
  return answers;
}

/** A refusal about the entry itself (its facts, its request id), not about the service. */
function isEntryError(error: unknown): error is CountersignError {
  return error instanceof CountersignError && error.status >= 400 && error.status < 500 && error.status !== 429;
}
