/**
 * Turns the credential on a request into a `Principal`, or refuses with 401 (no valid
 * credential) / 403 (a key used from outside its allowlist). Accepts `Authorization: Bearer`
 * with an API key or a user JWT, the deprecated `X-Service-Key` header while it is enabled, and,
 * when neither is sent, the console's session cookie: then every request that is not a GET, HEAD
 * or OPTIONS must carry the session's CSRF token in `X-CSRF-Token` (403 otherwise).
 *
 * @example
 *   const authenticate = createAuthenticator({ db, credentials, jwt, clock, xServiceKeyEnabled: true, metrics });
 *   const principal = await authenticate({ headers: request.headers, ip: request.ip, onDeprecatedHeader });
 */
import type { IncomingHttpHeaders } from 'node:http';
import { CountersignError } from '../../shared/errors.js';
import { CSRF_HEADER } from '../../shared/wire/console.js';
import { findApiKeyBySecret, getApiKey, recordApiKeyUse, type ApiKey } from '../api-keys/keys.js';
import { hashApiKeySecret, isApiKeySecret } from '../api-keys/secret.js';
import type { AuthorityMetrics } from '../metrics.js';
import { readCookie } from '../console/cookies.js';
import { csrfTokenMatches, findConsoleSession, SECURE_SESSION_COOKIE, SESSION_COOKIE } from '../console/sessions.js';
import { findOrganization, type Organization } from '../orgs/organizations.js';
import type { Db } from '../store/db.js';
import type { Clock } from '../time.js';
import { compileAllowlist } from './cidr.js';
import type { CredentialCache } from './credential-cache.js';
import { JwksUnavailableError, JwtRejectedError, looksLikeJwt, type JwtVerifier } from './jwt.js';
import type { Principal } from './principal.js';
import { permissionsOf } from './roles.js';

export interface AuthenticatorOptions {
  db: Db;
  /** Keys and organizations already looked up, so most requests need no query. */
  credentials: Pick<CredentialCache, 'lookup'>;
  clock: Clock;
  jwt: JwtVerifier | null;
  xServiceKeyEnabled: boolean;
  metrics: AuthorityMetrics;
}

export interface CredentialSource {
  headers: IncomingHttpHeaders;
  ip: string;
  /** The request's method: a console session needs the CSRF token on all but GET, HEAD and OPTIONS. Unknown counts as unsafe. */
  method?: string;
  /** Called when the deprecated X-Service-Key header carried the credential. */
  onDeprecatedHeader(): void;
  /**
   * Called before the credential costs real work (a database lookup on a cache miss, a JWT
   * signature check); it may throw to refuse first. The guard refuses there an address already
   * over its failure limit, so a flood of unknown keys stops costing queries, while a key already
   * in the cache still works from that address.
   */
  beforeLookup?(): void;
}

export type Authenticator = (source: CredentialSource) => Promise<Principal>;

/** Methods that change nothing, so a console session needs no CSRF token for them. */
const SAFE_METHODS = new Set(['GET', 'HEAD', 'OPTIONS']);

/** The console session cookie's token: the `__Host-` one (set over TLS) first. */
export function consoleSessionToken(headers: IncomingHttpHeaders): string | undefined {
  return readCookie(headers.cookie, SECURE_SESSION_COOKIE) ?? readCookie(headers.cookie, SESSION_COOKIE);
}

/** last_used_at is written at most this often per key, to keep a write off most requests. */
const LAST_USED_RESOLUTION_MS = 60_000;

export function createAuthenticator(options: AuthenticatorOptions): Authenticator {
  const { db, credentials, clock, jwt, metrics } = options;
  const lastUsedWritten = new Map<string, number>();

  const refuse = (reason: string, message: string): never => {
    metrics.authFailures.inc({ reason });
    // RFC 9110: a 401 names the scheme it wants. Every credential this API takes can be sent as a bearer token.
    throw new CountersignError('unauthorized', message, { headers: { 'www-authenticate': 'Bearer' } });
  };

  /** The Authorization or X-Service-Key credential; null when neither header was sent. */
  function extract(source: CredentialSource): string | null {
    const authorization = source.headers.authorization;
    if (authorization !== undefined) {
      const match = /^Bearer +(\S+) *$/i.exec(authorization);
      if (!match) return refuse('malformed', 'Authorization must be "Bearer <API key or token>"');
      return match[1] as string;
    }
    const serviceKey = source.headers['x-service-key'];
    if (serviceKey !== undefined) {
      if (!options.xServiceKeyEnabled) {
        return refuse('deprecated_header_disabled', 'X-Service-Key is no longer accepted here; send Authorization: Bearer <API key>');
      }
      source.onDeprecatedHeader();
      metrics.deprecatedHeader.inc({ header: 'x-service-key' });
      const value = Array.isArray(serviceKey) ? serviceKey[0] : serviceKey;
      return (value ?? '').trim();
    }
    return null;
  }

  async function withApiKey(secret: string, source: CredentialSource): Promise<Principal> {
    const { ip } = source;
    const found = await credentials.lookup(`key:${hashApiKeySecret(secret)}`, async () => {
      source.beforeLookup?.();
      return findApiKeyBySecret(db, secret);
    });
    if (!found) return refuse('unknown_key', 'unknown API key');
    return apiKeyPrincipal(found.key, found.org, ip);
  }

  /** The checks every use of a key passes, by secret or through a console session. */
  async function apiKeyPrincipal(key: ApiKey, org: Organization, ip: string): Promise<Principal> {
    const now = clock.now();
    if (key.revokedAt !== null) return refuse('revoked_key', 'API key has been revoked');
    if (key.expiresAt !== null && key.expiresAt.getTime() <= now) return refuse('expired_key', 'API key has expired');
    if (key.allowedCidrs !== null && !compileAllowlist(key.allowedCidrs)(ip)) {
      metrics.authFailures.inc({ reason: 'ip_not_allowed' });
      throw new CountersignError('forbidden', 'this API key may not be used from this address');
    }
    const written = lastUsedWritten.get(key.id) ?? 0;
    if (now - written >= LAST_USED_RESOLUTION_MS) {
      lastUsedWritten.set(key.id, now);
      await recordApiKeyUse(db, key.id, new Date(now));
    }
    return {
      kind: 'api_key',
      org,
      keyId: key.id,
      scopes: key.scopes,
      allowedActors: key.allowedActors,
      permissions: new Set(key.scopes),
      credential: `api_key:${key.id}`,
    };
  }

  async function withJwt(token: string, source: CredentialSource): Promise<Principal> {
    if (!jwt) return refuse('jwt_not_configured', 'user tokens are not accepted: no issuer is configured');
    source.beforeLookup?.();
    let claims;
    try {
      claims = await jwt.verify(token);
    } catch (error) {
      if (error instanceof JwtRejectedError) return refuse('jwt_rejected', error.message);
      if (error instanceof JwksUnavailableError) {
        throw new CountersignError('service_unavailable', 'the identity provider keys could not be loaded', { cause: error });
      }
      throw error;
    }
    const orgId = claims.organizationId;
    const org = /^[0-9a-f-]{36}$/i.test(orgId)
      ? await credentials.lookup(`org:${orgId}`, () => findOrganization(db, orgId))
      : null;
    if (!org) return refuse('unknown_organization', "the token's organization is not known here");
    return {
      kind: 'user',
      org,
      userId: claims.userId,
      email: claims.email,
      role: claims.role,
      expiresAt: claims.expiresAt,
      permissions: claims.role ? permissionsOf(claims.role) : new Set(),
      credential: `user:${claims.userId}`,
    };
  }

  async function withConsoleSession(token: string, source: CredentialSource): Promise<Principal> {
    source.beforeLookup?.();
    const session = await findConsoleSession(db, token, clock.now());
    if (!session) return refuse('console_session_ended', 'the console session has ended: sign in again');
    if (!SAFE_METHODS.has(source.method ?? '') && !csrfTokenMatches(token, source.headers[CSRF_HEADER])) {
      metrics.authFailures.inc({ reason: 'csrf' });
      throw new CountersignError('forbidden', `a console request that changes something must carry the session's ${CSRF_HEADER} header`);
    }
    const org = await credentials.lookup(`org:${session.orgId}`, () => findOrganization(db, session.orgId));
    if (!org) return refuse('unknown_organization', "the session's organization is not known here");
    if (session.method === 'api_key') {
      const key = session.apiKeyId === null ? null : await getApiKey(db, session.orgId, session.apiKeyId);
      if (!key) return refuse('unknown_key', "the session's API key no longer exists");
      return apiKeyPrincipal(key, org, source.ip);
    }
    const userId = session.userId as string;
    return {
      kind: 'user',
      org,
      userId,
      email: session.email,
      role: session.role,
      expiresAt: session.expiresAt,
      permissions: session.role ? permissionsOf(session.role) : new Set(),
      credential: `user:${userId}`,
    };
  }

  return async (source) => {
    const credential = extract(source);
    if (credential === null) {
      const token = consoleSessionToken(source.headers);
      if (token !== undefined) return withConsoleSession(token, source);
      return refuse('missing', 'no credential: send Authorization: Bearer <API key or token>');
    }
    if (isApiKeySecret(credential)) return withApiKey(credential, source);
    if (looksLikeJwt(credential)) return withJwt(credential, source);
    return refuse('malformed', 'credential is neither an API key (ask_live_…/ask_test_…) nor a token');
  };
}
