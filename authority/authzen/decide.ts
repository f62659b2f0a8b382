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
 * An entry that cannot be decided for a reason of its own (4xx: its request id was used for other
 * facts, say) is answered `false` with the error in its context, as AuthZEN asks. A failure of the
 * service itself (503: the audit log cannot be written) fails the whole request: entries already
 * decided stay recorded, and the caller, having no answer, must treat every entry as denied.
 *
 * @example
 *   const answer = await decideAccess(deps, principal, evaluation, request.id);
 *   const answers = await decideEvaluations(deps, principal, plan, request.id);
 */
import { CountersignError } from '../../shared/errors.js';
import type { AuthzenDecision, AuthzenEvaluationDecision } from '../../shared/wire/authzen.js';
import type { Principal } from '../auth/principal.js';
import { evaluateAction, type EvaluateDeps, type EvaluateOptions } from '../evaluate/evaluate.js';
import { decisionOf, errorDecisionOf, stopsAfter, toEvaluateRequest, type AuthzenEvaluation, type EvaluationsPlan } from './mapping.js';

/** How the facade calls the core: decisions only, and marked as AuthZEN's in the audit log. */
export const AUTHZEN_EVALUATION: EvaluateOptions = Object.freeze({ permit: 'never', via: 'authzen' });

/** The request id of entry `index` of a batch sent with `requestId`. */
export function batchEntryRequestId(requestId: string, index: number): string {
  return `${requestId}/${index}`;
}

/** One evaluation, decided and recorded; errors are the caller's (the error envelope). */
export async function decideAccess(deps: EvaluateDeps, principal: Principal, evaluation: AuthzenEvaluation, requestId: string, where = ''): Promise<AuthzenDecision> {
  const request = toEvaluateRequest(evaluation, where);
  return decisionOf(await evaluateAction(deps, principal, request, requestId, AUTHZEN_EVALUATION));
}

/** The entries of a batch, in order, up to where its semantic stops. */
export async function decideEvaluations(
  deps: EvaluateDeps,
  principal: Principal,
  plan: Extract<EvaluationsPlan, { form: 'batch' }>,
  requestId: string,
): Promise<AuthzenEvaluationDecision[]> {
  const answers: AuthzenEvaluationDecision[] = [];
  for (const [index, evaluation] of plan.evaluations.entries()) {
    let answer: AuthzenEvaluationDecision;
    try {
      answer = await decideAccess(deps, principal, evaluation, batchEntryRequestId(requestId, index), `evaluations.${index}`);
    } catch (error) {
      if (!isEntryError(error)) throw error;
      answer = errorDecisionOf(error);
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
