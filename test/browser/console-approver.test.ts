/**
 * A least-privilege approver in a real browser (Debian's Chromium, driven by playwright-core),
 * against a real authority on loopback: an API key holding exactly the scopes docs/approvals.md
 * names for an approver (approvals:write and hitl:approve, no audit:read) signs in to the console
 * on a phone and
 *
 * - sees the held payment's bound facts (amount, environment, account) and those of an
 *   escalation, with no word of a missing permission, and is offered the vote;
 * - sees who asked by the requesting key's name, not its bare id (the approver may not list keys);
 * - approves the hold (the API then reports it approved by that key) and votes on the
 *   escalation (its vote is listed as theirs);
 * - under a header that takes less than a quarter of the phone's screen, with the page fitting
 *   375 pixels, accessible, and quiet.
 *
 * A link to one approval (`/console/?approval=<id>`, as the MCP gate's hold answers give) marks
 * that item and puts the focus on it; once it was decided, the same link says it no longer waits.
 */
import t from 'tap';
import { request } from 'undici';
import { ApprovalResponse } from '../../shared/wire/approvals.js';
import { EvaluateResponse } from '../../shared/wire/evaluate.js';
import { appBackends } from '../helpers/backends.js';
import { BROWSER_NOT_RUN_REASON, chromiumPath, launchBrowser, newPage } from '../helpers/browser.js';
import { checkPage, item, sessionOf, signInWithKey, wire, withConsole, type Setup } from '../helpers/console-harness.js';

/** What docs/approvals.md says an approver's key needs. */
const APPROVER_SCOPES = ['approvals:write', 'hitl:approve'] as const;
const PHONE_HEIGHT = 740;

async function evaluateWithKey(setup: Setup, key: string, body: unknown): Promise<EvaluateResponse> {
  // The harness's clock stands still while the browser takes real seconds: catch it up first.
  setup.h.clock.advance(Math.max(0, Date.now() - setup.h.clock.now()));
  const response = await request(`${setup.h.authorityUrl}/v1/evaluate`, {
    method: 'POST',
    headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
    body: JSON.stringify(body),
  });
  const text = await response.body.text();
  if (response.statusCode !== 200) throw new Error(`evaluate answered ${response.statusCode}: ${text}`);
  return EvaluateResponse.parse(JSON.parse(text));
}

// A browser, an authority, a proxy and an identity provider, on both backends: longer than
// .taprc's two minutes per file on a busy 2-core machine.
t.setTimeout(6 * 60_000);

if (!chromiumPath()) {
  t.comment(`the console's browser tests did not run: ${BROWSER_NOT_RUN_REASON}`);
} else {
  for (const backend of appBackends()) {
    t.test(`an approver with only ${APPROVER_SCOPES.join(' and ')} sees what they approve, on a phone, on ${backend.name}`, (t) =>
      withConsole(
        t,
        backend,
        async (setup) => {
          const { h } = setup;
          // Two identities of their own: the agent that asks, and the approver.
          const agentKey = await h.authority.key(['evaluate:write']);
          const approverKey = await h.authority.key([...APPROVER_SCOPES]);
          const held = await evaluateWithKey(setup, agentKey, wire(50_000));
          t.equal(held.decision, 'hold');
          const heldId = held.approval_request_id as string;
          const escalated = await evaluateWithKey(setup, agentKey, wire(2_000_000));
          t.equal(escalated.decision, 'escalate');
          const escalationId = escalated.escalation_id as string;

          const browser = await launchBrowser(t);
          const tested = await newPage(browser, { width: 375 });
          await signInWithKey(setup, tested, approverKey);
          const session = await sessionOf(tested, h.authorityUrl);
          t.same([...session.permissions].sort(), [...APPROVER_SCOPES], 'the session holds exactly the approver scopes');
          const { page } = tested;

          const header = await page.locator('header.site-header').boundingBox();
          t.ok(header !== null && header.height < PHONE_HEIGHT / 4, `the header takes less than a quarter of the phone's height (${header?.height} of ${PHONE_HEIGHT} pixels)`);

          const card = item(page, heldId);
          await card.waitFor();
          t.match(await card.locator('[data-fact="amount_usd"]').textContent(), /50,000/, 'the approver sees the amount of the held payment');
          t.equal(await card.locator('[data-fact="environment"]').textContent(), 'production', 'its environment');
          t.equal(await card.locator('[data-fact="account_code"]').textContent(), 'OPS-001', 'and its account');
          t.notMatch(await page.locator('main').textContent(), /audit:read|needs the/, 'and is told of no missing permission');
          // The name comes a moment after the card: the console asks for it once the card shows the id.
          await card.getByText('(the key “test key”)').waitFor();
          t.match(await card.textContent(), /Requested byapi_key:[0-9a-f-]+ \(the key “test key”\)/, 'who asked, by the name of their key');

          const escalationCard = item(page, escalationId);
          await escalationCard.waitFor();
          t.match(await escalationCard.locator('[data-fact="amount_usd"]').textContent(), /2,000,000/, 'an escalation shows its amount too');
          await checkPage(t, tested, 'the inbox of a least-privilege approver on a phone', true);

          await card.getByTestId('approve').click();
          await page.getByTestId('vote-outcome').first().waitFor();
          t.match(await page.getByTestId('vote-outcome').first().textContent(), /approved/i, 'the approver approves the hold');
          const approval = await request(`${h.authorityUrl}/v1/approvals/${heldId}`, { headers: { authorization: `Bearer ${approverKey}` } });
          t.match(ApprovalResponse.parse(await approval.body.json()).approval, { status: 'approved', resolved_by: session.identity }, 'the API has it approved by that key');

          await escalationCard.getByTestId('approve').click();
          await escalationCard.getByTestId('vote').getByText('(the key “test key”)').waitFor();
          t.match(await escalationCard.getByTestId('vote').textContent(), /\(the key “test key”\) \(you\) approved/, 'the escalation lists the vote as theirs, by name');
          await checkPage(t, tested, 'the inbox after both votes', true);
        },
        { apiKeySignIn: true },
      ),
    );

    t.test(`a link to one approval marks it and takes the focus; once decided, the link says so, on ${backend.name}`, (t) =>
      withConsole(
        t,
        backend,
        async (setup) => {
          const { h } = setup;
          const agentKey = await h.authority.key(['evaluate:write']);
          const approverKey = await h.authority.key([...APPROVER_SCOPES]);
          const other = (await evaluateWithKey(setup, agentKey, wire(40_000))).approval_request_id as string;
          const held = (await evaluateWithKey(setup, agentKey, wire(50_000))).approval_request_id as string;

          const browser = await launchBrowser(t);
          const tested = await newPage(browser, { width: 375 });
          await signInWithKey(setup, tested, approverKey);
          const { page } = tested;
          await page.goto(`${h.authorityUrl}/console/?approval=${held}`);
          const card = item(page, held);
          await card.waitFor();
          await page.waitForFunction((id) => (globalThis as unknown as { document: { activeElement: { id?: string } | null } }).document.activeElement?.id === `item-${id}-title`, held);
          t.equal(await card.getAttribute('aria-current'), 'true', 'the linked approval is marked');
          t.equal(await item(page, other).getAttribute('aria-current'), null, 'the other one is not');
          const focused = await page.evaluate(() => (globalThis as unknown as { document: { activeElement: { id?: string } | null } }).document.activeElement?.id);
          t.equal(focused, `item-${held}-title`, "the focus is on the linked approval's title");
          t.equal(await page.getByTestId('linked-missing').count(), 0, 'no word of a missing item');
          await checkPage(t, tested, 'the inbox opened on one approval', true);

          await card.getByTestId('approve').click();
          await page.getByTestId('vote-outcome').first().waitFor();
          await page.goto(`${h.authorityUrl}/console/?approval=${held}`);
          await item(page, other).waitFor();
          await page.getByTestId('linked-missing').waitFor();
          t.match(await page.getByTestId('linked-missing').textContent(), new RegExp(`${held} that the link names does not wait for a decision`), 'once decided, the link says it no longer waits');
          await checkPage(t, tested, 'the inbox opened on a decided approval', true);
        },
        { apiKeySignIn: true },
      ),
    );
  }
}
