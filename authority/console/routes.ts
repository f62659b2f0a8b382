/**
 * The console at /console (docs/console.md): its built pages, and the few endpoints only the
 * console needs: who is signed in, signing in (identity provider, or an API key in development),
 * signing out, and the names of the API keys its pages show by id (identities.ts). Everything the
 * pages show and change goes through the public API, which accepts the session cookie
 * (authority/auth/authenticate.ts).
 *
 * The session cookie is HttpOnly and SameSite=Strict (and Secure, `__Host-` prefixed, over TLS).
 * The cookie that carries a sign-in in progress is SameSite=Lax: the identity provider sends the
 * browser back with a cross-site redirect, on which a Strict cookie would not come along.
 */
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { CountersignError } from '../../shared/errors.js';
import type { ConsoleSession } from '../../shared/wire/console.js';
import { getApiKey } from '../api-keys/keys.js';
import { consoleSessionToken, type Authenticator } from '../auth/authenticate.js';
import { identityOf } from '../auth/identity.js';
import type { Principal } from '../auth/principal.js';
import type { AuthorityConfig } from '../config.js';
import { publicOrigin } from '../http/public-origin.js';
import { findOrganization } from '../orgs/organizations.js';
import type { RateLimiter } from '../ratelimit/limiter.js';
import type { SecretBox } from '../signing/secret-box.js';
import type { Db } from '../store/db.js';
import type { Clock } from '../time.js';
import { readCookie, setCookieHeader } from './cookies.js';
import { consoleIdentityRoutes } from './identities.js';
import { ConsoleOidc, ConsoleSignInError, SIGN_IN_WINDOW_SECONDS } from './oidc.js';
import { createConsoleSession, csrfTokenFor, deleteConsoleSession, findConsoleSession, SECURE_SESSION_COOKIE, SESSION_COOKIE } from './sessions.js';
import { CONSOLE_CSP, CONSOLE_HEADERS, consoleFile, loadConsoleFiles, type ConsoleFiles } from './static.js';

export interface ConsoleRouteDeps {
  config: AuthorityConfig;
  db: Db;
  clock: Clock;
  secrets: SecretBox;
  authenticate: Authenticator;
  limiter: RateLimiter;
  /** The OIDC client's secret (COUNTERSIGN_CONSOLE_CLIENT_SECRET or console.oidc.client_secret_file); absent for a public client. */
  consoleClientSecret?: string | undefined;
  /** The built pages; read from dist/console on first use when not given. */
  consoleFiles?: ConsoleFiles | null;
}

const SIGN_IN_COOKIE = 'countersign_sign_in';
const SIGN_IN_PATH = '/console/sign-in';
const CALLBACK_PATH = '/console/sign-in/callback';
/** Not part of the public API: left out of /openapi.json. */
const HIDDEN = { hide: true } as const;

export function consoleRoutes(app: FastifyInstance, deps: ConsoleRouteDeps): void {
  const { config, db, clock } = deps;
  if (!config.console.enabled) return;
  const oidc =
    config.console.oidc && config.auth.jwt
      ? new ConsoleOidc(
          { issuer: config.auth.jwt.issuer, clientId: config.console.oidc.client_id, clientSecret: deps.consoleClientSecret, scopes: config.console.oidc.scopes, claims: config.auth.jwt.claims },
          deps.secrets,
          clock,
        )
      : null;
  let files: ConsoleFiles | null | undefined = deps.consoleFiles;
  consoleIdentityRoutes(app, { db });

  const secure = (request: FastifyRequest) => request.protocol === 'https';
  const redirectUri = (request: FastifyRequest) => `${publicOrigin(config, request)}${CALLBACK_PATH}`;

  const sessionCookie = (request: FastifyRequest, token: string, maxAgeSeconds: number) =>
    setCookieHeader(secure(request) ? SECURE_SESSION_COOKIE : SESSION_COOKIE, token, { secure: secure(request), sameSite: 'Strict', path: '/', maxAgeSeconds });

  const signedIn = async (request: FastifyRequest, principal: Principal, token: string, method: 'oidc' | 'api_key', expiresAt: Date): Promise<ConsoleSession> => ({
    signed_in: true,
    method,
    identity: principal.kind === 'user' ? `user:${principal.userId}` : await identityOf(db, principal),
    display_name: principal.kind === 'user' ? (principal.email ?? principal.userId) : await keyName(principal.org.id, principal.keyId),
    role: principal.kind === 'user' ? principal.role : null,
    permissions: [...principal.permissions].sort(),
    organization: { id: principal.org.id, name: principal.org.name },
    csrf_token: csrfTokenFor(token),
    expires_at: expiresAt.toISOString(),
  });

  /** How the header names an API-key session: the key's name and display prefix, never its secret. */
  const keyName = async (orgId: string, keyId: string): Promise<string> => {
    const key = await getApiKey(db, orgId, keyId);
    return key ? `API key "${key.name}" (${key.prefix}…)` : `API key ${keyId}`;
  };

  app.addHook('onSend', async (request, reply) => {
    if (!request.url.startsWith('/console')) return;
    reply.headers(CONSOLE_HEADERS);
    if (request.url.startsWith('/console/api/')) reply.header('cache-control', 'no-store');
  });

  // ── Who is signed in ────────────────────────────────────────────────────────────────────────

  app.get('/console/api/session', { config: { access: 'public' }, schema: HIDDEN }, async (request, reply): Promise<ConsoleSession> => {
    const signedOut: ConsoleSession = { signed_in: false, sign_in: { oidc: oidc !== null, api_key: config.console.api_key_sign_in } };
    const token = consoleSessionToken(request.headers);
    if (token === undefined) return signedOut;
    // As the guard does for the API: an address that keeps presenting dead sessions is limited.
    const over = deps.limiter.addresses.refusal(request.ip);
    if (over !== null) return signedOut;
    try {
      const session = await findConsoleSession(db, token, clock.now());
      if (!session) throw new CountersignError('unauthorized', 'the console session has ended');
      // The same checks as every API call with this cookie (a revoked key ends its session).
      const principal = await deps.authenticate({ headers: { cookie: request.headers.cookie }, ip: request.ip, method: 'GET', onDeprecatedHeader: () => undefined });
      return await signedIn(request, principal, token, session.method, session.expiresAt);
    } catch (error) {
      if (!(error instanceof CountersignError) || (error.code !== 'unauthorized' && error.code !== 'forbidden')) throw error;
      deps.limiter.addresses.take(request.ip);
      void reply.header('set-cookie', sessionCookie(request, '', 0));
      return signedOut;
    }
  });

  // ── Signing in and out ──────────────────────────────────────────────────────────────────────

  /**
   * Development sign-in: the key comes as `Authorization: Bearer`, so the guard checks it as it
   * checks any API call (and limits an address that guesses).
   */
  app.post('/console/api/sign-in/api-key', { config: { access: 'authenticated' }, schema: HIDDEN }, async (request, reply) => {
    if (!config.console.api_key_sign_in) throw new CountersignError('not_found', 'signing in to the console with an API key is turned off (console.api_key_sign_in)');
    const principal = request.principal as Principal;
    if (principal.kind !== 'api_key' || request.headers.authorization === undefined) {
      throw new CountersignError('invalid_request', 'send the API key as Authorization: Bearer <key>');
    }
    const ttlMs = config.console.session_minutes * 60_000;
    const { token, expiresAt } = await createConsoleSession(db, { orgId: principal.org.id, method: 'api_key', apiKeyId: principal.keyId }, { nowMs: clock.now(), ttlMs });
    void reply.header('set-cookie', sessionCookie(request, token, ttlMs / 1000));
    return signedIn(request, principal, token, 'api_key', expiresAt);
  });

  app.post('/console/api/sign-out', { config: { access: 'authenticated' }, schema: HIDDEN }, async (request, reply) => {
    const token = consoleSessionToken(request.headers);
    if (token !== undefined) await deleteConsoleSession(db, token);
    return reply.header('set-cookie', sessionCookie(request, '', 0)).code(204).send();
  });

  app.get('/console/sign-in/oidc', { config: { access: 'public' }, schema: HIDDEN }, async (request, reply) => {
    if (!oidc) throw new CountersignError('not_found', 'the console has no identity provider configured (console.oidc)');
    try {
      const { url, sealedState } = await oidc.start(redirectUri(request));
      const cookie = setCookieHeader(SIGN_IN_COOKIE, sealedState, { secure: secure(request), sameSite: 'Lax', path: SIGN_IN_PATH, maxAgeSeconds: SIGN_IN_WINDOW_SECONDS });
      return reply.header('set-cookie', cookie).redirect(url.href, 303);
    } catch (error) {
      return signInFailed(request, reply, error);
    }
  });

  app.get(CALLBACK_PATH, { config: { access: 'public' }, schema: HIDDEN }, async (request, reply) => {
    if (!oidc) throw new CountersignError('not_found', 'the console has no identity provider configured (console.oidc)');
    const clearSignIn = setCookieHeader(SIGN_IN_COOKIE, '', { secure: secure(request), sameSite: 'Lax', path: SIGN_IN_PATH, maxAgeSeconds: 0 });
    void reply.header('set-cookie', clearSignIn);
    try {
      const callback = new URL(request.url, 'http://callback.invalid');
      const person = await oidc.finish(callback, readCookie(request.headers.cookie, SIGN_IN_COOKIE), redirectUri(request));
      const org = /^[0-9a-f-]{36}$/i.test(person.organizationId) ? await findOrganization(db, person.organizationId) : null;
      if (!org) throw new ConsoleSignInError('token_incomplete', `the ID token's organization ${person.organizationId} is not known here`);
      const ttlMs = config.console.session_minutes * 60_000;
      const { token } = await createConsoleSession(
        db,
        { orgId: org.id, method: 'oidc', userId: person.userId, email: person.email, role: person.role },
        { nowMs: clock.now(), ttlMs },
      );
      void reply.header('set-cookie', [clearSignIn, sessionCookie(request, token, ttlMs / 1000)]);
      return reply.redirect('/console/', 303);
    } catch (error) {
      return signInFailed(request, reply, error);
    }
  });

  function signInFailed(request: FastifyRequest, reply: FastifyReply, error: unknown) {
    if (!(error instanceof ConsoleSignInError)) throw error;
    // The message may name the provider's answer; it never holds a code or a token.
    request.log.warn({ code: error.code, reason: error.message }, 'console sign-in failed');
    return reply.redirect(`${SIGN_IN_PATH}?error=${error.code}`, 303);
  }

  // ── The pages ───────────────────────────────────────────────────────────────────────────────

  app.get('/console', { config: { access: 'public' }, schema: HIDDEN }, async (_request, reply) => reply.redirect('/console/', 308));

  app.get('/console/*', { config: { access: 'public' }, schema: HIDDEN }, async (request, reply) => {
    files ??= loadConsoleFiles();
    if (files === null) throw new CountersignError('service_unavailable', 'the console has not been built: run npm run build');
    const path = (request.params as { '*': string })['*'];
    const file = consoleFile(files, path === '' ? 'index.html' : path);
    if (!file) throw new CountersignError('not_found', `no console file ${path}`);
    reply.type(file.contentType);
    reply.header('cache-control', file.immutable ? 'public, max-age=31536000, immutable' : 'no-cache');
    if (file.contentType.startsWith('text/html')) reply.header('content-security-policy', CONSOLE_CSP);
    return reply.send(file.body);
  });
}
