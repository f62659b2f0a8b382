/**
 * The AuthZEN search APIs, answered from what the organization's policy names: the candidates are
 * enumerated from the policy, and each is put through the policy engine exactly as an evaluation
 * of it would be (the same mapping, `decideAsEvaluate`); a candidate is a result when the decision
 * is `allow`, so every result, fed back into an evaluation, answers `true` (unless the policy
 * changes in between).
 *
 *   action search   candidates: the action types of the policy's exact classes, the names of
 *                   `authzen.action_names` and the HTTP methods, each listed under the AuthZEN name
 *                   that maps onto the type decided. A type a class reaches only through `prefix.*`
 *                   is not enumerable and is listed only when one of those names maps onto it.
 *   subject search  candidates: every actor the policy names (in a class or an actor group), with
 *                   the requested subject type and properties. Subjects a class admits through
 *                   `actors: ['*']` are not enumerable and are not listed.
 *
 * An API key restricted to some actors (api-keys/actors.ts) searches only as them: an action
 * search for another subject is refused (403, as its evaluation would be), and a subject search
 * lists only actors the key may speak for, so every result still answers `true` when evaluated
 * with the same key.
 *
 * A search decides nothing: no evaluation is recorded, no audit event is written, no approval
 * request or escalation is opened, and approvals presented in `context.approvals` are not
 * consulted (a `hold` is not a result). It draws one token from the `evaluate` bucket, whatever the
 * number of candidates, since it writes nothing and its work is bounded by the policy's size.
 *
 * Pages: results keep the candidates' order (document order, then the configured names, then the
 * methods); `next_token` is the position of the next result, opaque to the caller.
 *
 * @example
 *   const page = await searchActions(deps, principal, { subject, resource, page: { limit: 10 } });
 *   page.results; // [{ name: 'payments.wire' }, { name: 'GET' }]
 */
import { CountersignError } from '../../shared/errors.js';
import type { AuthzenEvaluationRequest } from '../../shared/wire/authzen.js';
import {
  MAX_AUTHZEN_SEARCH_PAGE,
  type AuthzenActionSearchRequest,
  type AuthzenActionSearchResponse,
  type AuthzenSubjectSearchRequest,
  type AuthzenSubjectSearchResponse,
} from '../../shared/wire/authzen-search.js';
import { assertMaySpeakFor, maySpeakFor } from '../api-keys/actors.js';
import type { Principal } from '../auth/principal.js';
import { decideAsEvaluate } from '../evaluate/decide.js';
import type { CurrentPolicy } from '../policy/versions.js';
import { ENCODED_NAMESPACE } from './action-names.js';
import type { AuthzenDecideDeps } from './decide.js';
import { actorIdOf, toEvaluateRequest } from './mapping.js';

type SearchDeps = Pick<AuthzenDecideDeps, 'policies' | 'clock' | 'names'>;
type Page = { token?: string | undefined; limit?: number | undefined } | undefined;

const TOKEN_PREFIX = 'p1.';

/** The offset a page token names; a token this API did not hand out is the caller's 400. */
function offsetOf(page: Page): number {
  if (page?.token === undefined || page.token === '') return 0;
  const text = Buffer.from(page.token, 'base64url').toString('utf8');
  const offset = text.startsWith(TOKEN_PREFIX) ? Number(text.slice(TOKEN_PREFIX.length)) : Number.NaN;
  if (!Number.isSafeInteger(offset) || offset < 0) {
    throw new CountersignError('invalid_request', 'page.token was not handed out by this search', { details: [{ path: 'page.token', message: 'unknown token' }] });
  }
  return offset;
}

/** One page of `matches`, with AuthZEN's page object. */
function paged<T>(matches: T[], page: Page): { results: T[]; page: { next_token: string; count: number; total: number } } {
  const offset = offsetOf(page);
  const limit = Math.min(MAX_AUTHZEN_SEARCH_PAGE, Math.max(1, page?.limit ?? MAX_AUTHZEN_SEARCH_PAGE));
  const results = matches.slice(offset, offset + limit);
  const next = offset + limit < matches.length ? Buffer.from(`${TOKEN_PREFIX}${offset + limit}`, 'utf8').toString('base64url') : '';
  return { results, page: { next_token: next, count: results.length, total: matches.length } };
}

/** Whether an evaluation of `evaluation` would answer `true` under `policy`, deciding and recording nothing. */
function allows(deps: SearchDeps, policy: CurrentPolicy, evaluation: AuthzenEvaluationRequest, now: Date): boolean {
  const request = toEvaluateRequest(evaluation, deps.names);
  return decideAsEvaluate(policy.compiled, request, { accepted: [], statuses: [], now }).decision === 'allow';
}

export async function searchActions(deps: SearchDeps, principal: Principal, request: AuthzenActionSearchRequest): Promise<AuthzenActionSearchResponse> {
  assertMaySpeakFor(principal, actorIdOf(request.subject.id));
  const policy = await deps.policies.current(principal.org);
  if (!policy) return paged([], request.page);
  const now = new Date(deps.clock.now());
  const exact = policy.compiled.vocabulary.exactActionTypes.filter((type) => !type.startsWith(ENCODED_NAMESPACE));
  const names = [...new Set([...exact, ...deps.names.knownNames()])];
  const { subject, resource, context } = request;
  const matches = names.filter((name) => allows(deps, policy, { subject, action: { name }, resource, context }, now)).map((name) => ({ name }));
  return paged(matches, request.page);
}

export async function searchSubjects(deps: SearchDeps, principal: Principal, request: AuthzenSubjectSearchRequest): Promise<AuthzenSubjectSearchResponse> {
  const policy = await deps.policies.current(principal.org);
  if (!policy) return paged([], request.page);
  const now = new Date(deps.clock.now());
  const { subject, action, resource, context } = request;
  const matches = policy.compiled.vocabulary.actors
    .filter((id) => maySpeakFor(principal, actorIdOf(id)) && allows(deps, policy, { subject: Object.assign({}, subject, { id }), action, resource, context }, now))
    .map((id) => ({ type: subject.type, id }));
  return paged(matches, request.page);
}
