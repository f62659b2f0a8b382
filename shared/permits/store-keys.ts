/**
 * Logical keys of the permit state in the shared store. The `{org}` hash tag puts a permit's
 * consume-once marker, its revocation and its organization's verification stream in one Redis
 * Cluster slot, so the consume-and-record script touches a single slot.
 *
 * One key serves both consume-once and revocation: the store keeps the two in separate
 * namespaces (`once:` and `revoked:`), so they never collide.
 *
 * @example
 *   await store.revoke(permitStoreKey('org_1', jti), ttlMs);          // permit:{org_1}:<jti>
 *   await store.consumePermit(permitStoreKey('org_1', jti), ttlMs, {
 *     stream: verificationStream('org_1'),                           // verifications:{org_1}
 *     fields: { permit_id: jti },
 *   });
 */

export function permitStoreKey(org: string, jti: string): string {
  return `permit:{${checkedOrg(org)}}:${checkedPart('jti', jti)}`;
}

export function verificationStream(org: string): string {
  return `verifications:{${checkedOrg(org)}}`;
}

/** Braces would move the hash tag and could make two organizations share keys. */
function checkedOrg(org: string): string {
  return checkedPart('org', org);
}

function checkedPart(what: string, value: string): string {
  if (typeof value !== 'string' || value.length === 0 || /[{}]/.test(value)) {
    throw new RangeError(`${what} must be a non-empty string without braces`);
  }
  return value;
}

/**
 * The organization's replay-state epoch (see SharedStore.ensureEpoch): in the `{org}` slot, so the
 * consume script reads it beside the permit's marker.
 */
export function replayEpochKey(org: string): string {
  return `epoch:{${checkedOrg(org)}}`;
}
