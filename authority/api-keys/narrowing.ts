/**
 * Keys never widen: a key mints only keys no wider than
 * itself. Scopes are a subset of the creator's permissions; the address allowlist is a subset of
 * the creating key's (inherited when none is given); the expiry is no later than the creating
 * key's (inherited when none is given). Otherwise a restricted key could mint an unrestricted one
 * and step out of its own limits. A user token has no allowlist or expiry of its own to pass on.
 *
 * @example
 *   narrowedLimits(parentKey, { allowedCidrs: undefined, expiresAt: undefined });
 *   // { allowedCidrs: parentKey.allowedCidrs, expiresAt: parentKey.expiresAt }
 */
import { BlockList } from 'node:net';
import { CountersignError } from '../../shared/errors.js';
import { parseCidr } from '../../shared/wire/api-keys.js';
import type { Scope } from '../../shared/wire/scopes.js';
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

export interface RequestedLimits {
  allowedCidrs: readonly string[] | undefined;
  expiresAt: Date | undefined;
}

/**
 * The allowlist and expiry a key created by `parent` gets; 403 `forbidden` when the request asks
 * for more than `parent` has. Each requested block must fit in one of the parent's blocks (a block
 * that only the union of two would cover is refused: stricter, never wider).
 */
export function narrowedLimits(parent: Pick<ApiKey, 'allowedCidrs' | 'expiresAt'>, requested: RequestedLimits): RequestedLimits {
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
  let expiresAt = requested.expiresAt;
  if (parent.expiresAt !== null) {
    if (expiresAt === undefined) expiresAt = parent.expiresAt;
    if (expiresAt.getTime() > parent.expiresAt.getTime()) {
      throw new CountersignError('forbidden', `a key cannot outlive its creator: expires_at must be no later than ${parent.expiresAt.toISOString()}`);
    }
  }
  return { allowedCidrs, expiresAt };
}
