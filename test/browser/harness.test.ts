/**
 * The harness the web console's browser tests stand on, pinned end to end on loopback: a real
 * OpenID Provider (test/helpers/oidc-provider.ts), a tiny relying party that signs users in with
 * openid-client (authorization code flow with PKCE, state and nonce), and the system's Chromium
 * (test/helpers/browser.ts). An account fills in the provider's login form and lands on the relying
 * party's callback, which shows the ID token's sub, org_id and role on a page served with a strict
 * CSP (`script-src 'self'`); axe checks that page without violating the CSP, and no console error
 * or CSP violation occurs. A name that is not an account gets the login form again and never
 * reaches the callback (that one runs at phone width). An access token the provider helper mints
 * verifies against the provider's JWKS. Waiting is on browser events (load, URL); no sleeps, no
 * timing assertions. Without Chromium the browser tests say why they did not run.
 *
 * @example
 *   node test/run.mjs --disable-coverage test/browser/harness.test.ts
 */
import { randomUUID } from 'node:crypto';
import { createServer } from 'node:http';
import { createRemoteJWKSet, jwtVerify } from 'jose';
import t from 'tap';
import * as oidc from 'openid-client';
import type { Page } from 'playwright-core';
import { BROWSER_NOT_RUN_REASON, checkAccessibility, chromiumPath, launchBrowser, newPage } from '../helpers/browser.js';
import { closeServer, listen } from '../helpers/loopback.js';
import { OIDC_SCOPE, startOidcProvider, type OidcAccount, type TestOidcProvider } from '../helpers/oidc-provider.js';

const ORG_ID = randomUUID();
const ACCOUNTS: Record<string, OidcAccount> = {
  alice: { email: 'alice@example.com', org_id: ORG_ID, role: 'approver' },
  bob: { email: 'bob@example.com', org_id: ORG_ID, role: 'viewer' },
};
const CLIENT = { client_id: 'countersign-console', client_secret: randomUUID() };
const STRICT_CSP = "default-src 'self'; script-src 'self'";

const escapeHtml = (value: unknown) => String(value).replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);

interface RelyingParty {
  url: string;
  /** Every request that reached /callback, as its path and query. */
  callbacks: string[];
  /** Sign-ins that failed at the callback (token exchange, ID token checks). */
  failures: string[];
  /** Points /login and /callback at the provider (it needs the callback URL first, so this comes after). */
  connect(provider: TestOidcProvider): Promise<void>;
  close(): Promise<void>;
}

/**
 * The relying party: GET /login starts the authorization code flow (PKCE S256, state, nonce;
 * remembered by state), GET /callback finishes it and answers a page showing the ID token's claims.
 */
async function startRelyingParty(): Promise<RelyingParty> {
  let config: oidc.Configuration | undefined;
  const pending = new Map<string, { verifier: string; nonce: string }>();
  const callbacks: string[] = [];
  const failures: string[] = [];
  const page = (status: number, title: string, body: string) =>
    [status, `<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><title>${escapeHtml(title)}</title></head><body><main><h1>${escapeHtml(title)}</h1>${body}</main></body></html>`] as const;

  const server = createServer((req, res) => {
    const url = new URL(req.url ?? '/', rp.url);
    const answer = async (): Promise<readonly [number, string] | { location: string } | undefined> => {
      if (!config) throw new Error('the relying party is not connected to a provider');
      if (url.pathname === '/login') {
        const verifier = oidc.randomPKCECodeVerifier();
        const state = oidc.randomState();
        const nonce = oidc.randomNonce();
        pending.set(state, { verifier, nonce });
        const location = oidc.buildAuthorizationUrl(config, {
          redirect_uri: `${rp.url}/callback`,
          scope: OIDC_SCOPE,
          code_challenge: await oidc.calculatePKCECodeChallenge(verifier),
          code_challenge_method: 'S256',
          state,
          nonce,
        });
        return { location: location.href };
      }
      if (url.pathname === '/callback') {
        callbacks.push(`${url.pathname}${url.search}`);
        const state = url.searchParams.get('state') ?? '';
        const checks = pending.get(state);
        pending.delete(state);
        if (!checks) throw new Error(`callback with an unknown state: ${url.search}`);
        const tokens = await oidc.authorizationCodeGrant(config, url, {
          pkceCodeVerifier: checks.verifier,
          expectedState: state,
          expectedNonce: checks.nonce,
          idTokenExpected: true,
        });
        const claims = tokens.claims();
        if (!claims) throw new Error('no ID token');
        const rows = ['sub', 'org_id', 'role', 'email']
          .map((name) => `<dt>${name}</dt><dd id="claim-${name}">${escapeHtml(claims[name] ?? '')}</dd>`)
          .join('');
        return page(200, 'Signed in', `<dl>${rows}</dl>`);
      }
      return undefined;
    };
    answer().then(
      (result) => {
        if (result === undefined) res.writeHead(url.pathname === '/favicon.ico' ? 204 : 404).end();
        else if ('location' in result) res.writeHead(302, { location: result.location }).end();
        else res.writeHead(result[0], { 'content-type': 'text/html; charset=utf-8', 'content-security-policy': STRICT_CSP }).end(result[1]);
      },
      (err: unknown) => {
        failures.push(err instanceof Error ? `${err.name}: ${err.message}` : String(err));
        const [status, html] = page(500, 'Sign-in failed', '<p>The sign-in could not be completed.</p>');
        res.writeHead(status, { 'content-type': 'text/html; charset=utf-8', 'content-security-policy': STRICT_CSP }).end(html);
      },
    );
  });
  const rp: RelyingParty = {
    url: await listen(server),
    callbacks,
    failures,
    async connect(provider) {
      // allowInsecureRequests: the provider is plain http on loopback.
      config = await oidc.discovery(new URL(provider.issuer), CLIENT.client_id, CLIENT.client_secret, oidc.ClientSecretBasic(CLIENT.client_secret), {
        execute: [oidc.allowInsecureRequests],
      });
    },
    close: () => closeServer(server),
  };
  return rp;
}

/** Fills in the provider's development login form and submits it; resolves when the next page has loaded. */
async function signIn(page: Page, login: string, landsOn: (url: URL) => boolean): Promise<void> {
  await page.locator('input[name="login"]').fill(login);
  await page.locator('input[name="password"]').fill('any password');
  await Promise.all([page.waitForURL(landsOn), page.getByRole('button', { name: 'Sign-in' }).click()]);
}

async function shownClaims(page: Page): Promise<Record<string, string | null>> {
  const claims: Record<string, string | null> = {};
  for (const name of ['sub', 'org_id', 'role', 'email']) claims[name] = await page.locator(`#claim-${name}`).textContent();
  return claims;
}

const rp = await startRelyingParty();
t.teardown(() => rp.close());
const provider = await startOidcProvider({ accounts: ACCOUNTS, clients: [{ ...CLIENT, redirect_uris: [`${rp.url}/callback`] }] });
t.teardown(() => provider.close());
await rp.connect(provider);
const atCallback = (url: URL) => url.href.startsWith(`${rp.url}/callback?`);
const atProvider = (url: URL) => url.href.startsWith(`${provider.issuer}/interaction/`);
// Launched before the first t.test: tap ends the file once its subtests are done, and a subtest
// created after an await that outlasts them would come too late.
const browser = chromiumPath() ? await launchBrowser(t) : undefined;

t.test('an access token minted for an account verifies against the provider JWKS', async (t) => {
  const token = await provider.signAccessToken('alice', { audience: 'countersign' });
  const { payload } = await jwtVerify(token, createRemoteJWKSet(new URL(provider.jwksUrl)), { issuer: provider.issuer, audience: 'countersign' });
  t.match(payload, { sub: 'alice', org_id: ORG_ID, role: 'approver', email: 'alice@example.com' });
});

if (!browser) {
  t.comment(`browser sign-in tests did not run: ${BROWSER_NOT_RUN_REASON}`);
} else {
  t.test('a known account signs in and sees its claims from the ID token, on a page axe finds accessible under a strict CSP', async (t) => {
    const callbacksBefore = rp.callbacks.length;
    const { page, errors } = await newPage(browser);
    await page.goto(`${rp.url}/login`);
    t.ok(atProvider(new URL(page.url())), '/login leads to the provider');
    t.equal(await page.locator('input[name="login"]').count(), 1, "the provider's login form is shown");

    await signIn(page, 'alice', atCallback);
    t.same(rp.failures, [], 'the relying party completed the sign-in (code exchange, state, nonce, PKCE)');
    t.equal(rp.callbacks.length, callbacksBefore + 1, 'the callback was reached once');
    t.equal(await page.title(), 'Signed in');
    t.same(await shownClaims(page), { sub: 'alice', org_id: ORG_ID, role: 'approver', email: 'alice@example.com' }, "alice's claims, from the ID token");

    t.same(await checkAccessibility(page), [], 'no serious or critical accessibility violations on the page under the strict CSP');
    t.same(errors, [], 'no console errors, uncaught exceptions or CSP violations (the axe check included)');
  });

  t.test('a name that is not an account cannot sign in; the login form comes back and still works', async (t) => {
    const callbacksBefore = rp.callbacks.length;
    const { page, errors } = await newPage(browser, { width: 375 });
    await page.goto(`${rp.url}/login`);
    const loginForm = page.url();
    t.ok(atProvider(new URL(loginForm)), '/login leads to the provider');

    // The refusal answers 303 back to the same URL, so wait for the next page load, not a URL.
    const reloaded = page.waitForEvent('load');
    await page.locator('input[name="login"]').fill('mallory');
    await page.locator('input[name="password"]').fill('any password');
    await Promise.all([reloaded, page.getByRole('button', { name: 'Sign-in' }).click()]);
    t.same(provider.refusedLogins, ['mallory'], 'the provider refused the unknown name');
    t.equal(page.url(), loginForm, 'the browser is back on the same login page');
    t.equal(await page.locator('input[name="login"]').count(), 1, 'with the login form');
    t.equal(rp.callbacks.length, callbacksBefore, 'the callback was never reached');

    await signIn(page, 'bob', atCallback);
    t.same(rp.failures, [], 'the relying party completed the sign-in');
    t.same(await shownClaims(page), { sub: 'bob', org_id: ORG_ID, role: 'viewer', email: 'bob@example.com' }, "bob's claims");
    t.same(errors, [], 'no console errors, uncaught exceptions or CSP violations');
  });
}
