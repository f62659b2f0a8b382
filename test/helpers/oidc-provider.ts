/**
 * A real OpenID Provider for tests (oidc-provider, in process, on loopback over plain http): the
 * accounts and clients the test gives, the authorization code flow with PKCE (S256, required), and
 * ID tokens that carry the Countersign claims (`org_id`, `role`) and `email` when the scope
 * `openid email countersign` (OIDC_SCOPE) is requested.
 *
 * Signing in is oidc-provider's own development login page (GET /interaction/:uid), which a
 * browser test fills in: `input[name="login"]` (the account's sub), `input[name="password"]`
 * (any non-empty value; passwords are not checked) and the button "Sign-in". Its consent page never
 * appears: every requested scope is granted (loadExistingGrant). Unlike oidc-provider's own
 * development login, which accepts any name, a name that is not in `accounts` is refused: the
 * login form is shown again and the name is added to `refusedLogins`.
 *
 * @example
 *   const op = await startOidcProvider({
 *     accounts: { alice: { email: 'alice@example.com', org_id: orgId, role: 'approver' } },
 *     clients: [{ client_id: 'console', client_secret: 's3cret', redirect_uris: [`${rp}/callback`] }],
 *   });
 *   t.teardown(() => op.close());
 *   const token = await op.signAccessToken('alice', { audience: 'countersign' }); // for API tests
 */
import { randomBytes } from 'node:crypto';
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import { exportJWK, generateKeyPair, SignJWT } from 'jose';
import { closeServer, listen } from './loopback.js';

/** The scope a relying party requests to get every claim the provider has into the ID token. */
export const OIDC_SCOPE = 'openid email countersign';

/** An account's claims besides `sub` (its key in `accounts`). */
export interface OidcAccount {
  email?: string;
  org_id?: string;
  role?: string;
}

export interface OidcClient {
  client_id: string;
  /** Without one the client is public (`token_endpoint_auth_method: 'none'`). */
  client_secret?: string;
  redirect_uris: string[];
  /** With a secret: `client_secret_basic` unless given (openid-client: ClientSecretBasic). */
  token_endpoint_auth_method?: 'client_secret_basic' | 'client_secret_post';
}

export interface TestOidcProvider {
  /** `http://127.0.0.1:<port>`, no trailing slash; discovery at `${issuer}/.well-known/openid-configuration`. */
  issuer: string;
  jwksUrl: string;
  /** Names submitted on the login form that are not accounts, in order. */
  refusedLogins: string[];
  /** A JWT access token for `sub` (its claims, `iss` = issuer), signed with the provider's key. */
  signAccessToken(sub: string, options: { audience: string; expiresIn?: string | number }): Promise<string>;
  /** Stops the server, keep-alive connections included. */
  close(): Promise<void>;
}

/* The little of oidc-provider's API used here (it ships no type declarations). */
interface Grant {
  addOIDCScope(scope: string): void;
  addOIDCClaims(claims: string[]): void;
  save(): Promise<string>;
}
interface ProviderContext {
  oidc: {
    provider: Provider;
    client: { clientId: string };
    session: { accountId?: string; grantIdFor(clientId: string): string | undefined };
    result?: { consent?: { grantId?: string } };
    requestParamOIDCScopes: Set<string>;
    requestParamClaims: Set<string>;
  };
}
/** Koa's context, as far as the login check uses it. */
interface KoaContext {
  method: string;
  path: string;
  req: IncomingMessage;
  res: ServerResponse;
  status: number;
  redirect(url: string): void;
}
interface Provider {
  Grant: { new (init: { accountId: string | undefined; clientId: string }): Grant; find(id: string): Promise<Grant | undefined> };
  Client: { find(id: string): Promise<unknown> };
  callback(): (req: IncomingMessage, res: ServerResponse) => void;
  use(middleware: (ctx: KoaContext, next: () => Promise<void>) => Promise<void>): void;
  interactionDetails(req: IncomingMessage, res: ServerResponse): Promise<{ uid: string; prompt: { name: string } }>;
  interactionResult(req: IncomingMessage, res: ServerResponse, result: unknown, options: { mergeWithLastSubmission: boolean }): Promise<string>;
}
type ProviderClass = new (issuer: string, configuration: Record<string, unknown>) => Provider;

/** oidc-provider's notices about the development features used on purpose here. */
const DEV_NOTICE = /oidc-provider WARNING: a quick start development-only (feature devInteractions|in-memory adapter)/;

/** Runs `fn` (synchronous) with those notices dropped from console.warn; anything else still prints. */
function withoutDevNotices<T>(fn: () => T): T {
  const { warn } = console;
  console.warn = (...args: unknown[]) => {
    if (typeof args[0] === 'string' && DEV_NOTICE.test(args[0])) return;
    warn.apply(console, args);
  };
  try {
    return fn();
  } finally {
    console.warn = warn;
  }
}

async function readForm(req: IncomingMessage): Promise<URLSearchParams> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of req as AsyncIterable<Buffer>) {
    size += chunk.length;
    if (size > 64 * 1024) throw new Error('login form too large');
    chunks.push(chunk);
  }
  return new URLSearchParams(Buffer.concat(chunks).toString('utf8'));
}

/** A small error page of our own: the default one imports a web font and prints a notice. */
function renderError(ctx: { type: string; body: string }, out: Record<string, string>): void {
  const escape = (s: string) => s.replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);
  ctx.type = 'html';
  ctx.body = `<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>Sign-in error</title></head><body><main><h1>Sign-in error</h1>${Object.entries(out)
    .map(([key, value]) => `<p><strong>${escape(key)}</strong>: ${escape(String(value))}</p>`)
    .join('')}</main></body></html>`;
}

/**
 * `port`: where to listen (default: any free port), for a test whose relying party must name the
 * issuer before the provider starts. `accounts` is read at each sign-in, so it may be filled later.
 */
export async function startOidcProvider({ accounts, clients, port = 0 }: { accounts: Record<string, OidcAccount>; clients: OidcClient[]; port?: number }): Promise<TestOidcProvider> {
  // Not a static import: oidc-provider has no type declarations, and a computed specifier types as any.
  const specifier = 'oidc-provider';
  const { default: Provider } = (await import(specifier)) as { default: ProviderClass };
  const isAccount = (sub: string | undefined): sub is string => sub !== undefined && Object.hasOwn(accounts, sub);

  // Listen first, so the issuer (which holds the port) is known when the Provider is built; the
  // handler is attached right after, before anyone can know the port.
  const server = createServer();
  const issuer = await listen(server, port);

  // Our own signing key (RS256, oidc-provider's default ID token algorithm) instead of its
  // development keys: no warning, and signAccessToken can use the same key.
  const kid = `test-${randomBytes(4).toString('hex')}`;
  const { privateKey } = await generateKeyPair('RS256', { extractable: true });
  const jwk = { ...(await exportJWK(privateKey)), kid, alg: 'RS256', use: 'sig' };

  const configuration = {
    clients: clients.map(({ client_id, client_secret, redirect_uris, token_endpoint_auth_method }) => ({
      client_id,
      redirect_uris,
      // 'web' (the default) accepts http redirect_uris for the code flow; only implicit-flow web
      // clients must use https and not localhost (lib/helpers/client_schema.js).
      application_type: 'web',
      response_types: ['code'],
      grant_types: ['authorization_code'],
      ...(client_secret === undefined
        ? { token_endpoint_auth_method: 'none' }
        : { client_secret, token_endpoint_auth_method: token_endpoint_auth_method ?? 'client_secret_basic' }),
    })),
    jwks: { keys: [jwk] },
    // A claim is released for a scope listed here; `countersign` becomes a supported scope by being a key.
    claims: { openid: ['sub'], email: ['email'], countersign: ['org_id', 'role'] },
    // Put the scope's claims into the ID token too, not only into the userinfo answer: the console
    // reads them from the ID token.
    conformIdTokenClaims: false,
    async findAccount(_ctx: unknown, sub: string) {
      // undefined for an unknown sub: oidc-provider then treats the account as not found.
      if (!isAccount(sub)) return undefined;
      const claims = accounts[sub];
      return { accountId: sub, claims: async () => ({ sub, ...claims }) };
    },
    // The development login and consent pages at /interaction/:uid (login checked below).
    features: { devInteractions: { enabled: true } },
    pkce: { required: () => true },
    // Skipping consent (oidc-provider's documented way): the grant holds every scope and claim the
    // request asks for, so the consent prompt finds nothing missing and only the login form remains.
    async loadExistingGrant(ctx: ProviderContext) {
      const { oidc } = ctx;
      const grantId = oidc.result?.consent?.grantId ?? oidc.session.grantIdFor(oidc.client.clientId);
      const grant = (grantId ? await oidc.provider.Grant.find(grantId) : undefined) ??
        new oidc.provider.Grant({ accountId: oidc.session.accountId, clientId: oidc.client.clientId });
      grant.addOIDCScope([...oidc.requestParamOIDCScopes].join(' '));
      grant.addOIDCClaims([...oidc.requestParamClaims]);
      await grant.save();
      return grant;
    },
    // Explicit lifetimes (seconds): with the defaults, oidc-provider prints a notice per kind.
    ttl: { AccessToken: 600, IdToken: 600, Interaction: 600, Session: 3600, Grant: 3600 },
    renderError,
    // Not needed for plain http on loopback, by reading its source: cookies get `Secure` only
    // when the request is https (ctx.secure), and `proxy` is only for X-Forwarded-* headers
    // behind a TLS-terminating proxy, which there is none of here.
  };

  const provider = withoutDevNotices(() => new Provider(issuer, configuration));
  // Fails here, not at the first request, when a client's metadata is invalid.
  for (const client of clients) await provider.Client.find(client.client_id);

  const refusedLogins: string[] = [];
  // The login form's submission, handled here instead of by the development interactions, which
  // accept any name: a name that is not an account gets the login form again (303 back to it).
  provider.use(async (ctx, next) => {
    const uid = ctx.method === 'POST' ? /^\/interaction\/([^/]+)$/.exec(ctx.path)?.[1] : undefined;
    if (uid === undefined) return next();
    const details = await provider.interactionDetails(ctx.req, ctx.res).catch(() => undefined);
    // No interaction (expired, no cookie) or not the login prompt: the provider's own handling.
    if (details?.uid !== uid || details.prompt.name !== 'login') return next();
    const form = await readForm(ctx.req);
    const login = form.get('login') ?? '';
    ctx.status = 303;
    if (!isAccount(login) || !form.get('password')) {
      refusedLogins.push(login);
      ctx.redirect(ctx.path);
      return;
    }
    ctx.redirect(await provider.interactionResult(ctx.req, ctx.res, { login: { accountId: login } }, { mergeWithLastSubmission: false }));
  });
  server.on('request', provider.callback());

  return {
    issuer,
    jwksUrl: `${issuer}/jwks`,
    refusedLogins,
    async signAccessToken(sub, { audience, expiresIn = '10m' }) {
      if (!isAccount(sub)) throw new Error(`no account ${sub}`);
      return new SignJWT({ ...accounts[sub] })
        .setProtectedHeader({ alg: 'RS256', kid })
        .setSubject(sub)
        .setIssuer(issuer)
        .setAudience(audience)
        .setIssuedAt()
        .setExpirationTime(expiresIn)
        .sign(privateKey);
    },
    close: () => closeServer(server),
  };
}
