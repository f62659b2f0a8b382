/**
 * The console's "Permits and audit" and "Shadow readiness" pages in a real browser (Debian's
 * Chromium, driven by playwright-core), against a real authority, proxy and upstream and a real
 * OpenID provider on loopback:
 *
 * - a payment is allowed with a permit, the proxy forwards it (verification and execution records,
 *   drained into the audit log), the payer reports its effect, and a checkpoint is signed;
 * - an administrator (ada) opens /console/permits?permit=<id>: the story lists the decision, the
 *   permit, the verification, the execution and the effect in that order, each with the sequence
 *   and hash the API's proof gives; the audit chain's head, checkpoint and verification are those
 *   of GET /v1/audit/status (OK, with its checkpoint state); the signed export downloads as the
 *   very bytes the API sent, its events include the permit's, and the page's offline command
 *   (`countersign audit verify … --keys …`, with the keys and checkpoint downloaded from the page)
 *   accepts it; an evaluation id opens the same story, and a denied evaluation says it issued no
 *   permit;
 * - the readiness page first shows no route in shadow mode; then the payments route is switched to
 *   shadow on a proxy, a request without a permit (would-block MISSING_PERMIT) and one with a valid
 *   permit pass through it, and after the drain the page shows the route NOT READY with
 *   MISSING_PERMIT counted; with MISSING_PERMIT expected, it shows what the API then says (seen for
 *   less than the quiet days: still not ready); the switch snippet names the route; quiet days
 *   beyond the window are refused in the form; an MCP route in shadow mode, called through the
 *   MCP gate without a permit, shows its tool under it, NOT READY with MISSING_PERMIT counted, and
 *   the tool's switch snippet sets `mode: enforce` on its entry in the tool table;
 * - a member (permits:read, no audit:read) sees the story but is told the chain's status and the
 *   readiness page need audit:read;
 * - each view has no serious accessibility violation (axe-core), raises no console error or CSP
 *   violation, loads nothing from elsewhere, and fits 375 pixels.
 *
 * `npm run docs:console` runs it with UPDATE_CONSOLE_SCREENSHOTS=1, which also writes
 * docs/console/permit-story.png and docs/console/readiness.png.
 */
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import t, { type Test } from 'tap';
import { request } from 'undici';
import { writeCheckpoints } from '../../authority/audit/checkpoints.js';
import { runAuditCommand } from '../../authority/cli/audit-commands.js';
import { auditKeysFrom } from '../../authority/signing/audit-keys.js';
import { drainVerificationRecords } from '../../authority/verifications/drain.js';
import { AuditBundle, AuditStatusResponse } from '../../shared/wire/audit.js';
import { PermitProofResponse } from '../../shared/wire/permits.js';
import { ReadinessResponse } from '../../shared/wire/readiness.js';
import { appBackends } from '../helpers/backends.js';
import { BROWSER_NOT_RUN_REASON, chromiumPath, launchBrowser, newPage, type TestPage } from '../helpers/browser.js';
import { checkPage, evaluate, screenshot, signIn, wire, withConsole, type Setup } from '../helpers/console-harness.js';
import { startMcpUpstream } from '../helpers/mcp-upstream.js';
import { call, eventually, proxyConfig, type Harness } from '../helpers/proxy-harness.js';

/** A call with the acme admin key (every scope); throws unless it answers `expected`. */
async function admin(h: Harness, method: 'GET' | 'POST', path: string, body?: unknown, expected = 200): Promise<unknown> {
  const headers: Record<string, string> = { authorization: `Bearer ${h.authority.acmeAdmin}` };
  if (body !== undefined) headers['content-type'] = 'application/json';
  const response = await request(`${h.authorityUrl}${path}`, { method, headers, ...(body !== undefined ? { body: JSON.stringify(body) } : {}) });
  const text = await response.body.text();
  if (response.statusCode !== expected) throw new Error(`${method} ${path} answered ${response.statusCode}: ${text}`);
  return JSON.parse(text) as unknown;
}

const drain = (h: Harness) => drainVerificationRecords({ db: h.opened.db, store: h.opened.store, clock: h.clock });

const payment = (amount: number) => JSON.stringify({ amount_usd: amount, account_code: 'OPS-001' });

/** Waits until the gate's records of `permitId` (or of a request without one) include `kind`. */
async function recorded(h: Harness, kind: string, match: (record: { permit_id: string; mode: string; code: string; tool?: string }) => boolean): Promise<void> {
  await eventually(`a ${kind} record`, async () => ((await h.records()).some((record) => record.kind === kind && match(record)) ? true : undefined));
}

interface Story {
  permitId: string;
  /** Allowed, never presented to a gate. */
  unusedPermitId: string;
  evaluationId: string;
  deniedEvaluationId: string;
}

/** An allowed payment through the proxy, drained, its effect reported; a denied one; a checkpoint. */
async function prepareStory(t: Test, setup: Setup): Promise<Story> {
  const { h } = setup;
  const allowed = await evaluate(setup, 'bob', wire(500));
  t.match(allowed, { decision: 'allow' }, 'a small payment is allowed');
  const permitId = allowed.permit_id as string;
  const paid = await call(setup.proxyUrl, '/wires', { token: allowed.permit_token as string, actor: 'finance-bot', body: payment(500) });
  t.equal(paid.status, 201, 'the proxy forwards it');
  await recorded(h, 'execution.observed', (record) => record.permit_id === permitId);
  t.match(await drain(h), { recorded: 2, invalid: 0 }, 'its verification and execution reach the audit log');
  await admin(h, 'POST', '/v1/effects', { permit_id: permitId, status: 'succeeded', summary: 'paid 500 USD to OPS-001', details: { reference: 'wire-42' } }, 201);
  t.match(await drain(h), { recorded: 0 }, 'nothing more to drain');

  const denied = await evaluate(setup, 'bob', { action_type: 'payments.wire', actor_id: 'finance-bot', context: { environment: 'production', account_code: 'OPS-001' } });
  t.match(denied, { decision: 'deny' }, 'a payment without an amount is denied');
  t.notOk(denied.permit_id, 'with no permit');

  const unused = await evaluate(setup, 'bob', wire(20));
  t.match(unused, { decision: 'allow' }, 'another payment is allowed, and its permit never used');

  const signer = await auditKeysFrom(h.authority.keys).signer();
  t.ok((await writeCheckpoints(h.opened.db, signer, h.clock)) >= 1, 'a checkpoint is signed');
  return { permitId, unusedPermitId: unused.permit_id as string, evaluationId: allowed.evaluation_id, deniedEvaluationId: denied.evaluation_id };
}

const steps = (tested: TestPage) => tested.page.getByTestId('story-step');

async function openStory(setup: Setup, tested: TestPage, query: string): Promise<void> {
  await tested.page.goto(`${setup.h.authorityUrl}/console/permits?${query}`);
  await tested.page.getByTestId('permit-story').or(tested.page.getByTestId('evaluation-story')).waitFor();
  await tested.page.getByTestId('audit-verification').or(tested.page.getByTestId('audit-permission')).waitFor();
}

async function checkStory(t: Test, setup: Setup, desk: TestPage, story: Story): Promise<void> {
  const { h } = setup;
  const { page } = desk;
  const proof = PermitProofResponse.parse(await admin(h, 'GET', `/v1/permits/${story.permitId}/proof`));
  t.same(
    proof.events.map((event) => event.type),
    ['evaluation.decided', 'permit.issued', 'permit.verified', 'execution.observed', 'effect.reported'],
    'the proof holds the five events',
  );

  await page.getByTestId('permit-story').waitFor();
  t.equal(await page.getByTestId('permit-story').getAttribute('data-permit'), story.permitId, 'the story is the permit’s');
  t.same(
    await steps(desk).evaluateAll((items) => items.map((item) => item.getAttribute('data-kind'))),
    ['decision', 'permit', 'verification', 'execution', 'effect'],
    'the story: decision, permit, verification, execution, effect, in order',
  );
  t.equal(await page.getByTestId('story-missing').count(), 0, 'no step is missing');
  t.same(await steps(desk).getByTestId('step-hash').allTextContents(), proof.events.map((event) => event.hash), 'each step shows its audit event’s hash');
  t.same(await steps(desk).getByTestId('step-sequence').allTextContents(), proof.events.map((event) => String(event.sequence)), 'and its sequence');
  const texts = await steps(desk).allTextContents();
  t.match(texts[0], /Decision: allow/, 'the decision in words');
  t.match(texts[0], /payments\.wire/, 'with the action');
  t.match(texts[1], /Permit issued/, 'the permit');
  t.match(texts[2], /Verification: verified/, 'the verification');
  t.match(texts[2], /proxy:wire, in enforce mode/, 'by the proxy’s route');
  t.match(texts[3], /The upstream answered with status 201/, 'the execution, with the upstream’s status');
  t.match(texts[4], /Effect reported: succeeded/, 'the effect');
  t.match(texts[4], /paid 500 USD to OPS-001/, 'with its summary');
  t.match(texts[4], /"reference":"wire-42"/, 'and its details');
  t.match(await page.getByTestId('permit-status').textContent(), /Used/, 'the permit is used, in words');

  const status = AuditStatusResponse.parse(await admin(h, 'GET', '/v1/audit/status'));
  t.match(status.verification, { ok: true }, 'the API verifies the chain');
  const verification = page.getByTestId('audit-verification');
  t.equal(await verification.getAttribute('data-ok'), 'true', 'the page says the chain verifies');
  t.equal(await verification.getAttribute('data-checkpoint'), status.verification.checkpoint, `with the checkpoint state the API gives (${status.verification.checkpoint})`);
  t.match(
    await verification.textContent(),
    new RegExp(`OK: sequences ${status.verification.from_sequence} to ${status.verification.to_sequence} \\(${status.verification.events} events\\) verified`),
    'in words, with the range verified',
  );
  t.match(await page.getByTestId('audit-checkpoint-result').textContent(), status.verification.checkpoint === 'matched' ? /agrees with it/ : /./, 'and what the checkpoint says');
  t.equal(await page.getByTestId('audit-head-sequence').textContent(), String(status.head?.sequence), 'the head’s sequence');
  t.equal(await page.getByTestId('audit-head-hash').textContent(), status.head?.hash, 'and hash');
  t.equal(await page.getByTestId('audit-checkpoint-sequence').textContent(), String(status.last_checkpoint?.sequence), 'the last checkpoint');

  await page.getByTestId('verify-again').click();
  await page.locator('[data-testid="verify-again"]:not([disabled])').waitFor();
  t.equal(await verification.getAttribute('data-ok'), 'true', 'verified again: still OK');

  // The downloads, and the offline check the page describes.
  const dir = mkdtempSync(join(tmpdir(), 'countersign-console-audit-'));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  const [download, exported] = await Promise.all([
    page.waitForEvent('download'),
    page.waitForResponse((response) => new URL(response.url()).pathname === '/v1/audit/exports'),
    page.getByTestId('download-export').click(),
  ]);
  const orgId = h.authority.acme.id;
  const from = status.verification.from_sequence;
  const to = status.verification.to_sequence;
  t.equal(download.suggestedFilename(), `countersign-audit-${orgId}-${from}-${to}.json`, 'the export is named after the organization and the range');
  const bundlePath = join(dir, download.suggestedFilename());
  await download.saveAs(bundlePath);
  const bytes = readFileSync(bundlePath);
  t.ok(bytes.equals(await exported.body()), 'the file holds exactly the bytes the API sent');
  const bundle = AuditBundle.parse(JSON.parse(bytes.toString('utf8')));
  t.equal(bundle.org_id, orgId);
  const ids = new Set(bundle.events.map((event) => event.id));
  t.ok(
    proof.events.every((event) => ids.has(event.id)),
    'its events include every event of the permit’s story',
  );
  await page.getByTestId('download-outcome').getByText(/Downloaded countersign-audit-/).waitFor();

  const [keysDownload] = await Promise.all([page.waitForEvent('download'), page.getByTestId('download-keys').click()]);
  const keysPath = join(dir, keysDownload.suggestedFilename());
  await keysDownload.saveAs(keysPath);
  const [checkpointDownload] = await Promise.all([page.waitForEvent('download'), page.getByTestId('download-checkpoint').click()]);
  const checkpointPath = join(dir, checkpointDownload.suggestedFilename());
  await checkpointDownload.saveAs(checkpointPath);
  const command = (await page.getByTestId('verify-command').textContent()) ?? '';
  t.equal(command, `npx countersign audit verify ${download.suggestedFilename()} --keys ${keysDownload.suggestedFilename()}`, 'the page names the offline command and the files');
  const lines: string[] = [];
  const argv = ['verify', bundlePath, '--keys', keysPath, '--checkpoint', checkpointPath];
  t.equal(await runAuditCommand(argv, { out: (line) => lines.push(line) }), 0, 'countersign audit verify accepts the downloads');
  t.match(JSON.parse(lines.join('\n')), { ok: true, checked: { events: status.verification.events } }, 'every event checked');
}

async function checkEvaluations(t: Test, setup: Setup, desk: TestPage, story: Story): Promise<void> {
  const { page } = desk;
  await openStory(setup, desk, `evaluation=${story.evaluationId}`);
  t.match(await page.getByTestId('evaluation-permit').textContent(), new RegExp(`issued permit ${story.permitId}`), 'an evaluation id finds its permit');
  t.equal(await steps(desk).count(), 5, 'and shows the same story');

  await openStory(setup, desk, `evaluation=${story.deniedEvaluationId}`);
  t.match(await page.getByTestId('evaluation-no-permit').textContent(), /issued no permit.*“deny”/, 'a denied evaluation says it issued no permit, and why');
  t.same(await steps(desk).evaluateAll((items) => items.map((item) => item.getAttribute('data-kind'))), ['decision'], 'and shows its decision');
  t.match(await steps(desk).first().textContent(), /Decision: deny.*AMOUNT_REQUIRED/, 'with the policy’s reason');

  await openStory(setup, desk, `permit=${story.unusedPermitId}`);
  t.same(await steps(desk).evaluateAll((items) => items.map((item) => item.getAttribute('data-kind'))), ['decision', 'permit'], 'an unused permit: its decision and issue');
  t.same(
    await page.getByTestId('story-missing').evaluateAll((items) => items.map((item) => item.getAttribute('data-kind'))),
    ['verification', 'execution', 'effect'],
    'then a note for each missing step',
  );
  t.match(await page.getByTestId('story-missing').first().textContent(), /No verification recorded yet/, 'in words');
  t.match(await page.getByTestId('permit-status').textContent(), /Issued, not used yet/, 'and the permit is not used yet');

  // The form: an id typed in opens its story and goes in the query string.
  await page.goto(`${setup.h.authorityUrl}/console/permits`);
  await page.getByLabel('Permit or evaluation id').fill(story.permitId);
  await page.getByTestId('story-open').click();
  await page.locator(`[data-testid="permit-story"][data-permit="${story.permitId}"]`).waitFor();
  t.equal(new URL(page.url()).searchParams.get('permit'), story.permitId, 'the form puts the permit in the query string');
  await page.goBack();
  await page.getByTestId('permit-story').waitFor({ state: 'detached' });
  await page.locator(`[data-testid="recent-permit"][data-id="${story.permitId}"]`).waitFor();
  t.equal(new URL(page.url()).searchParams.get('permit'), null, 'back: the permit is out of the query string');
  t.equal(await page.getByTestId('permit-story').count(), 0, 'no story is shown');
  t.equal(await page.locator(`[data-testid="recent-permit"][data-id="${story.permitId}"]`).count(), 1, 'the recent permits instead, this one among them');
  await page.locator(`[data-testid="recent-permit"][data-id="${story.permitId}"] a`).click();
  await page.locator(`[data-testid="permit-story"][data-permit="${story.permitId}"]`).waitFor();
  t.equal(new URL(page.url()).searchParams.get('permit'), story.permitId, 'a recent permit opens its story, named in the query string');
  t.equal(await page.getByTestId('story-step').count(), 5, 'with its five steps');
  await page.getByRole('navigation').getByRole('link', { name: 'Permits and audit' }).click();
  await page.getByTestId('permit-story').waitFor({ state: 'detached' });
  t.equal(new URL(page.url()).search, '', 'the header’s link to the page clears the story');
}

const route = (tested: TestPage, name: string) => tested.page.locator(`[data-testid="readiness-route"][data-route="${name}"]`);

async function readinessOf(h: Harness, query = ''): Promise<ReadinessResponse> {
  return ReadinessResponse.parse(await admin(h, 'GET', `/v1/gates/readiness${query}`));
}

async function checkReadiness(t: Test, setup: Setup, desk: TestPage, backendIndex: number): Promise<void> {
  const { h } = setup;
  const { page } = desk;
  await page.goto(`${h.authorityUrl}/console/readiness`);
  await page.getByTestId('readiness-empty').waitFor();
  t.match(await page.getByTestId('readiness-empty').textContent(), /No route has been seen in shadow mode in the last 7 days.*docs\/shadow-to-enforce\.md/, 'no route in shadow yet: the empty state');
  await checkPage(t, desk, 'the readiness page, empty');

  // The payments route in shadow mode, on a proxy of its own.
  const shadow = await h.startProxy();
  shadow.setConfig({ ...h.config, routes: h.config.routes.map((entry) => (entry.name === 'wire' ? { ...entry, mode: 'shadow' as const } : entry)) });
  h.clock.advance(Math.max(0, Date.now() - h.clock.now()));
  const unpermitted = await call(shadow.url, '/wires', { actor: 'finance-bot', body: payment(300) });
  t.equal(unpermitted.status, 201, 'shadow mode forwards a request without a permit');
  const allowed = await evaluate(setup, 'bob', wire(300));
  t.equal((await call(shadow.url, '/wires', { token: allowed.permit_token as string, actor: 'finance-bot', body: payment(300) })).status, 201, 'and one with a valid permit');
  await recorded(h, 'permit.rejected', (record) => record.mode === 'shadow' && record.code === 'MISSING_PERMIT');
  await recorded(h, 'permit.verified', (record) => record.mode === 'shadow' && record.permit_id === allowed.permit_id);
  await callMcpToolInShadow(t, h);
  await drain(h);

  const answer = await readinessOf(h);
  const wireRoute = answer.routes.find((entry) => entry.route === 'wire');
  t.match(wireRoute, { ready: false, verified: 1, would_block: 1, by_reason: [{ reason: 'MISSING_PERMIT', count: 1, expected: false }] }, 'the API: not ready, one MISSING_PERMIT');

  await page.getByTestId('readiness-apply').click();
  const card = route(desk, 'wire');
  await card.waitFor();
  t.equal(await card.getAttribute('data-ready'), 'false', 'the route is not ready');
  t.equal(await card.getByTestId('readiness-verdict').textContent(), 'NOT READY', 'in words');
  t.equal(await card.getByTestId('readiness-summary').textContent(), wireRoute?.summary, 'with the API’s summary');
  t.equal(await card.getByTestId('readiness-would-block').textContent(), '1', 'one would-block');
  t.equal(await card.getByTestId('readiness-verified').textContent(), '1', 'one verified');
  const reason = card.locator('[data-testid="readiness-reason"][data-reason="MISSING_PERMIT"]');
  t.equal(await reason.getByTestId('readiness-reason-count').textContent(), '1', 'MISSING_PERMIT counted once');
  t.equal(await reason.getAttribute('data-expected'), 'false', 'not expected');
  t.match(await card.getByTestId('readiness-last-would-block').textContent(), /\d/, 'when the last one happened');
  const snippet = (await card.getByTestId('switch-snippet').textContent()) ?? '';
  t.equal(snippet, 'routes:\n  - name: wire\n    mode: enforce', 'the switch snippet names the route and sets its mode to enforce');
  t.equal(await card.getByTestId('readiness-tool').count(), 0, 'an HTTP route lists no tools');

  const helpdesk = answer.routes.find((entry) => entry.route === 'helpdesk');
  t.match(helpdesk?.tools, [{ tool: 'get_ticket', ready: false, would_block: 1, by_reason: [{ reason: 'MISSING_PERMIT', count: 1 }] }], 'the API: the MCP route’s tool, not ready');
  const tool = route(desk, 'helpdesk').locator('[data-testid="readiness-tool"][data-tool="get_ticket"]');
  t.equal(await tool.getAttribute('data-ready'), 'false', 'the MCP route shows its tool, not ready');
  t.equal(await tool.getByTestId('readiness-tool-verdict').textContent(), 'NOT READY', 'in words');
  t.equal(await tool.getByTestId('readiness-tool-summary').textContent(), helpdesk?.tools[0]?.summary, 'with the API’s summary for the tool');
  t.equal(await tool.getByTestId('readiness-tool-would-block').textContent(), '1', 'one would-block');
  const toolReason = tool.locator('[data-testid="readiness-tool-reason"][data-reason="MISSING_PERMIT"]');
  t.equal(await toolReason.getByTestId('readiness-tool-reason-count').textContent(), '1', 'MISSING_PERMIT counted once');
  await tool.getByText('Switch get_ticket to enforce').click();
  t.equal(
    await tool.getByTestId('switch-tool-snippet').textContent(),
    'routes:\n  - name: helpdesk\n    mcp:\n      tools:\n        - name: get_ticket\n          mode: enforce',
    'the tool’s switch snippet sets mode: enforce on its entry in the tool table',
  );

  // MISSING_PERMIT expected: what the API says then (seen for less than the quiet days).
  await page.getByLabel('Expected refusal codes').fill('MISSING_PERMIT');
  await page.getByTestId('readiness-apply').click();
  await card.locator('[data-testid="readiness-reason"][data-expected="true"]').waitFor();
  t.equal(new URL(page.url()).searchParams.get('expected'), 'MISSING_PERMIT', 'the expected codes go in the query string');
  const expecting = (await readinessOf(h, '?expected=MISSING_PERMIT')).routes.find((entry) => entry.route === 'wire');
  t.match(expecting, { ready: false, summary: /less than 3 days/ }, 'the API: still not ready, seen for less than the quiet days');
  t.equal(await card.getAttribute('data-ready'), String(expecting?.ready), 'the page shows what the API says');
  t.equal(await card.getByTestId('readiness-summary').textContent(), expecting?.summary, 'with its summary');
  t.equal(await card.getByTestId('readiness-verdict').textContent(), 'NOT READY');
  await checkPage(t, desk, 'the readiness page');
  await screenshot(page, 'readiness', backendIndex);

  // Quiet days beyond the window: refused in the form, as the API would.
  await page.getByLabel('Quiet days').fill('10');
  await page.getByTestId('readiness-apply').click();
  t.match(await page.getByTestId('readiness-quietDays-problem').textContent(), /cannot be more than the window \(7 days\)/, 'quiet days beyond the window are refused');
  t.equal(new URL(page.url()).searchParams.get('quiet_days'), '3', 'and not applied');
}

/** An MCP route in shadow mode on a proxy of its own: a tools/call without a permit is forwarded, and recorded as a would-block of its tool. */
async function callMcpToolInShadow(t: Test, h: Harness): Promise<void> {
  const mcp = await startMcpUpstream(t);
  const gate = await h.startProxy({ upstream: mcp.url });
  const helpdesk = { name: 'helpdesk', match: { path: '/mcp' }, mode: 'shadow' as const, mcp: { server: 'helpdesk', tools: [{ name: 'get_ticket' }] } };
  gate.setConfig(proxyConfig(h.authority.acme.id, mcp.url, { routes: [helpdesk] }));
  const response = await request(`${gate.url}/mcp`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream' },
    body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/call', params: { name: 'get_ticket', arguments: { id: 'T-1' } } }),
  });
  await response.body.text();
  t.equal(mcp.executions.get_ticket, 1, 'shadow mode forwards a tool call without a permit');
  await recorded(h, 'permit.rejected', (record) => record.mode === 'shadow' && record.tool === 'get_ticket');
}

// A browser, an authority, a proxy and an identity provider, on both backends: longer than
// .taprc's two minutes per file on a busy 2-core machine.
t.setTimeout(6 * 60_000);

if (!chromiumPath()) {
  t.comment(`the console's browser tests did not run: ${BROWSER_NOT_RUN_REASON}`);
} else {
  for (const [backendIndex, backend] of appBackends().entries()) {
    t.test(`the console's permits and audit page and shadow readiness page, on ${backend.name}`, (t) =>
      withConsole(
        t,
        backend,
        async (setup) => {
          const { h } = setup;
          const story = await prepareStory(t, setup);
          const browser = await launchBrowser(t);

          const desk = await newPage(browser);
          await signIn(setup, desk, 'ada');
          await desk.page.getByRole('link', { name: 'Permits and audit' }).click();
          await desk.page.getByLabel('Permit or evaluation id').waitFor();
          t.equal(await desk.page.title(), 'Permits and audit · Countersign console');
          await openStory(setup, desk, `permit=${story.permitId}`);
          await checkStory(t, setup, desk, story);
          await checkPage(t, desk, 'the permit story');
          await screenshot(desk.page, 'permit-story', backendIndex);
          await checkEvaluations(t, setup, desk, story);
          await checkPage(t, desk, 'the permits page without a story');

          const phone = await newPage(browser, { width: 375 });
          await signIn(setup, phone, 'ada');
          await openStory(setup, phone, `permit=${story.permitId}`);
          t.equal(await steps(phone).count(), 5, 'the story on a phone');
          await checkPage(t, phone, 'the permit story on a phone', true);

          await checkReadiness(t, setup, desk, backendIndex);
          await phone.page.goto(`${h.authorityUrl}/console/readiness?window_days=7&quiet_days=3&expected=MISSING_PERMIT`);
          await route(phone, 'wire').waitFor();
          t.equal(await phone.page.getByLabel('Expected refusal codes').inputValue(), 'MISSING_PERMIT', 'a linked view fills the controls');
          await checkPage(t, phone, 'the readiness page on a phone', true);

          // A member: permits:read, no audit:read.
          const member = await newPage(browser);
          await signIn(setup, member, 'mia');
          await openStory(setup, member, `permit=${story.permitId}`);
          t.equal(await steps(member).count(), 5, 'a member sees the story');
          t.match(await member.page.getByTestId('audit-permission').textContent(), /audit:read/, 'and is told the chain’s status needs audit:read');
          await member.page.goto(`${h.authorityUrl}/console/permits?evaluation=${story.evaluationId}`);
          t.match(await member.page.getByTestId('story-permission').textContent(), /audit:read/, 'an evaluation id needs audit:read too');
          await member.page.goto(`${h.authorityUrl}/console/readiness`);
          t.match(await member.page.getByTestId('readiness-permission').textContent(), /audit:read/, 'so does the readiness page');
          await checkPage(t, member, 'the readiness page for a member');
        },
        { accounts: { ada: 'admin', mia: 'member' } },
      ),
    );
  }
}
