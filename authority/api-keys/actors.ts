/**
 * Credentials speak only for their actors. An API key may carry `allowed_actors`: exact actor ids,
 * prefixes ending in `*` (`agent:*`), or `*` alone. Every route that asks for a decision as an
 * actor (evaluate and its stream, the AuthZEN evaluations and action search, escalation creation)
 * calls `assertMaySpeakFor` with the actor it is about to decide for, before anything is decided or
 * recorded, so a leaked CI key restricted to `ci:*` cannot ask for a wire as `finance-bot`.
 *
 * A key without the list (null) speaks for any actor, as keys always did. A user token is not
 * restricted here: the person's role says what they may do, and the policy names who may act.
 *
 * @example
 *   actorPatternMatches('agent:*', 'agent:billing'); // true
 *   assertMaySpeakFor(request.principal as Principal, evaluation.actor_id); // 403 forbidden otherwise
 */
import { CountersignError } from '../../shared/errors.js';
import type { Principal } from '../auth/principal.js';

/** The stable `reason` of the 403 a refused actor gets. */
export const ACTOR_NOT_ALLOWED_REASON = 'ACTOR_NOT_ALLOWED_FOR_CREDENTIAL';

/** Whether `actorId` is one `pattern` names: the id itself, or any id starting with a `*` pattern's prefix. */
export function actorPatternMatches(pattern: string, actorId: string): boolean {
  return pattern.endsWith('*') ? actorId.startsWith(pattern.slice(0, -1)) : actorId === pattern;
}

/** Whether a credential with `allowedActors` (null = any) may ask for decisions as `actorId`. */
export function allowsActor(allowedActors: readonly string[] | null, actorId: string): boolean {
  return allowedActors === null || allowedActors.some((pattern) => actorPatternMatches(pattern, actorId));
}

/** The actor patterns `principal` is held to; null when it may speak for any actor (a user token, a key without the list). */
function actorLimitOf(principal: Principal): readonly string[] | null {
  return principal.kind === 'api_key' ? principal.allowedActors : null;
}

/** Whether `principal` may ask for decisions as `actorId`. */
export function maySpeakFor(principal: Principal, actorId: string): boolean {
  return allowsActor(actorLimitOf(principal), actorId);
}

/** 403 `forbidden` (reason ACTOR_NOT_ALLOWED_FOR_CREDENTIAL) unless `principal` may speak for `actorId`. */
export function assertMaySpeakFor(principal: Principal, actorId: string): void {
  const limit = actorLimitOf(principal);
  if (allowsActor(limit, actorId)) return;
  throw new CountersignError(
    'forbidden',
    `this API key may not act as "${actorId}": it may speak only for its allowed actors (${limit?.join(', ')})`,
    { reason: ACTOR_NOT_ALLOWED_REASON },
  );
}
