/**
 * A real browser for end-to-end tests of the web console: the system's Chromium (Debian's
 * /usr/bin/chromium; playwright-core never downloads one) driven by playwright-core, pages that
 * collect console errors, uncaught exceptions and CSP violations, and an axe-core check that works
 * under the console's strict CSP. CI installs chromium; on a machine without it a test comments
 * BROWSER_NOT_RUN_REASON and returns, instead of a silent skip.
 *
 * Every page is hermetic: requests to anything but loopback never leave the machine; they are
 * answered 204 locally and listed in `externalRequests` (the console itself should make none).
 *
 * @example
 *   if (!chromiumPath()) { t.comment(`browser test did not run: ${BROWSER_NOT_RUN_REASON}`); return; }
 *   const browser = await launchBrowser(t);
 *   const { page, errors } = await newPage(browser);            // or newPage(browser, { width: 375 })
 *   await page.goto(`${consoleUrl}/approvals`);
 *   t.same(await checkAccessibility(page), [], 'no serious or critical accessibility violations');
 *   t.same(errors, [], 'no console errors, uncaught exceptions or CSP violations');
 */
import { existsSync, readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { chromium, type Browser, type BrowserContext, type Page } from 'playwright-core';
import type { Test } from 'tap';

const CANDIDATES = ['/usr/bin/chromium', '/usr/bin/chromium-browser'];

/** Why browser tests did not run; printed with a comment instead of a silent skip. */
export const BROWSER_NOT_RUN_REASON =
  `no Chromium found (${CANDIDATES.join(', ')}) and CHROMIUM_PATH is not set: ` +
  'install the `chromium` package (CI does) or point CHROMIUM_PATH at a Chromium or Chrome binary';

/** CHROMIUM_PATH when set (even if wrong: launching then fails loudly), else the first installed candidate, else null. */
export function chromiumPath(): string | null {
  const fromEnv = process.env['CHROMIUM_PATH']?.trim();
  if (fromEnv) return fromEnv;
  return CANDIDATES.find((path) => existsSync(path)) ?? null;
}

/** Launches headless Chromium, closed when `t` ends. Throws BROWSER_NOT_RUN_REASON when there is none. */
export async function launchBrowser(t: Test): Promise<Browser> {
  const executablePath = chromiumPath();
  if (!executablePath) throw new Error(BROWSER_NOT_RUN_REASON);
  const browser = await chromium.launch({
    executablePath,
    headless: true,
    // Root in a container: Chromium's sandbox needs user namespaces it does not get there, and
    // /dev/shm is often 64 MB, too small for its shared memory.
    args: ['--no-sandbox', '--disable-dev-shm-usage'],
  });
  t.teardown(() => browser.close());
  return browser;
}

export interface TestPage {
  context: BrowserContext;
  page: Page;
  /** `console error: …` (CSP violations arrive this way) and `page error: …` (uncaught exceptions), in order. */
  errors: string[];
  /** URLs of requests to anything but loopback, answered 204 without leaving the machine. */
  externalRequests: string[];
}

const LOOPBACK = new Set(['127.0.0.1', 'localhost', '[::1]']);

/** A page in a fresh context (no cookies): 1280×800, or `width` × 740 (a phone when narrow). */
export async function newPage(browser: Browser, { width }: { width?: number } = {}): Promise<TestPage> {
  const context = await browser.newContext({ viewport: width === undefined ? { width: 1280, height: 800 } : { width, height: 740 } });
  const errors: string[] = [];
  const externalRequests: string[] = [];
  await context.route(
    (url) => !LOOPBACK.has(url.hostname),
    (route) => {
      externalRequests.push(route.request().url());
      return route.fulfill({ status: 204 });
    },
  );
  const page = await context.newPage();
  page.on('console', (message) => {
    if (message.type() === 'error') errors.push(`console error: ${message.text()} (at ${message.location().url || page.url()})`);
  });
  page.on('pageerror', (error) => errors.push(`page error: ${error.message}`));
  return { context, page, errors, externalRequests };
}

export interface AccessibilityViolation {
  id: string;
  impact: 'serious' | 'critical';
  help: string;
  /** One CSS selector per offending element. */
  targets: string[];
}

let axeSource: string | undefined;

/**
 * Runs axe-core on the page as it is now and returns its serious and critical violations
 * (`[]` when there are none; minor and moderate ones are not reported).
 *
 * How axe gets into a page whose CSP is `script-src 'self'`: `page.addScriptTag({ content })`
 * would add an inline <script>, which that CSP blocks (and reports as a violation). A context
 * with `bypassCSP: true` would turn the CSP off for the whole page, hiding exactly the
 * violations the test should see. So the source is evaluated with `page.evaluate`, which runs it
 * through the DevTools protocol (Runtime.evaluate): CSP governs what the page itself loads and
 * runs, not what the debugger evaluates, and axe needs no eval of its own.
 */
export async function checkAccessibility(page: Page): Promise<AccessibilityViolation[]> {
  axeSource ??= readFileSync(createRequire(import.meta.url).resolve('axe-core/axe.min.js'), 'utf8');
  // No DOM types in this project (lib ES2023): the page's globals are declared by hand.
  type AxeResult = { id: string; impact?: string | null; help: string; nodes: Array<{ target: unknown[] }> };
  type PageGlobals = { axe?: { run(context: unknown, options: unknown): Promise<{ violations: AxeResult[] }> }; document: unknown };
  if (await page.evaluate(() => (globalThis as unknown as PageGlobals).axe === undefined)) await page.evaluate(axeSource);
  const violations = await page.evaluate(async () => {
    const { axe, document } = globalThis as unknown as PageGlobals;
    const results = await axe!.run(document, { resultTypes: ['violations'] });
    return results.violations.map(({ id, impact, help, nodes }) => ({
      id,
      impact: impact ?? null,
      help,
      targets: nodes.map((node) => node.target.flat().join(' ')),
    }));
  });
  return violations.filter((v): v is AccessibilityViolation => v.impact === 'serious' || v.impact === 'critical');
}
