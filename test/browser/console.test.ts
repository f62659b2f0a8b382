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
import t from 'tap';
import { request } from 'undici';
import { appBackends } from '../helpers/backends.js';
import { BROWSER_NOT_RUN_REASON, chromiumPath, launchBrowser, newPage } from '../helpers/browser.js';
import { checkPage, evaluate, item, screenshot, sessionOf, signIn, wire, withConsole } from '../helpers/console-harness.js';
import { call } from '../helpers/proxy-harness.js';

// A browser, an authority, a proxy and an identity provider, on both backends: longer than
// .taprc's two minutes per file on a busy 2-core machine.
t.setTimeout(6 * 60_000);

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
        await signInPage.page.goto(`${h.authorityUrl}/console/no-such-page`);
        await signInPage.page.getByRole('heading', { name: 'Page not found' }).waitFor();
        await checkPage(t, signInPage, 'a page the console does not have', true);

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
        // The inbox is open; a new hold shows up in it without a reload.
        const navigations: string[] = [];
        first.page.on('framenavigated', (frame) => navigations.push(frame.url()));
        const held = await evaluate(setup, 'bob', wire(60_000));
        await item(first.page, held.approval_request_id as string).waitFor();
        t.same(navigations, [], 'a new request appears in the open inbox without a reload');
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
