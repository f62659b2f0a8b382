/**
 * Keys never widen: a key mints only keys no wider than
 * itself. Scopes are a subset of the creator's permissions; the address allowlist is a subset of
 * the creating key's (inherited when none is given); the actors it may speak for are a subset of
 * the creating key's (inherited when none are given); the expiry is no later than the creating
 * key's (inherited when none is given). Otherwise a restricted key could mint an unrestricted one
 * and step out of its own limits. A user token has no allowlist, actors or expiry of its own to
 * pass on.
 *
 * @example
 *   narrowedLimits(parentKey, { allowedCidrs: undefined, allowedActors: undefined, expiresAt: undefined });
 *   // { allowedCidrs: parentKey.allowedCidrs, allowedActors: parentKey.allowedActors, expiresAt: parentKey.expiresAt }
 */
import { BlockList } from 'node:net';
import { CountersignError } from '../../shared/errors.js';
import { parseCidr } from '../../shared/wire/api-keys.js';
import type { Scope } from '../../shared/wire/scopes.js';
import { actorPatternMatches } from './actors.js';
import type { ApiKey } from './keys.js';

/** The scopes in `wanted` that `held` lacks. */
export function scopesBeyond(wanted: readonly Scope[], held: ReadonlySet<Scope>): Scope[] {
  return wanted.filter((scope) => !held.has(scope));
}

/**
 * Whether every address of `inner` lies in the block `outer`. Both parse (the wire schema checked
 * them); an unparseable or cross-family pair is not contained (fail closed). When inner's prefix is
 * at least outer's, any one address of inner, masked to outer's prefix, names the block all of
 * inner's addresses fall in, so checking inner's given address is enough.
 */
export function cidrWithin(inner: string, outer: string): boolean {
  const child = parseCidr(inner);
  const parent = parseCidr(outer);
  if (!child || !parent || child.family !== parent.family || child.prefix < parent.prefix) return false;
  const block = new BlockList();
  block.addSubnet(parent.address, parent.prefix, parent.family);
  return block.check(child.address, child.family);
}

/**
 * Whether every actor id the pattern `inner` matches is matched by one of `outer`. An exact id
 * needs a parent pattern matching it. A prefix pattern `p*` matches infinitely many ids, so no
 * set of exact ids covers it; it is covered exactly when one parent prefix `q*` is a prefix of `p`
 * (the id `p` itself must be matched by some `q*`, and then every id starting with `p` is too), so
 * the union of the parent's patterns never covers what no single one of them does.
 */
export function actorPatternWithin(inner: string, outer: readonly string[]): boolean {
  if (!inner.endsWith('*')) return outer.some((pattern) => actorPatternMatches(pattern, inner));
  const prefix = inner.slice(0, -1);
  return outer.some((pattern) => pattern.endsWith('*') && actorPatternMatches(pattern, prefix));
}

export interface RequestedLimits {
  allowedCidrs: readonly string[] | undefined;
  allowedActors: readonly string[] | undefined;
  expiresAt: Date | undefined;
}

/**
 * The allowlist and expiry a key created by `parent` gets; 403 `forbidden` when the request asks
 * for more than `parent` has. Each requested block must fit in one of the parent's blocks (a block
 * that only the union of two would cover is refused: stricter, never wider).
 */
export function narrowedLimits(parent: Pick<ApiKey, 'allowedCidrs' | 'allowedActors' | 'expiresAt'>, requested: RequestedLimits): RequestedLimits {
  let allowedCidrs = requested.allowedCidrs;
  if (parent.allowedCidrs !== null) {
    if (allowedCidrs === undefined) allowedCidrs = parent.allowedCidrs;
    const outside = allowedCidrs.filter((cidr) => !parent.allowedCidrs?.some((own) => cidrWithin(cidr, own)));
    if (outside.length > 0) {
      throw new CountersignError(
        'forbidden',
        `a key can only be given addresses within its creator's allowlist (${parent.allowedCidrs.join(', ')}); outside it: ${outside.join(', ')}`,
      );
    }
  }
  let allowedActors = requested.allowedActors;
  if (parent.allowedActors !== null) {
    const own = parent.allowedActors;
    if (allowedActors === undefined) allowedActors = own;
    const outside = allowedActors.filter((pattern) => !actorPatternWithin(pattern, own));
    if (outside.length > 0) {
      throw new CountersignError(
        'forbidden',
        `a key can only be given actors its creator may speak for (${own.join(', ')}); beyond them: ${outside.join(', ')}`,
      );
    }
  }
  let expiresAt = requested.expiresAt;
  if (parent.expiresAt !== null) {
    if (expiresAt === undefined) expiresAt = parent.expiresAt;
    if (expiresAt.getTime() > parent.expiresAt.getTime()) {
      throw new CountersignError('forbidden', `a key cannot outlive its creator: expires_at must be no later than ${parent.expiresAt.toISOString()}`);
    }
  }
  return { allowedCidrs, allowedActors, expiresAt };
}
