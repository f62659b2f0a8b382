/**
 * An agent's MCP tool call held by the policy, approved by a person in the console, end to end, as
 * docs/mcp.md's walkthrough shows it: the official MCP SDK client (knowing nothing of permits)
 * calls `issue_refund` through the proxy's MCP route, which decides inline with a key of its own
 * for the caller its `x-agent-id` header names; the example policy holds a refund over 100 USD.
 *
 * - the client gets the hold, with the link to the approval in the console, in the answer the
 *   SDK hands it: an `isError` result (a client that declared nothing) or a URL-mode elicitation
 *   (`-32042`, a 2025-11-25 client that declared `elicitation.url`);
 * - that link, opened in Chromium by a second identity holding exactly the approver scopes
 *   docs/approvals.md names, marks the held call, which shows the tool and the amount; the
 *   approver clicks the page's own Approve button;
 * - the client's retry of the same call runs once (the MCP server's own count); a second retry is
 *   held again, and a retry with another amount does not run;
 * - the audit log holds the approval, requested and resolved by that approver, and one execution
 *   record, for the permit the approval backed.
 *
 * @example
 *   npx tap --disable-coverage dist/test/browser/mcp-hold-console.test.js
 */
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { UrlElicitationRequiredError } from '@modelcontextprotocol/sdk/types.js';
import t, { type Test } from 'tap';
import { request } from 'undici';
import { drainVerificationRecords } from '../../authority/verifications/drain.js';
import { ApprovalResponse } from '../../shared/wire/approvals.js';
import { AuditEventsResponse } from '../../shared/wire/audit.js';
import { PermitProofResponse } from '../../shared/wire/permits.js';
import { appBackends } from '../helpers/backends.js';
import { BROWSER_NOT_RUN_REASON, chromiumPath, launchBrowser, newPage } from '../helpers/browser.js';
import { checkPage, item, sessionOf, signInWithKey, withConsole, type Setup } from '../helpers/console-harness.js';
import { startMcpUpstream } from '../helpers/mcp-upstream.js';
import { eventually, proxyConfig, type Harness } from '../helpers/proxy-harness.js';

/** What docs/approvals.md says an approver's key needs. */
const APPROVER_SCOPES = ['approvals:write', 'hitl:approve'] as const;
/** One of the example policy's agents (actor group `agents`). */
const AGENT = 'support-agent';
/** Over the example policy's 100 USD: held for a person. */
const REFUND = { order: 'A-18', amount_usd: 500 };

/** How the hold reaches the client: the `isError` result with the link, or a URL-mode elicitation. */
type Delivery = 'isError result' | 'URL elicitation';

/** What one call came to, as the SDK gave it to the client. */
type Outcome = { ran: string } | { held: { id: string; url: string } };

type ToolResult = { content?: Array<{ type: string; text?: string }>; isError?: boolean; _meta?: Record<string, unknown> };
const textOf = (result: ToolResult) => (result.content ?? []).map((part) => part.text ?? '').join(' ');

async function admin(h: Harness, path: string): Promise<unknown> {
  const response = await request(`${h.authorityUrl}${path}`, { headers: h.authority.bearer(h.authority.acmeAdmin) });
  const text = await response.body.text();
  if (response.statusCode !== 200) throw new Error(`GET ${path} answered ${response.statusCode}: ${text}`);
  return JSON.parse(text);
}

/**
 * The proxy's MCP route before an SDK-built MCP server that counts what it runs, deciding inline
 * as the walkthrough's configuration does, and an agent's MCP client connected through it.
 */
async function agentThroughGate(t: Test, setup: Setup, delivery: Delivery) {
  const { h } = setup;
  const mcp = await startMcpUpstream(t, { sessions: delivery === 'URL elicitation' });
  const proxy = await h.startProxy({ upstream: mcp.url });
  const gateKey = await h.authority.key(['evaluate:write']);
  const route = {
    name: 'helpdesk-mcp',
    match: { path: '/mcp' },
    mcp: {
      server: 'helpdesk',
      inline: { api_key: gateKey, actor: { header: 'x-agent-id' } },
      tools: [{ name: 'issue_refund', facts: { amount_usd: { argument: '/amount_usd' } } }],
    },
  };
  proxy.setConfig(proxyConfig(h.authority.acme.id, mcp.url, { authority: { url: h.authorityUrl, api_key: 'cs_test_unused' }, routes: [route] }));

  const capabilities = delivery === 'URL elicitation' ? { capabilities: { elicitation: { url: {} } } } : {};
  const client = new Client({ name: 'helpdesk-agent', version: '1.0.0' }, capabilities);
  await client.connect(new StreamableHTTPClientTransport(new URL(`${proxy.url}/mcp`), { requestInit: { headers: { 'x-agent-id': AGENT } } }));
  t.teardown(() => client.close());

  /** Calls issue_refund; what ran, or the approval the answer names and its link, as the SDK handed them over. */
  const refund = async (args: Record<string, unknown>): Promise<Outcome> => {
    // The harness's clock stands still while the browser takes real seconds, and Redis (whose
    // replay epoch a permit's iat must follow) keeps real time: catch it up before the gate evaluates.
    h.clock.advance(Math.max(0, Date.now() - h.clock.now()));
    let result: ToolResult;
    try {
      result = (await client.callTool({ name: 'issue_refund', arguments: args })) as ToolResult;
    } catch (error) {
      if (delivery !== 'URL elicitation' || !(error instanceof UrlElicitationRequiredError)) throw error;
      const [elicitation] = error.elicitations;
      t.equal(error.elicitations.length, 1, 'the hold is one URL elicitation');
      t.match(elicitation!.message, /make the same call again/, 'which says to call again once it is approved');
      return { held: { id: elicitation!.elicitationId, url: elicitation!.url } };
    }
    if (result.isError !== true) return { ran: textOf(result) };
    t.equal(delivery, 'isError result', 'the hold comes as an isError result to a client that declared no URL elicitation');
    t.equal(result._meta?.['countersign/reason'], 'APPROVAL_REQUIRED', 'the call waits for an approval');
    const url = result._meta?.['countersign/approval_url'] as string;
    t.ok(textOf(result).includes(url), 'the text the model reads holds the link');
    return { held: { id: result._meta?.['countersign/approval_id'] as string, url } };
  };
  return { mcp, refund };
}

function heldOf(t: Test, outcome: Outcome, what: string): { id: string; url: string } {
  if ('held' in outcome) return outcome.held;
  t.fail(`${what}: it ran (${outcome.ran})`);
  throw new Error(`${what}: the call ran`);
}

// A browser, an authority, a proxy, an MCP server and an identity provider, on a busy 2-core
// machine: longer than .taprc's two minutes per file.
t.setTimeout(6 * 60_000);

if (!chromiumPath()) {
  t.comment(`the MCP hold's browser test did not run: ${BROWSER_NOT_RUN_REASON}`);
} else {
  const backends = appBackends();
  // The walkthrough's client on every backend; the elicitation's delivery on the first (the link, not the store, differs).
  const runs = backends.map((backend) => ({ backend, delivery: 'isError result' as Delivery }));
  runs.push({ backend: backends[0]!, delivery: 'URL elicitation' });
  for (const { backend, delivery } of runs) {
    t.test(`an MCP call held by the policy, approved in the console from the link in the agent's ${delivery}, runs once, on ${backend.name}`, (t) =>
      withConsole(
        t,
        backend,
        async (setup) => {
          const { h } = setup;
          const { mcp, refund } = await agentThroughGate(t, setup, delivery);

          const held = heldOf(t, await refund(REFUND), 'the 500 USD refund');
          t.equal(held.url, `${h.authorityUrl}/console/?approval=${held.id}`, "the answer links to the approval in the console's inbox");
          t.equal(mcp.executions.issue_refund, undefined, 'nothing ran while it waits');

          const approverKey = await h.authority.key([...APPROVER_SCOPES]);
          const browser = await launchBrowser(t);
          const tested = await newPage(browser);
          await signInWithKey(setup, tested, approverKey);
          const session = await sessionOf(tested, h.authorityUrl);
          t.same([...session.permissions].sort(), [...APPROVER_SCOPES], 'the approver holds exactly the approver scopes');
          const { page } = tested;
          await page.goto(held.url);
          const card = item(page, held.id);
          await card.waitFor();
          t.equal(await card.getAttribute('aria-current'), 'true', 'the link marks the held call');
          t.equal(await card.locator('[data-fact="target"]').textContent(), 'tool: helpdesk/issue_refund', 'the approver sees the tool');
          t.match(await card.locator('[data-fact="amount_usd"]').textContent(), /500/, 'and the amount');
          t.match(await card.locator('.codes').textContent(), /REFUND_NEEDS_APPROVAL/, "and the policy's reason");
          t.match(await card.textContent(), new RegExp(`Actor${AGENT}`), 'and the agent it is for');
          await checkPage(t, tested, 'the inbox opened on the held tool call');

          await card.getByTestId('approve').click();
          await card.getByTestId('vote-outcome').waitFor();
          t.match(await card.getByTestId('vote-outcome').textContent(), /approved/i, 'the approver approves it');

          const retried = await refund(REFUND);
          t.same(retried, { ran: 'refunded 500 USD on A-18' }, "the client's retry of the same call runs");
          t.equal(mcp.executions.issue_refund, 1, 'once');
          const again = heldOf(t, await refund(REFUND), 'a second retry');
          t.not(again.id, held.id, 'a second retry is held again, for a new approval: the approval was used');
          const changed = heldOf(t, await refund({ ...REFUND, amount_usd: 900 }), 'a retry with another amount');
          t.not(changed.id, held.id, 'a retry with another amount does not run on the approval');
          t.not(changed.id, again.id, 'and waits for an approval of its own');
          t.equal(mcp.executions.issue_refund, 1, 'the refund ran exactly once');

          // The gate's records reach the audit log as the authority drains them.
          await eventually('the execution record', async () => ((await h.records()).some((record) => record.kind === 'execution.observed') ? true : undefined));
          await drainVerificationRecords({ db: h.opened.db, store: h.opened.store, clock: h.clock });
          const { approval } = ApprovalResponse.parse(await admin(h, `/v1/approvals/${held.id}`));
          t.match(approval, { status: 'approved', resolved_by: session.identity, actor_id: AGENT }, 'the approval is approved by the approver');
          t.ok(approval.used_by_permit_id, 'and backed one permit');
          const approvalEvents = AuditEventsResponse.parse(await admin(h, `/v1/audit/events?resource_id=${held.id}`)).events;
          t.same(
            approvalEvents.map((event) => [event.type, event.decision]).sort(),
            [['approval.requested', 'hold'], ['approval.resolved', 'approve']],
            'the audit log holds the approval, requested and resolved',
          );
          t.equal(approvalEvents.find((event) => event.type === 'approval.resolved')?.actor_id, session.identity, 'resolved by the approver');
          const executions = AuditEventsResponse.parse(await admin(h, '/v1/audit/events?type=execution.observed'));
          t.equal(executions.total, 1, 'and one execution record');
          t.equal(executions.events[0]?.resource_id, approval.used_by_permit_id, 'for the permit the approval backed');
          const proof = PermitProofResponse.parse(await admin(h, `/v1/permits/${approval.used_by_permit_id}/proof`));
          t.same(
            proof.events.map((event) => event.type),
            ['evaluation.decided', 'permit.issued', 'permit.verified', 'execution.observed'],
            "the permit's proof: decided, issued, verified and consumed at the gate, executed once",
          );
        },
        { apiKeySignIn: true },
      ),
    );
  }
}
