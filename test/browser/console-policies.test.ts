/**
 * The console's "Policies and webhooks" page in a real browser (Debian's Chromium, driven by
 * playwright-core), against a real authority and a real OpenID provider on loopback:
 *
 * - state is prepared through the API with the acme admin key: a second policy version (the
 *   example policy with a comment line), a webhook subscription, one delivery dead-lettered by a
 *   real worker pass (its target resolves to loopback, which the default configuration refuses
 *   at connect time) and one left pending; and a second subscription whose test delivery a real
 *   receiver on loopback answered 204;
 * - an administrator (ada) sees the current version, both versions newest first, a line diff of a
 *   draft against the current text (the changed line as `-`/`+` with "removed"/"added" in words),
 *   a broken draft's problem with its path and line, a good draft said valid; the subscription,
 *   its deliveries filtered to the dead letter, and Replay taking it back to pending, as the API
 *   then reports it too; the delivered delivery says so and what the receiver answered, with no
 *   "last error" (a success is not an error), as does the delivery not yet attempted;
 * - the same page fits a 375-pixel phone with a long line in the diff;
 * - a viewer (vic: policy:read) sees the policy and its versions, and is told that validating
 *   needs policy:write and that webhooks need webhooks:write;
 * - each view has no serious accessibility violation (axe-core), raises no console error or CSP
 *   violation and loads nothing from elsewhere.
 *
 * `npm run docs:console` runs it with UPDATE_CONSOLE_SCREENSHOTS=1, which also writes
 * docs/console/policies.png.
 */
import t, { type Test } from 'tap';
import { request } from 'undici';
import { parseAuthorityConfig } from '../../authority/config.js';
import { deliveryAgent } from '../../authority/webhooks/targets.js';
import { startWebhookWorker } from '../../authority/webhooks/worker.js';
import { createLogger } from '../../shared/logging.js';
import { PolicyResponse } from '../../shared/wire/policies.js';
import { WebhookDeliveryWire, WebhookSubscriptionWire } from '../../shared/wire/webhooks.js';
import { appBackends } from '../helpers/backends.js';
import { BROWSER_NOT_RUN_REASON, chromiumPath, launchBrowser, newPage, type TestPage } from '../helpers/browser.js';
import { checkPage, screenshot, signIn, withConsole, type Setup } from '../helpers/console-harness.js';
import type { Harness } from '../helpers/proxy-harness.js';
import { startReceiver } from '../helpers/webhook-receiver.js';

const COMMENT = '# console test: version 2 adds this comment';
const DRAFT_COMMENT = '# console test: a draft changes this comment';

/** A call with the acme admin key (every scope); throws unless it answers 200. */
async function admin(h: Harness, method: 'GET' | 'POST' | 'PUT', path: string, body?: unknown): Promise<unknown> {
  const headers: Record<string, string> = { authorization: `Bearer ${h.authority.acmeAdmin}` };
  if (body !== undefined) headers['content-type'] = 'application/json';
  const response = await request(`${h.authorityUrl}${path}`, { method, headers, ...(body !== undefined ? { body: JSON.stringify(body) } : {}) });
  const text = await response.body.text();
  if (response.statusCode !== 200) throw new Error(`${method} ${path} answered ${response.statusCode}: ${text}`);
  return JSON.parse(text) as unknown;
}

const deliveriesOf = async (h: Harness, subscriptionId: string) =>
  WebhookDeliveryWire.array().parse(((await admin(h, 'POST', '/v1/webhooks', { action: 'list_deliveries', subscription_id: subscriptionId })) as { deliveries: unknown }).deliveries);

interface Prepared {
  /** The example policy with COMMENT on top: version 2, the current one. */
  source: string;
  hookId: string;
  deadId: string;
  pendingId: string;
  /** The test delivery of a second subscription, which the receiver answered 204. */
  deliveredId: string;
}

/** One worker pass, with deliveries to any host name going to 127.0.0.1 (allowed there only when `allowPrivate`). */
async function workerPass(h: Harness, allowPrivate: boolean) {
  const agent = deliveryAgent({ allowPrivate, resolve: (_host, _options, callback) => callback(null, [{ address: '127.0.0.1', family: 4 }]) });
  const worker = startWebhookWorker(
    {
      db: h.authority.backend.db,
      box: h.authority.secrets,
      clock: h.clock,
      metrics: h.authority.metrics,
      config: parseAuthorityConfig({}).webhooks,
      logger: createLogger({ name: 'webhooks', level: 'silent' }),
      dispatcher: agent,
    },
    { timer: false },
  );
  try {
    return await worker.runOnce();
  } finally {
    await worker.stop();
    await agent.close();
  }
}

/** Two policy versions, a subscription, a dead letter and a pending delivery, all through the API (and one worker pass). */
async function prepare(t: Test, h: Harness): Promise<Prepared> {
  const first = PolicyResponse.parse(await admin(h, 'GET', '/v1/policies'));
  const source = `${COMMENT}\n${first.policy?.source ?? ''}`;
  const second = PolicyResponse.parse(await admin(h, 'PUT', '/v1/policies', { source, format: 'yaml' }));
  t.equal(second.policy?.version, 2, 'a second policy version is stored');

  // A public-looking name: the URL is accepted, and the worker below is told it resolves to
  // loopback, which the default configuration refuses when connecting. One attempt: a dead letter.
  const created = (await admin(h, 'POST', '/v1/webhooks', {
    action: 'create',
    name: 'audit-sink',
    url: 'https://hooks.example.com/countersign',
    event_types: ['policy.updated'],
    max_attempts: 1,
    timeout_seconds: 1,
  })) as { subscription: unknown };
  const hook = WebhookSubscriptionWire.parse(created.subscription);
  const { delivery_id: deadId } = (await admin(h, 'POST', '/v1/webhooks', { action: 'test', id: hook.id })) as { delivery_id: string };
  t.match(await workerPass(h, false), { sent: 1, failed: 1, deadLettered: 1 }, 'the worker pass dead-letters the test delivery');

  // A receiver that answers 204, behind a public-looking name that this worker pass sends to loopback.
  const receiver = await startReceiver();
  t.teardown(() => receiver.close());
  const received = (await admin(h, 'POST', '/v1/webhooks', {
    action: 'create',
    name: 'ops-receiver',
    url: `http://receiver.example.com:${new URL(receiver.url).port}/hooks`,
    event_types: ['policy.updated'],
  })) as { subscription: unknown };
  const deliveredHook = WebhookSubscriptionWire.parse(received.subscription);
  const { delivery_id: deliveredId } = (await admin(h, 'POST', '/v1/webhooks', { action: 'test', id: deliveredHook.id })) as { delivery_id: string };
  t.match(await workerPass(h, true), { sent: 1, failed: 0 }, 'the receiver takes the second subscription\'s test delivery');
  t.equal(receiver.received.length, 1);
  t.match((await deliveriesOf(h, deliveredHook.id))[0], { id: deliveredId, status: 'delivered', last_status_code: 204 }, 'the API reports it delivered, with the 204');

  h.clock.advance(1_000); // the next delivery is the newer one
  const { delivery_id: pendingId } = (await admin(h, 'POST', '/v1/webhooks', { action: 'test', id: hook.id })) as { delivery_id: string };
  const deliveries = await deliveriesOf(h, hook.id);
  t.same(
    deliveries.map((delivery) => [delivery.id, delivery.status]),
    [
      [pendingId, 'pending'],
      [deadId, 'dead_lettered'],
    ],
    'the API lists a pending delivery and a dead letter',
  );
  return { source, hookId: hook.id, deadId, pendingId, deliveredId };
}

async function openPolicies(setup: Setup, tested: TestPage): Promise<void> {
  await tested.page.goto(`${setup.h.authorityUrl}/console/policies`);
  await tested.page.getByTestId('policy-version').first().waitFor();
}

const deliveryRow = (tested: TestPage, id: string) => tested.page.locator(`[data-testid="delivery-row"][data-id="${id}"]`);

// A browser, an authority, a proxy and an identity provider, on both backends: longer than
// .taprc's two minutes per file on a busy 2-core machine.
t.setTimeout(6 * 60_000);

if (!chromiumPath()) {
  t.comment(`the console's browser tests did not run: ${BROWSER_NOT_RUN_REASON}`);
} else {
  for (const [backendIndex, backend] of appBackends().entries()) {
    t.test(`the console's policies and webhooks page: versions, diff, validation, a dead letter replayed, on ${backend.name}`, (t) =>
      withConsole(
        t,
        backend,
        async (setup) => {
          const { h } = setup;
          const prepared = await prepare(t, h);
          const browser = await launchBrowser(t);

          // An administrator, at a desk.
          const desk = await newPage(browser);
          const { page } = desk;
          await signIn(setup, desk, 'ada');
          await page.getByRole('link', { name: 'Policies and webhooks' }).click();
          await page.getByTestId('policy-version').first().waitFor();
          t.equal(await page.title(), 'Policies and webhooks · Countersign console');
          t.same(await page.getByTestId('policy-version').evaluateAll((items) => items.map((item) => item.getAttribute('data-version'))), ['2', '1'], 'the versions, newest first');
          t.match(await page.getByTestId('policy-version').first().textContent(), /Version 2 current/, 'the newest is marked current in words');
          t.equal(await page.getByTestId('policy-current-version').textContent(), '2', 'the current version');
          t.match(await page.getByTestId('policy-created-by').textContent(), /\S/, 'who stored it');
          t.equal(await page.getByTestId('policy-source').textContent(), prepared.source, 'its source, as stored');

          // A broken draft: the problem with its path and line, as the API gives them.
          const draft = page.getByLabel('Draft policy');
          t.equal(await draft.inputValue(), prepared.source, 'the draft starts as the current text');
          await draft.fill(`${prepared.source}\nnot_a_key: 1\n`);
          await page.getByTestId('validate').click();
          await page.locator('[data-testid="validation-result"][data-valid="false"]').waitFor();
          const problems = await page.getByTestId('validation-problem').allTextContents();
          t.equal(problems.length, 1, 'one problem');
          t.match(problems[0], /not_a_key.*line \d+, column 1.*unknown key/, 'with its path, line and message');

          // A good draft: valid; and its changes from the current version.
          await draft.fill(prepared.source.replace(COMMENT, DRAFT_COMMENT));
          await page.getByTestId('validate').click();
          await page.locator('[data-testid="validation-result"][data-valid="true"]').waitFor();
          t.match(await page.getByTestId('validation-result').textContent(), /^Valid/, 'a good draft is valid');
          await page.getByTestId('compare').click();
          await page.getByTestId('policy-diff').waitFor();
          t.match(await page.getByTestId('diff-summary').textContent(), /From version 2 \(current\) to the draft above: 1 line added, 1 line removed\./, 'the diff says what changed');
          t.same(
            await page.getByTestId('policy-diff').locator('[data-kind="removed"], [data-kind="added"]').allTextContents(),
            [`-removed: ${COMMENT}`, `+added: ${DRAFT_COMMENT}`],
            'the changed line, marked - and + with the words removed and added',
          );
          t.ok((await page.getByTestId('policy-diff').locator('[data-kind="same"]').count()) <= 3, 'with a few unchanged lines around it, the rest folded');

          // Two stored versions: the older one's text is read for the diff.
          await page.getByTestId('compare-from').selectOption('version-1');
          await page.getByTestId('compare-to').selectOption('version-2');
          await page.getByTestId('compare').click();
          await page.getByText('From version 1 to version 2').waitFor();
          t.match(await page.getByTestId('diff-summary').textContent(), /From version 1 to version 2 \(current\): 1 line added, 0 lines removed\./, 'a diff between two stored versions');
          t.same(await page.getByTestId('policy-diff').locator('[data-kind="added"]').allTextContents(), [`+added: ${COMMENT}`], 'the line version 2 added');

          // The webhook, its dead letter, and a replay.
          const hook = page.locator(`[data-testid="webhook-row"][data-id="${prepared.hookId}"]`);
          await deliveryRow(desk, prepared.deadId).waitFor();
          t.match(await hook.getByTestId('webhook-name').textContent(), 'audit-sink');
          t.equal(await hook.getByTestId('webhook-url').textContent(), 'https://hooks.example.com/countersign');
          t.match(await hook.textContent(), /policy\.updated/, 'its events');
          t.equal(await hook.getByTestId('webhook-enabled').textContent(), 'Enabled');
          t.equal(await hook.getByTestId('delivery-row').count(), 2, 'both deliveries are listed');
          t.equal(await deliveryRow(desk, prepared.deadId).getAttribute('data-status'), 'dead_lettered');
          t.match(await deliveryRow(desk, prepared.deadId).getByTestId('delivery-status').textContent(), /Dead letter/, 'the status in words');
          t.match(await deliveryRow(desk, prepared.deadId).getByTestId('delivery-error').textContent(), /private, loopback or link-local/, 'the last error');
          t.match(await deliveryRow(desk, prepared.deadId).textContent(), /Attempts1/, 'the attempts');
          t.equal(await deliveryRow(desk, prepared.pendingId).getByTestId('replay').count(), 0, 'a pending delivery offers no replay');
          t.equal(await deliveryRow(desk, prepared.pendingId).getByTestId('delivery-error').count(), 0, 'nor an error, before any attempt');
          const delivered = deliveryRow(desk, prepared.deliveredId);
          await delivered.waitFor();
          t.equal(await delivered.getByTestId('delivery-status').textContent(), 'Delivered', 'a delivered delivery says so');
          t.equal(await delivered.getByTestId('delivery-answer').textContent(), '204: delivered', 'with what the receiver answered');
          t.equal(await delivered.getByTestId('delivery-error').count(), 0, 'and no "last error": a success is not one');
          t.notMatch(await delivered.textContent(), /Last error/);

          await hook.getByTestId('delivery-filter').selectOption('dead_lettered');
          await deliveryRow(desk, prepared.pendingId).waitFor({ state: 'detached' });
          await deliveryRow(desk, prepared.deadId).waitFor();
          t.equal(await hook.getByTestId('delivery-row').count(), 1, 'filtered to the dead letters');
          await checkPage(t, desk, 'the policies and webhooks page');
          await screenshot(page, 'policies', backendIndex);

          await deliveryRow(desk, prepared.deadId).getByTestId('replay').click();
          await hook.getByTestId('replay-outcome').waitFor();
          t.match(await hook.getByTestId('replay-outcome').textContent(), /Replayed the webhook\.test delivery: it is now pending/, 'the page says what the API answered');
          await hook.getByTestId('deliveries-empty').waitFor();
          t.match(await hook.getByTestId('deliveries-empty').textContent(), /No dead letters/, 'and the refreshed list has no dead letter left');
          const replayed = (await deliveriesOf(h, prepared.hookId)).find((delivery) => delivery.id === prepared.deadId);
          t.match(replayed, { status: 'pending', dead_lettered_at: null }, 'the API reports the delivery pending again');
          await hook.getByTestId('delivery-filter').selectOption('all');
          await page.locator(`[data-testid="delivery-row"][data-id="${prepared.deadId}"][data-status="pending"]`).waitFor();
          t.equal(await deliveryRow(desk, prepared.deadId).getByTestId('replay').count(), 0, 'and offers no replay any more');
          await checkPage(t, desk, 'the policies and webhooks page after a replay');

          // The same on a phone, with a line longer than the screen in the diff.
          const phone = await newPage(browser, { width: 375 });
          await signIn(setup, phone, 'ada');
          await openPolicies(setup, phone);
          await phone.page.getByLabel('Draft policy').fill(prepared.source.replace(COMMENT, `# ${'a-very-long-comment-'.repeat(20)}`));
          await phone.page.getByTestId('compare').click();
          await phone.page.getByTestId('policy-diff').waitFor();
          await deliveryRow(phone, prepared.deadId).waitFor();
          await checkPage(t, phone, 'the policies and webhooks page on a phone', true);

          // A viewer: the policy, and which permissions the rest needs.
          const viewer = await newPage(browser);
          await signIn(setup, viewer, 'vic');
          await openPolicies(setup, viewer);
          t.equal(await viewer.page.getByTestId('policy-version').count(), 2, 'a viewer sees the versions');
          t.match(await viewer.page.getByTestId('policy-source').textContent(), COMMENT, 'and the current text');
          t.equal(await viewer.page.getByTestId('validate').count(), 0, 'but is offered no Validate');
          t.match(await viewer.page.getByTestId('validate-permission').textContent(), /policy:write/, 'and is told it needs policy:write');
          t.match(await viewer.page.getByTestId('webhooks-permission').textContent(), /webhooks:write/, 'webhooks: told they need webhooks:write');
          t.equal(await viewer.page.getByTestId('webhook-row').count(), 0, 'and shown none');
          await viewer.page.getByLabel('Draft policy').fill(prepared.source.replace(COMMENT, DRAFT_COMMENT));
          await viewer.page.getByTestId('compare').click();
          await viewer.page.getByTestId('policy-diff').waitFor();
          t.match(await viewer.page.getByTestId('diff-summary').textContent(), /1 line added, 1 line removed/, 'a viewer may still compare a draft');
          await checkPage(t, viewer, 'the policies and webhooks page for a viewer');
        },
        { accounts: { ada: 'admin' } },
      ),
    );
  }
}
