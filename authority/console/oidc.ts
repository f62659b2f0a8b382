/**
 * Signing in to the console with the identity provider of `auth.jwt`: the authorization code flow
 * with PKCE, state and nonce (`openid-client`). What the flow must remember between the redirect
 * out and the redirect back (the PKCE verifier, state, nonce) travels in a short-lived cookie
 * sealed with the authority's secret key, so any replica can finish a sign-in another one started.
 * The person is read from the ID token with the same claim names as the API's user tokens.
 *
 * @example
 *   const oidc = new ConsoleOidc({ issuer, clientId: 'countersign-console', scopes: ['openid', 'email'], claims }, secrets, clock);
 *   const { url, sealedState } = await oidc.start(redirectUri);          // send the browser to url
 *   const person = await oidc.finish(callbackUrl, sealedState, redirectUri); // { userId, organizationId, role, email }
 */
import type * as OpenIdClient from 'openid-client';
import { ROLES, type Role } from '../../shared/wire/session.js';
import type { SecretBox } from '../signing/secret-box.js';
import type { Clock } from '../time.js';

/** How long a sign-in may take between leaving for the identity provider and coming back. */
export const SIGN_IN_WINDOW_SECONDS = 600;

export interface ConsoleOidcOptions {
  /** auth.jwt.issuer. */
  issuer: string;
  clientId: string;
  /** Absent for a public client (PKCE alone). */
  clientSecret?: string | undefined;
  scopes: readonly string[];
  /** auth.jwt.claims: where the user, organization, role and email are in a token. */
  claims: { user: string; organization: string; role: string; email: string };
}

export interface SignedInPerson {
  userId: string;
  organizationId: string;
  /** null when the token names no role we know: signed in, allowed nothing. */
  role: Role | null;
  email: string | null;
}

/** Why a sign-in did not complete; `code` goes to the sign-in page, `message` to the log. */
export class ConsoleSignInError extends Error {
  constructor(
    readonly code: 'identity_provider_unavailable' | 'identity_provider_refused' | 'sign_in_expired' | 'sign_in_failed' | 'token_incomplete',
    message: string,
    options?: { cause?: unknown },
  ) {
    super(message, options);
    this.name = 'ConsoleSignInError';
  }
}

interface PendingSignIn {
  verifier: string;
  state: string;
  nonce: string;
  startedAtMs: number;
}

/** Loaded on the first sign-in: an authority without console.oidc (and every CLI command) never pays for it. */
let loaded: Promise<typeof OpenIdClient> | undefined;
const openIdClient = (): Promise<typeof OpenIdClient> => (loaded ??= import('openid-client'));

/** Plain http is accepted only for an issuer on this machine (development, tests). */
function isLoopbackHttp(url: URL): boolean {
  return url.protocol === 'http:' && ['127.0.0.1', 'localhost', '[::1]'].includes(url.hostname);
}

export class ConsoleOidc {
  #configuration: Promise<OpenIdClient.Configuration> | undefined;

  constructor(
    private readonly options: ConsoleOidcOptions,
    private readonly secrets: SecretBox,
    private readonly clock: Clock,
  ) {}

  /** The provider's metadata, discovered on first use; a failed discovery is tried again next time. */
  #discover(): Promise<OpenIdClient.Configuration> {
    if (!this.#configuration) {
      const issuer = new URL(this.options.issuer);
      this.#configuration = openIdClient()
        .then((client) => {
          const auth = this.options.clientSecret === undefined ? client.None() : client.ClientSecretBasic(this.options.clientSecret);
          return client.discovery(issuer, this.options.clientId, undefined, auth, isLoopbackHttp(issuer) ? { execute: [client.allowInsecureRequests] } : undefined);
        })
        .catch((error: unknown) => {
          this.#configuration = undefined;
          throw new ConsoleSignInError('identity_provider_unavailable', `the identity provider's metadata could not be read: ${(error as Error).message}`, { cause: error });
        });
    }
    return this.#configuration;
  }

  async start(redirectUri: string): Promise<{ url: URL; sealedState: string }> {
    const configuration = await this.#discover();
    const client = await openIdClient();
    const pending: PendingSignIn = {
      verifier: client.randomPKCECodeVerifier(),
      state: client.randomState(),
      nonce: client.randomNonce(),
      startedAtMs: this.clock.now(),
    };
    const url = client.buildAuthorizationUrl(configuration, {
      redirect_uri: redirectUri,
      scope: this.options.scopes.join(' '),
      code_challenge: await client.calculatePKCECodeChallenge(pending.verifier),
      code_challenge_method: 'S256',
      state: pending.state,
      nonce: pending.nonce,
    });
    return { url, sealedState: this.secrets.seal(JSON.stringify(pending)) };
  }

  async finish(callbackUrl: URL, sealedState: string | undefined, redirectUri: string): Promise<SignedInPerson> {
    const pending = this.#open(sealedState);
    const providerError = callbackUrl.searchParams.get('error');
    if (providerError !== null) {
      throw new ConsoleSignInError('identity_provider_refused', `the identity provider answered ${providerError}: ${callbackUrl.searchParams.get('error_description') ?? ''}`);
    }
    const configuration = await this.#discover();
    const client = await openIdClient();
    // openid-client compares the callback's location with the redirect URI it sent.
    const current = new URL(redirectUri);
    current.search = callbackUrl.search;
    let tokens;
    try {
      tokens = await client.authorizationCodeGrant(configuration, current, {
        pkceCodeVerifier: pending.verifier,
        expectedState: pending.state,
        expectedNonce: pending.nonce,
        idTokenExpected: true,
      });
    } catch (error) {
      throw new ConsoleSignInError('sign_in_failed', `the sign-in could not be completed: ${(error as Error).message}`, { cause: error });
    }
    return this.#person(tokens.claims() ?? {});
  }

  #open(sealedState: string | undefined): PendingSignIn {
    if (sealedState === undefined) throw new ConsoleSignInError('sign_in_expired', 'no sign-in was started from this browser, or it took too long');
    let pending: PendingSignIn;
    try {
      pending = JSON.parse(this.secrets.open(sealedState).toString('utf8')) as PendingSignIn;
    } catch (error) {
      throw new ConsoleSignInError('sign_in_failed', 'the sign-in state cookie could not be opened', { cause: error });
    }
    if (this.clock.now() - pending.startedAtMs > SIGN_IN_WINDOW_SECONDS * 1000) {
      throw new ConsoleSignInError('sign_in_expired', 'the sign-in took longer than it may');
    }
    return pending;
  }

  #person(claims: Record<string, unknown>): SignedInPerson {
    const names = this.options.claims;
    const userId = claims[names.user];
    const organizationId = claims[names.organization];
    if (typeof userId !== 'string' || userId === '') throw new ConsoleSignInError('token_incomplete', `the ID token has no "${names.user}" claim`);
    if (typeof organizationId !== 'string' || organizationId === '') {
      throw new ConsoleSignInError('token_incomplete', `the ID token has no "${names.organization}" claim (ask for it with console.oidc.scopes)`);
    }
    const role = claims[names.role];
    const email = claims[names.email];
    return {
      userId,
      organizationId,
      role: typeof role === 'string' && (ROLES as readonly string[]).includes(role) ? (role as Role) : null,
      email: typeof email === 'string' ? email : null,
    };
  }
}
