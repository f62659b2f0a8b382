/**
 * The console's API keys page in a real browser (Debian's Chromium, driven by playwright-core),
 * against a real authority and a real OpenID provider on loopback, signed in as ada, an admin:
 *
 * - the page lists the organization's keys with their scopes, allowlist, allowed actors and status in words;
 * - creating a key shows its secret once, with a copy button; the secret works against the API;
 *   after "Done", and after a reload, it is nowhere in the page (nor in the browser's storage);
 * - "Rotate" fills the form with the old key's scopes, allowlist and allowed actors;
 * - revoking asks first, inline; cancelling keeps the key; a refusal shows the server's message;
 *   once revoked, the API refuses the key (401);
 * - an approver, who lacks keys:write, is told which permission is missing and sees nothing else;
 * - each state of the page passes checkPage (axe, console errors, other origins), at 1280 pixels
 *   and at 375.
 *
 * `npm run docs:console` runs it with UPDATE_CONSOLE_SCREENSHOTS=1, which also writes
 * docs/console/keys.png.
 */
import t from 'tap';
import { request } from 'undici';
import { appBackends } from '../helpers/backends.js';
import { BROWSER_NOT_RUN_REASON, chromiumPath, launchBrowser, newPage, type TestPage } from '../helpers/browser.js';
import { checkPage, screenshot, sessionOf, signIn, withConsole, type Setup } from '../helpers/console-harness.js';

const keyRow = (tested: TestPage, id: string) => tested.page.locator(`[data-testid="key-row"][data-id="${id}"]`);

/** The key a secret belongs to, as the API sees it: 200 with its id and scopes, or 401 once revoked. */
async function self(setup: Setup, secret: string): Promise<{ status: number; body: { key_id?: string; scopes?: string[]; allowed_actors?: string[] | null } }> {
  const response = await request(`${setup.h.authorityUrl}/v1/api-key-self`, { headers: { authorization: `Bearer ${secret}` } });
  return { status: response.statusCode, body: (await response.body.json()) as { key_id?: string; scopes?: string[]; allowed_actors?: string[] | null } };
}

/** Creates a key through the API with the organization's admin key; returns its id and secret. */
async function apiKey(setup: Setup, body: Record<string, unknown>): Promise<{ id: string; secret: string }> {
  const response = await request(`${setup.h.authorityUrl}/v1/api-keys`, {
    method: 'POST',
    headers: { authorization: `Bearer ${setup.h.authority.acmeAdmin}`, 'content-type': 'application/json' },
    body: JSON.stringify(body),
  });
  const created = (await response.body.json()) as { api_key: { id: string }; secret: string };
  if (response.statusCode !== 201) throw new Error(`creating a key answered ${response.statusCode}: ${JSON.stringify(created)}`);
  return { id: created.api_key.id, secret: created.secret };
}

/** What the browser keeps for the page: its HTML and both web storages, as one string. */
async function everythingKept(tested: TestPage): Promise<string> {
  type Storage = { length: number; key(index: number): string | null; getItem(key: string): string | null };
  type PageGlobals = { localStorage: Storage; sessionStorage: Storage };
  const stored = await tested.page.evaluate(() => {
    const { localStorage, sessionStorage } = globalThis as unknown as PageGlobals;
    const dump = (storage: Storage): string[] => Array.from({ length: storage.length }, (_, index) => {
      const key = storage.key(index) ?? '';
      return `${key}=${storage.getItem(key) ?? ''}`;
    });
    return [...dump(localStorage), ...dump(sessionStorage)].join('\n');
  });
  return `${await tested.page.content()}\n${stored}`;
}

/** A date `days` after `from` (default now) as a date input takes it (YYYY-MM-DD, local time). */
function dateIn(days: number, from = new Date()): string {
  const date = new Date(from.getTime() + days * 86_400_000);
  return `${date.getFullYear()}-${String(date.getMonth() + 1).padStart(2, '0')}-${String(date.getDate()).padStart(2, '0')}`;
}

async function openKeysPage(tested: TestPage): Promise<void> {
  await tested.page.getByRole('link', { name: 'API keys' }).click();
  await tested.page.waitForURL(/\/console\/keys$/);
}

// A browser, an authority, a proxy and an identity provider, on both backends: longer than
// .taprc's two minutes per file on a busy 2-core machine.
t.setTimeout(6 * 60_000);

if (!chromiumPath()) {
  t.comment(`the console's browser tests did not run: ${BROWSER_NOT_RUN_REASON}`);
} else {
  for (const [backendIndex, backend] of appBackends().entries()) {
    t.test(`the console's API keys: list, create (the secret once), rotate, revoke; an approver is told what is missing, on ${backend.name}`, (t) =>
      withConsole(
        t,
        backend,
        async (setup) => {
          const { h } = setup;
          const browser = await launchBrowser(t);
          const agent = await apiKey(setup, { name: 'payments agent', scopes: ['evaluate:write', 'verify:execute'], allowed_cidrs: ['10.0.0.0/8'], allowed_actors: ['agent:*'] });

          // The list.
          const admin = await newPage(browser);
          await signIn(setup, admin, 'ada');
          const ada = await sessionOf(admin, h.authorityUrl);
          t.equal(ada.role, 'admin');
          await openKeysPage(admin);
          const agentRow = keyRow(admin, agent.id);
          await agentRow.waitFor();
          const agentText = (await agentRow.textContent()) ?? '';
          t.match(agentText, /payments agent/, 'the list shows an existing key: its name');
          t.match(agentText, /evaluate:write/, 'its scopes');
          t.match(agentText, /verify:execute/);
          t.match(agentText, /10\.0\.0\.0\/8/, 'its allowlist');
          t.match(agentText, /Speaks foragent:\*/, 'the actors it may speak for');
          t.match(agentText, new RegExp(agent.secret.slice(0, 12)), 'its display prefix');
          t.equal(await agentRow.getByTestId('key-status').textContent(), 'Active', 'its status, in words');
          t.notMatch(agentText, agent.secret, 'never its secret');
          t.match(agentText, /Created byapi_key:[0-9a-f-]+ \(the key “test key”\)/, 'who made it, named when it is a listed key');
          t.equal(await admin.page.getByTestId('key-row').count(), 2, 'and the organization\'s other key (its admin key)');
          t.match(await admin.page.getByTestId('narrowing-note').textContent(), /no wider than you/, 'the form says a key can be no wider than its creator');
          const offered = await admin.page.getByTestId('scope-option').evaluateAll((boxes) => boxes.map((box) => (box as unknown as { value: string }).value));
          t.same([...offered].sort(), [...ada.permissions].sort(), 'the scopes offered are exactly the creator\'s permissions');
          await checkPage(t, admin, 'the keys page');

          // The form refuses what it can tell is wrong, before asking the server.
          await admin.page.getByTestId('create-key').click();
          t.match(await admin.page.getByTestId('create-error').textContent(), /name/, 'a key needs a name');

          // Create: the secret, once.
          await admin.page.getByTestId('key-name').fill('ci job');
          await admin.page.getByLabel('evaluate:write').check();
          await admin.page.getByLabel('verify:execute').check();
          await admin.page.getByTestId('key-allowlist').fill('127.0.0.0/8\n::1/128');
          await admin.page.getByTestId('key-actors').fill('ci*bot');
          await admin.page.getByTestId('create-key').click();
          t.match(await admin.page.getByTestId('create-error').textContent(), /may only end an actor pattern/, 'a * inside an actor pattern is refused');
          await admin.page.getByTestId('key-actors').fill('ci-bot\n deploy:* ');
          const expiryDate = dateIn(30);
          await admin.page.getByTestId('key-expiry').fill(expiryDate);
          await admin.page.getByTestId('create-key').click();
          const shown = admin.page.getByTestId('new-key-secret');
          await shown.waitFor();
          const secret = ((await shown.textContent()) ?? '').trim();
          t.match(secret, /^ask_(live|test)_[A-Za-z0-9]{32,128}$/, 'creating a key shows its secret');
          t.match(await admin.page.getByTestId('new-key-warning').textContent(), /will not be shown again/, 'with a warning that it will not be shown again');
          const works = await self(setup, secret);
          t.equal(works.status, 200, 'the secret works');
          t.same([...(works.body.scopes ?? [])].sort(), ['evaluate:write', 'verify:execute'], 'with the scopes chosen');
          t.same(works.body.allowed_actors, ['ci-bot', 'deploy:*'], 'and the actors given, one per line');
          const ciId = works.body.key_id as string;
          const ciRow = keyRow(admin, ciId);
          await ciRow.waitFor();
          t.match(await ciRow.textContent(), /127\.0\.0\.0\/8/, 'the new key is listed with its allowlist');
          t.match(await ciRow.textContent(), /user:ada \(you\)/, 'made by the person signed in');
          const expires = await ciRow.getByTestId('key-expires').locator('time').getAttribute('datetime');
          const expiresAt = new Date(expires ?? '');
          t.equal(dateIn(0, expiresAt), expiryDate, 'expiring on the date chosen');
          t.equal(`${expiresAt.getHours()}:${expiresAt.getMinutes()}`, '23:59', 'at the end of that day');
          await admin.context.grantPermissions(['clipboard-read', 'clipboard-write'], { origin: h.authorityUrl });
          await admin.page.getByTestId('copy-secret').click();
          await admin.page.getByTestId('copy-status').filter({ hasText: /Copied/ }).waitFor();
          const copied = await admin.page.evaluate(() => (globalThis as unknown as { navigator: { clipboard: { readText(): Promise<string> } } }).navigator.clipboard.readText());
          t.equal(copied, secret, '"Copy" puts the secret on the clipboard');
          await checkPage(t, admin, 'the keys page with a new secret');

          await admin.page.getByTestId('secret-done').click();
          t.equal(await shown.count(), 0, '"Done" takes the secret panel away');
          t.notOk((await everythingKept(admin)).includes(secret), 'after "Done" the secret is nowhere in the page or its storage');
          await admin.page.reload();
          await ciRow.waitFor();
          t.notOk((await everythingKept(admin)).includes(secret), 'nor after a reload');
          t.equal(await shown.count(), 0, 'and no secret panel comes back');
          await screenshot(admin.page, 'keys', backendIndex);

          // Rotate: the form starts with the old key's scopes and allowlist.
          await agentRow.getByTestId('rotate').click();
          t.match(await admin.page.getByTestId('rotation-draft').textContent(), /payments agent/, '"Rotate" names the key to replace');
          t.match(await admin.page.getByTestId('key-name').inputValue(), /^payments agent \(rotated /, 'and suggests a name');
          t.ok(await admin.page.getByLabel('evaluate:write').isChecked(), 'with the old key\'s scopes');
          t.ok(await admin.page.getByLabel('verify:execute').isChecked());
          t.notOk(await admin.page.getByLabel('audit:read').isChecked(), 'and no other');
          t.equal(await admin.page.getByTestId('key-allowlist').inputValue(), '10.0.0.0/8', 'and its allowlist');
          t.equal(await admin.page.getByTestId('key-actors').inputValue(), 'agent:*', 'and its allowed actors');
          t.match(await admin.page.getByTestId('rotation-steps').textContent(), /same scopes[\s\S]*Deploy[\s\S]*Revoke the old key once the new one works/, 'the rotation steps are on the page');

          // Revoke asks first; cancelling keeps the key.
          await ciRow.getByTestId('revoke').click();
          await ciRow.getByTestId('revoke-confirmation').waitFor();
          t.match(await ciRow.getByTestId('revoke-confirmation').textContent(), /Revoke key “ci job”\?/, 'revoking asks first, inline');
          await checkPage(t, admin, 'the keys page asking to revoke');
          await ciRow.getByTestId('cancel-revoke').click();
          t.equal(await ciRow.getByTestId('revoke-confirmation').count(), 0, 'cancel takes the question away');
          t.equal((await self(setup, secret)).status, 200, 'and the key still works');

          // A refusal shows the server's message: here the request goes as a narrower key (keys:write
          // without verify:execute), which may not revoke the wider payments agent.
          const narrow = await apiKey(setup, { name: 'narrow admin', scopes: ['keys:write', 'evaluate:write'] });
          await admin.page.route(`**/v1/api-keys/${agent.id}/revoke`, (route) =>
            route.continue({ headers: { ...route.request().headers(), authorization: `Bearer ${narrow.secret}` } }),
          );
          await agentRow.getByTestId('revoke').click();
          await agentRow.getByTestId('confirm-revoke').click();
          await agentRow.getByTestId('revoke-error').waitFor();
          t.match(await agentRow.getByTestId('revoke-error').textContent(), /cannot be revoked by it; missing: verify:execute/, 'a refusal shows the server\'s message');
          t.equal(await agentRow.getByTestId('key-status').textContent(), 'Active', 'and the key stays active');
          t.equal((await self(setup, agent.secret)).status, 403, 'the agent key still authenticates (403: it is used from outside its allowlist, not revoked)');
          await admin.page.unroute(`**/v1/api-keys/${agent.id}/revoke`);
          // The browser logs the refused request itself; that one is expected, and nothing else.
          t.same(admin.errors.map((error) => /status of 403 .*\/revoke\)$/.test(error)), [true], 'the only console error is the browser\'s note of the refusal');
          admin.errors.length = 0;

          // Revoke, confirmed: the API refuses the key from then on.
          await ciRow.getByTestId('revoke').click();
          await ciRow.getByTestId('confirm-revoke').click();
          await admin.page.locator(`[data-testid="inactive-keys"] [data-testid="key-row"][data-id="${ciId}"]`).waitFor();
          t.equal(await ciRow.getAttribute('data-status'), 'revoked', 'the key is listed as revoked');
          t.equal(await ciRow.getByTestId('key-status').textContent(), 'Revoked', 'in words');
          t.match(await admin.page.getByTestId('keys-outcome').textContent(), /“ci job” is revoked/, 'the page says so');
          t.equal(await ciRow.getByTestId('revoke').count(), 0, 'a revoked key offers no revoke button');
          t.equal((await self(setup, secret)).status, 401, 'the API refuses a revoked key (401)');
          await checkPage(t, admin, 'the keys page after a revocation');

          // On a phone: the list, a new secret and the question all fit 375 pixels.
          const phone = await newPage(browser, { width: 375 });
          await signIn(setup, phone, 'ada');
          await openKeysPage(phone);
          await keyRow(phone, agent.id).waitFor();
          await checkPage(t, phone, 'the keys page on a phone', true);
          await phone.page.getByTestId('key-name').fill('phone made');
          await phone.page.getByLabel('audit:read').check();
          await phone.page.getByTestId('create-key').click();
          await phone.page.getByTestId('new-key-secret').waitFor();
          await keyRow(phone, agent.id).getByTestId('revoke').click();
          await keyRow(phone, agent.id).getByTestId('revoke-confirmation').waitFor();
          await checkPage(t, phone, 'the keys page on a phone, with a new secret and a question', true);
          await phone.page.getByTestId('secret-done').click();

          // An approver lacks keys:write: the page says which permission, and shows nothing else.
          const approver = await newPage(browser);
          await signIn(setup, approver, 'alice');
          await openKeysPage(approver);
          const forbidden = approver.page.getByTestId('keys-forbidden');
          await forbidden.waitFor();
          t.match(await forbidden.textContent(), /keys:write/, 'an approver is told the permission keys:write is missing');
          t.match(await forbidden.textContent(), /approver/, 'and that their role does not grant it');
          t.equal(await approver.page.getByTestId('key-row').count(), 0, 'no key is listed');
          t.equal(await approver.page.getByTestId('create-key-form').count(), 0, 'and no scope is offered: there is no form');
          await checkPage(t, approver, 'the keys page without keys:write');
        },
        { accounts: { ada: 'admin' } },
      ),
    );
  }
}
