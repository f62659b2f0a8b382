/**
 * The permit a path names. The @atlasent/sdk passes the permit token where a permit id goes
 * (`GET /v1/permits/{token}`, `…/revoke`, `…/verify`), so a segment shaped like a compact JWS is
 * taken as a token: its signature is verified with the published permit keys and its organization
 * checked before its `jti` is used. An unverified token's `jti` is never trusted, so a forged token
 * can name no permit.
 *
 * @example
 *   const id = await permitIdOf(deps, principal.org.id, request.params.id); // the id, or the token's jti
 */
import { CountersignError } from '../../shared/errors.js';
import { looksLikeCompactJws, signedPermitClaims, type PermitKeyResolver } from '../../shared/permits/signed-claims.js';
import type { PermitClaims } from '../../shared/permits/claims.js';
import type { AuthorityConfig } from '../config.js';
import { ROUTER_MAX_PARAM_LENGTH } from '../http/bounded-input.js';

/** Route config of a route whose `:id` may be a permit token (http/bounded-input.ts). */
export const PERMIT_REF_CONFIG = { maxParamLength: ROUTER_MAX_PARAM_LENGTH } as const;

export interface PermitRefDeps {
  keyResolver: PermitKeyResolver;
  config: Pick<AuthorityConfig, 'permits'>;
}

/** Whether a path segment presents a permit token rather than a permit id. */
export function isPermitToken(ref: string): boolean {
  return looksLikeCompactJws(ref);
}

/**
 * A token's verified claims, or the caller's error: 400 for a token that is not one of ours
 * (malformed, bad signature, unknown key, another issuer or audience), 404 for another
 * organization's (as its id would be), 503 when the keys cannot be read.
 */
export async function verifiedClaimsOf(deps: PermitRefDeps, orgId: string, token: string): Promise<PermitClaims> {
  const signed = await signedPermitClaims(token, {
    keys: deps.keyResolver,
    issuer: deps.config.permits.issuer,
    audience: deps.config.permits.audience,
    orgId,
    // Once per request, off the hot path: the event loop's own check is cheaper than the hop.
    onPool: () => false,
  });
  if (signed.ok) return signed.claims;
  const { refusal } = signed;
  if (refusal.unavailable) throw new CountersignError('service_unavailable', 'the permit signing keys could not be read; retry later');
  if (refusal.code === 'ORG_MISMATCH') throw new CountersignError('not_found', 'no such permit in this organization');
  throw new CountersignError('invalid_request', `the permit token in the path is not acceptable: ${refusal.reason}`, {
    details: [{ path: 'params.id', message: refusal.reason }],
  });
}

/** The permit id a path segment names: the segment itself, or a verified token's `jti`. */
export async function permitIdOf(deps: PermitRefDeps, orgId: string, ref: string): Promise<string> {
  return isPermitToken(ref) ? (await verifiedClaimsOf(deps, orgId, ref)).jti : ref;
}
