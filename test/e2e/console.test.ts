/**
 * The console in a real browser (Debian's Chromium, driven by playwright-core), against a real
 * authority, proxy and upstream and a real OpenID provider, all on loopback:
 *
 * - a payment is held; an approver signs in with the identity provider, approves it in the inbox;
 *   the fresh evaluation gives allow and a permit, and the proxy forwards the payment once;
 * - the person who asked for it signs in too: the inbox says why they may not approve, and the API
 *   refuses their session's vote;
 * - an escalation that needs 2 of 3 treasurers needs two different people: the first one's vote
 *   leaves it pending (and the page says they have voted), the second's approves it;
 * - each page has no serious accessibility violation (axe-core), raises no console error or CSP
 *   violation, loads nothing from elsewhere, and fits a 375-pixel-wide phone.
 *
 * `npm run docs:console` runs it with UPDATE_CONSOLE_SCREENSHOTS=1, which also writes the
 * screenshots of docs/console.md into docs/console/.
 */
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import t, { type Test } from 'tap';
import type { Page } from 'playwright-core';
import { request } from 'undici';
import { loadConsoleFiles } from '../../authority/console/static.js';
import { ConsoleSignedIn } from '../../shared/wire/console.js';
import { EvaluateResponse } from '../../shared/wire/evaluate.js';
import { appBackends } from '../helpers/backends.js';
import { BROWSER_NOT_RUN_REASON, checkAccessibility, chromiumPath, launchBrowser, newPage, type TestPage } from '../helpers/browser.js';
import { OIDC_SCOPE, startOidcProvider, type OidcAccount, type TestOidcProvider } from '../helpers/oidc-provider.js';
import { call, type Harness, withHarness } from '../helpers/proxy-harness.js';
import { repoPath } from '../helpers/repo.js';
import { freePort } from '../support/servers.mjs';

const CLIENT_ID = 'countersign-console';
const SCREENSHOTS = process.env['UPDATE_CONSOLE_SCREENSHOTS'] === '1' ? repoPath('docs', 'console') : null;

/** Writes docs/console/<name>.png when screenshots are asked for (once: from the first backend). */
async function screenshot(page: Page, name: string, backendIndex: number): Promise<void> {
  if (SCREENSHOTS === null || backendIndex !== 0) return;
  mkdirSync(SCREENSHOTS, { recursive: true });
  await page.screenshot({ path: join(SCREENSHOTS, `${name}.png`), fullPage: true });
}
const AUDIENCE = 'countersign';

interface Setup {
  h: Harness;
  op: TestOidcProvider;
  proxyUrl: string;
  /** Bearer JWTs from the provider, for the API calls a person's tools would make. */
  tokenOf(sub: string): Promise<string>;
}

const wire = (amount: number, approvals?: string[]) => ({
  action_type: 'payments.wire',
  actor_id: 'finance-bot',
  context: { environment: 'production', amount_usd: amount, account_code: 'OPS-001', ...(approvals ? { approvals } : {}) },
});

async function evaluate(setup: Setup, sub: string, body: unknown): Promise<EvaluateResponse> {
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

/** An authority whose console signs people in with a real OpenID provider, a proxy and an upstream. */
async function withConsole(t: Test, backend: ReturnType<typeof appBackends>[number], fn: (setup: Setup) => Promise<void>): Promise<void> {
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
      for (const [sub, role] of [['alice', 'approver'], ['bob', 'approver'], ['carol', 'approver'], ['vic', 'viewer']] as const) {
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
        console: { oidc: { client_id: CLIENT_ID, scopes: OIDC_SCOPE.split(' ') } },
      },
    },
  );
}

/**
 * Signs `sub` in through the identity provider's login page; resolves on the inbox. What the
 * provider's own page loaded (a web font) is not the console's: the list starts again after it.
 */
async function signIn(setup: Setup, tested: TestPage, sub: string): Promise<void> {
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

const item = (page: Page, id: string) => page.locator(`[data-testid="inbox-item"][data-id="${id}"]`);

/** What every page must be: accessible, quiet, self-contained; at a phone's width, no sideways scroll. */
async function checkPage(t: Test, tested: TestPage, what: string, phone = false): Promise<void> {
  t.same(await checkAccessibility(tested.page), [], `${what}: no serious accessibility violation`);
  t.same(tested.errors, [], `${what}: no console error, uncaught exception or CSP violation`);
  t.same(tested.externalRequests, [], `${what}: nothing loaded from another origin`);
  if (phone) {
    const width = await tested.page.evaluate(() => (globalThis as unknown as { document: { documentElement: { scrollWidth: number } } }).document.documentElement.scrollWidth);
    t.ok(width <= 375, `${what}: fits 375 pixels (scroll width ${width})`);
  }
}

/** The session the browser context holds, as the console reads it. */
async function sessionOf(tested: TestPage, base: string): Promise<ConsoleSignedIn> {
  return ConsoleSignedIn.parse(await (await tested.context.request.get(`${base}/console/api/session`)).json());
}

if (!chromiumPath()) {
  t.comment(`the console's browser tests did not run: ${BROWSER_NOT_RUN_REASON}`);
} else {
  for (const [backendIndex, backend] of appBackends().entries()) {
    t.test(`the console: hold → an approver approves in the inbox → allow → the proxy forwards once, on ${backend.name}`, (t) =>
      withConsole(t, backend, async (setup) => {
        const { h } = setup;
        const browser = await launchBrowser(t);
        const held = await evaluate(setup, 'bob', wire(50_000));
        t.match(held, { decision: 'hold', human_approval_status: 'pending' });
        const id = held.approval_request_id as string;

        const signInPage = await newPage(browser, { width: 375 });
        await signInPage.page.goto(`${h.authorityUrl}/console/`);
        await signInPage.page.getByTestId('sign-in-oidc').waitFor();
        await checkPage(t, signInPage, 'the sign-in page', true);
        await screenshot(signInPage.page, 'sign-in', backendIndex);

        // The requester: the page says why not, and the API refuses the session's vote.
        const requester = await newPage(browser);
        await signIn(setup, requester, 'bob');
        await item(requester.page, id).getByTestId('vote-blocked-reason').waitFor();
        t.match(await item(requester.page, id).getByTestId('vote-blocked-reason').textContent(), /You asked for this action/, 'the requester is told why they may not approve');
        t.equal(await item(requester.page, id).getByTestId('approve').count(), 0, 'and is offered no button');
        const bob = await sessionOf(requester, h.authorityUrl);
        t.equal(bob.identity, 'user:bob');
        const refused = await requester.context.request.post(`${h.authorityUrl}/v1/approvals/${id}/resolve`, {
          headers: { 'x-csrf-token': bob.csrf_token, 'content-type': 'application/json' },
          data: { decision: 'approve' },
        });
        t.equal(refused.status(), 403, 'the API refuses the requester');
        await checkPage(t, requester, 'the inbox (requester)');
        await screenshot(requester.page, 'inbox-requester', backendIndex);

        // The approver, on a phone.
        const approver = await newPage(browser, { width: 375 });
        await signIn(setup, approver, 'alice');
        const card = item(approver.page, id);
        await card.waitFor();
        t.match(await card.textContent(), /payments\.wire/, 'the inbox shows the action type');
        t.match(await card.textContent(), /finance-bot/, 'its actor');
        t.match(await card.textContent(), /50,000|50000/, 'and the amount it is bound to');
        t.match(await card.textContent(), /bob/, 'and who asked');
        await checkPage(t, approver, 'the inbox on a phone', true);
        await screenshot(approver.page, 'inbox-phone', backendIndex);
        await card.getByTestId('vote-note').fill('checked with treasury');
        await card.getByTestId('approve').click();
        await approver.page.getByTestId('vote-outcome').first().waitFor();
        t.match(await approver.page.getByTestId('vote-outcome').first().textContent(), /approved/i, 'the page shows the request approved');
        await checkPage(t, approver, 'the inbox after a vote', true);

        const approval = await request(`${h.authorityUrl}/v1/approvals/${id}`, { headers: { authorization: `Bearer ${await setup.tokenOf('carol')}` } });
        t.match(await approval.body.json(), { approval: { status: 'approved', resolved_by: 'user:alice', note: 'checked with treasury' } }, 'the approval is on record as alice\'s, with her note');

        const allowed = await evaluate(setup, 'bob', wire(50_000, [id]));
        t.match(allowed, { decision: 'allow', human_approval_status: 'approved' }, 'the fresh evaluation gives allow');
        const pay = () => call(setup.proxyUrl, '/wires', { token: allowed.permit_token as string, actor: 'finance-bot', body: JSON.stringify({ amount_usd: 50_000, account_code: 'OPS-001' }) });
        t.equal((await pay()).status, 201, 'the permit takes the payment through the proxy');
        t.match((await pay()).json(), { error: 'permit_rejected', reason: 'PERMIT_ALREADY_USED' }, 'once');
        t.equal(h.upstream.received.length, 1, 'the upstream received it once');
      }),
    );

    t.test(`the console: a 2-of-3 escalation needs two different people, on ${backend.name}`, (t) =>
      withConsole(t, backend, async (setup) => {
        const { h } = setup;
        const browser = await launchBrowser(t);
        const escalated = await evaluate(setup, 'bob', wire(2_000_000));
        t.match(escalated, { decision: 'escalate' });
        const id = escalated.escalation_id as string;

        const first = await newPage(browser);
        await signIn(setup, first, 'alice');
        await item(first.page, id).getByTestId('approve').click();
        await first.page.getByTestId('vote-outcome').first().waitFor();
        t.match(await first.page.getByTestId('vote-outcome').first().textContent(), /pending/i, 'one vote of the two needed leaves it pending');
        await first.page.reload();
        await item(first.page, id).getByTestId('vote-blocked-reason').waitFor();
        t.match(await item(first.page, id).getByTestId('vote-blocked-reason').textContent(), /already voted/, 'the first approver cannot vote again');
        t.equal(await item(first.page, id).getByTestId('vote').count(), 1, 'the inbox lists the vote');
        await checkPage(t, first, 'an escalation in the inbox');
        await screenshot(first.page, 'inbox-escalation', backendIndex);

        const viewer = await newPage(browser);
        await signIn(setup, viewer, 'vic');
        t.match(await viewer.page.getByTestId('inbox-empty').or(viewer.page.locator('.notice')).first().textContent(), /./, 'a viewer sees the inbox');

        const second = await newPage(browser, { width: 375 });
        await signIn(setup, second, 'carol');
        await item(second.page, id).getByTestId('approve').click();
        await second.page.getByTestId('vote-outcome').first().waitFor();
        t.match(await second.page.getByTestId('vote-outcome').first().textContent(), /approved/i, 'the second approver\'s vote reaches the quorum');
        await checkPage(t, second, 'the inbox after the deciding vote', true);

        const allowed = await evaluate(setup, 'bob', wire(2_000_000, [id]));
        t.match(allowed, { decision: 'allow' }, 'the fresh evaluation gives allow');
        t.ok(allowed.permit_token, 'with a permit');
      }),
    );
  }
}
