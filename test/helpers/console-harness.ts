/**
 * The console's browser tests' setting: an authority whose console signs people in with a real
 * OpenID provider (accounts alice, bob and carol, approvers, vic, a viewer, and any more given
 * as `options.accounts`, all in acme), a proxy and an upstream, on loopback; and what every
 * console test does with a page: sign in, check it (accessibility, console errors, other
 * origins, a phone's width), take a screenshot for docs/console.md when
 * UPDATE_CONSOLE_SCREENSHOTS=1 (`npm run docs:console`).
 *
 * @example
 *   withConsole(t, backend, async (setup) => {
 *     const browser = await launchBrowser(t);
 *     const tested = await newPage(browser);
 *     await signIn(setup, tested, 'alice');
 *     await checkPage(t, tested, 'the inbox');
 *   });
 */
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import type { Test } from 'tap';
import type { Page } from 'playwright-core';
import { request } from 'undici';
import { loadConsoleFiles } from '../../authority/console/static.js';
import { ConsoleSignedIn } from '../../shared/wire/console.js';
import { EvaluateResponse } from '../../shared/wire/evaluate.js';
import type { Role } from '../../shared/wire/session.js';
import type { appBackends } from './backends.js';
import { checkAccessibility, type TestPage } from './browser.js';
import { OIDC_SCOPE, startOidcProvider, type OidcAccount, type TestOidcProvider } from './oidc-provider.js';
import { type Harness, withHarness } from './proxy-harness.js';
import { repoPath } from './repo.js';
import { freePort } from '../support/servers.mjs';

export const CLIENT_ID = 'countersign-console';
const SCREENSHOTS = process.env['UPDATE_CONSOLE_SCREENSHOTS'] === '1' ? repoPath('docs', 'console') : null;

/** Writes docs/console/<name>.png when screenshots are asked for (once: from the first backend). */
export async function screenshot(page: Page, name: string, backendIndex: number): Promise<void> {
  if (SCREENSHOTS === null || backendIndex !== 0) return;
  mkdirSync(SCREENSHOTS, { recursive: true });
  await page.screenshot({ path: join(SCREENSHOTS, `${name}.png`), fullPage: true });
}
export const AUDIENCE = 'countersign';

export interface Setup {
  h: Harness;
  op: TestOidcProvider;
  proxyUrl: string;
  /** Bearer JWTs from the provider, for the API calls a person's tools would make. */
  tokenOf(sub: string): Promise<string>;
}

export const wire = (amount: number, approvals?: string[]) => ({
  action_type: 'payments.wire',
  actor_id: 'finance-bot',
  context: { environment: 'production', amount_usd: amount, account_code: 'OPS-001', ...(approvals ? { approvals } : {}) },
});

export async function evaluate(setup: Setup, sub: string, body: unknown): Promise<EvaluateResponse> {
  // The harness's clock stands still, but a browser sign-in takes real seconds, and Redis (whose
  // replay epoch the permit's iat must follow) keeps real time: catch the clock up first.
  setup.h.clock.advance(Math.max(0, Date.now() - setup.h.clock.now()));
  const response = await request(`${setup.h.authorityUrl}/v1/evaluate`, {
    method: 'POST',
    headers: { authorization: `Bearer ${await setup.tokenOf(sub)}`, 'content-type': 'application/json' },
    body: JSON.stringify(body),
  });
  const text = await response.body.text();
  if (response.statusCode !== 200) throw new Error(`evaluate answered ${response.statusCode}: ${text}`);
  return EvaluateResponse.parse(JSON.parse(text));
}

export interface ConsoleOptions {
  /** More accounts in acme, by sub, beside alice, bob, carol (approvers) and vic (viewer): `{ ada: 'admin' }`. */
  accounts?: Readonly<Record<string, Role>>;
  /** Offer the development sign-in with an API key too (`console.api_key_sign_in`). */
  apiKeySignIn?: boolean;
}

/** An authority whose console signs people in with a real OpenID provider, a proxy and an upstream. */
export async function withConsole(
  t: Test,
  backend: ReturnType<typeof appBackends>[number],
  fn: (setup: Setup) => Promise<void>,
  options: ConsoleOptions = {},
): Promise<void> {
  const consoleFiles = loadConsoleFiles();
  if (!consoleFiles) throw new Error('dist/console is missing: npm test builds it (test/build.mjs), or run npm run build');
  // Both URLs are needed before either server starts: the authority names the issuer, the provider the redirect.
  const [authorityPort, providerPort] = [await freePort(), await freePort()];
  const issuer = `http://127.0.0.1:${providerPort}`;
  const accounts: Record<string, OidcAccount> = {};
  await withHarness(
    t,
    backend,
    async (h) => {
      const people: Array<[string, Role]> = [['alice', 'approver'], ['bob', 'approver'], ['carol', 'approver'], ['vic', 'viewer'], ...Object.entries(options.accounts ?? {})];
      for (const [sub, role] of people) {
        accounts[sub] = { email: `${sub}@example.com`, org_id: h.authority.acme.id, role };
      }
      const op = await startOidcProvider({
        port: providerPort,
        accounts,
        clients: [{ client_id: CLIENT_ID, redirect_uris: [`${h.authorityUrl}/console/sign-in/callback`] }],
      });
      t.teardown(() => op.close());
      const proxy = await h.startProxy();
      await fn({ h, op, proxyUrl: proxy.url, tokenOf: (sub) => op.signAccessToken(sub, { audience: AUDIENCE }) });
    },
    {
      port: authorityPort,
      consoleFiles,
      config: {
        auth: { jwt: { issuer, audience: AUDIENCE, jwks_url: `${issuer}/jwks` } },
        console: { oidc: { client_id: CLIENT_ID, scopes: OIDC_SCOPE.split(' ') }, api_key_sign_in: options.apiKeySignIn === true },
      },
    },
  );
}

/**
 * Signs `sub` in through the identity provider's login page; resolves on the inbox. What the
 * provider's own page loaded (a web font) is not the console's: the list starts again after it.
 */
export async function signIn(setup: Setup, tested: TestPage, sub: string): Promise<void> {
  const { page } = tested;
  await page.goto(`${setup.h.authorityUrl}/console/`);
  await page.getByTestId('sign-in-oidc').click();
  await page.locator('input[name="login"]').fill(sub);
  await page.locator('input[name="password"]').fill('any');
  await page.getByRole('button', { name: 'Sign-in' }).click();
  await page.waitForURL(`${setup.h.authorityUrl}/console/`);
  await page.getByTestId('signed-in-as').waitFor();
  tested.externalRequests.length = 0;
}

/** Signs in with an API key through the sign-in page's development form; resolves on the inbox. */
export async function signInWithKey(setup: Setup, tested: TestPage, secret: string): Promise<void> {
  const { page } = tested;
  await page.goto(`${setup.h.authorityUrl}/console/`);
  await page.getByTestId('api-key-input').fill(secret);
  await page.getByTestId('sign-in-api-key').click();
  await page.getByTestId('signed-in-as').waitFor();
}

export const item = (page: Page, id: string) => page.locator(`[data-testid="inbox-item"][data-id="${id}"]`);

/** What every page must be: accessible, quiet, self-contained; at a phone's width, no sideways scroll. */
export async function checkPage(t: Test, tested: TestPage, what: string, phone = false): Promise<void> {
  t.same(await checkAccessibility(tested.page), [], `${what}: no serious accessibility violation`);
  t.same(tested.errors, [], `${what}: no console error, uncaught exception or CSP violation`);
  t.same(tested.externalRequests, [], `${what}: nothing loaded from another origin`);
  if (phone) {
    const width = await tested.page.evaluate(() => (globalThis as unknown as { document: { documentElement: { scrollWidth: number } } }).document.documentElement.scrollWidth);
    t.ok(width <= 375, `${what}: fits 375 pixels (scroll width ${width})`);
  }
}

/** The session the browser context holds, as the console reads it. */
export async function sessionOf(tested: TestPage, base: string): Promise<ConsoleSignedIn> {
  return ConsoleSignedIn.parse(await (await tested.context.request.get(`${base}/console/api/session`)).json());
}
