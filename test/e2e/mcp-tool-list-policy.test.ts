/**
 * `hide_denied_tools` on an inline MCP route, end to end: the official MCP SDK client and server
 * (Streamable HTTP), the proxy between them on loopback, a test authority, and an OAuth issuer on
 * loopback. tools/list leaves out the tools the policy denies the caller whatever the arguments,
 * keeps the held tool and the one whose denial depends on the arguments, and, when the authority
 * cannot be asked, answers a JSON-RPC error in enforce. The option off is the behaviour of the other
 * MCP tests (mcp-gate.test.ts, mcp-inline.test.ts).
 *
 * @example
 *   npx tap --disable-coverage dist/test/e2e/mcp-tool-list-policy.test.js
 */
import { createServer } from 'node:http';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { McpError } from '@modelcontextprotocol/sdk/types.js';
import t, { type Test } from 'tap';
import { request } from 'undici';
import { appBackends } from '../helpers/backends.js';
import { closeServer, listen } from '../helpers/loopback.js';
import { startJwtIssuer } from '../helpers/jwt-issuer.js';
import { startMcpUpstream } from '../helpers/mcp-upstream.js';
import { eventually, proxyConfig, withHarness, type Harness } from '../helpers/proxy-harness.js';

const [backend] = appBackends();

/**
 * drop_tables is denied to every agent but the DBA, by the tool and the actor alone; fail_ticket
 * waits for a person; slow_export is denied past 100 steps, which only the call's arguments tell.
 */
const POLICY = `version: 1
action_classes:
  - id: agent.tool
    match:
      action_type: agent.tool.invoke
    actors: ['*']
    bind: [arguments_digest]
    default: allow
    rules:
      - id: destructive
        when: 'context.target.id == "helpdesk/drop_tables" && actor.id != "agent:dba-1"'
        decision: deny
        reason: DESTRUCTIVE_TOOL
      - id: person
        when: 'context.target.id == "helpdesk/fail_ticket"'
        decision: hold
        reason: NEEDS_PERSON
      - id: long-export
        when: 'context.target.id == "helpdesk/slow_export" && context.steps > 100'
        decision: deny
        reason: EXPORT_TOO_LONG
`;

const TOOLS = [{ name: 'get_ticket' }, { name: 'fail_ticket' }, { name: 'slow_export', facts: { steps: { argument: '/steps' } } }, { name: 'drop_tables' }];

/** The MCP server behind the proxy on an inline route with hide_denied_tools; `list(sub)` lists its tools as that caller. */
async function setUp(t: Test, h: Harness, options: { authorityUrl?: string; mode?: 'enforce' | 'shadow' } = {}) {
  const put = await request(`${h.authorityUrl}/v1/policies`, {
    method: 'PUT',
    headers: { ...h.authority.bearer(h.authority.acmeAdmin), 'content-type': 'application/json' },
    body: JSON.stringify({ source: POLICY, format: 'yaml' }),
  });
  if (put.statusCode !== 200) throw new Error(`PUT /v1/policies answered ${put.statusCode}: ${await put.body.text()}`);
  const issuer = await startJwtIssuer(t);
  const mcp = await startMcpUpstream(t, { sessions: false });
  const proxy = await h.startProxy({ upstream: mcp.url });
  const endpoint = `${proxy.url}/mcp`;
  const inline = {
    api_key: await h.authority.key(['evaluate:write']),
    actor: { jwt: { issuer: issuer.issuer, audience: endpoint, jwks_url: issuer.jwksUrl }, prefix: 'agent:' },
  };
  // A shadow route's tools are forwarded whatever the policy says: the policy is asked about the one enforced there.
  const tools = options.mode === 'shadow' ? TOOLS.map((tool) => (tool.name === 'drop_tables' ? { ...tool, mode: 'enforce' } : tool)) : TOOLS;
  const route = { name: 'helpdesk', match: { path: '/mcp' }, mode: options.mode ?? 'enforce', mcp: { server: 'helpdesk', inline, hide_denied_tools: true, tools } };
  proxy.setConfig(proxyConfig(h.authority.acme.id, mcp.url, { authority: { url: options.authorityUrl ?? h.authorityUrl, api_key: 'cs_test_unused' }, routes: [route] }));
  const list = async (sub: string): Promise<string[]> => {
    const client = new Client({ name: 'ide', version: '1.0.0' });
    const bearer = await issuer.sign(sub, endpoint);
    await client.connect(new StreamableHTTPClientTransport(new URL(endpoint), { requestInit: { headers: { authorization: `Bearer ${bearer}` } } }));
    t.teardown(() => client.close());
    return (await client.listTools()).tools.map((tool) => tool.name).sort();
  };
  return { mcp, list };
}

async function pendingApprovals(h: Harness): Promise<number> {
  const response = await request(`${h.authorityUrl}/v1/approvals`, { headers: h.authority.bearer(h.authority.acmeAdmin) });
  const body = (await response.body.json()) as { approvals: unknown[] };
  if (response.statusCode !== 200) throw new Error(`GET /v1/approvals answered ${response.statusCode}`);
  return body.approvals.length;
}

t.test('tools/list leaves out the tool the policy denies this caller, and keeps the allowed, the held and the argument-dependent ones', (t) =>
  withHarness(t, backend!, async (h) => {
    const { mcp, list } = await setUp(t, h);
    t.same(await list('support-1'), ['fail_ticket', 'get_ticket', 'slow_export'], 'drop_tables is left out for an agent the policy denies it');
    t.same(await list('dba-1'), ['drop_tables', 'fail_ticket', 'get_ticket', 'slow_export'], 'and listed for the agent the policy allows it');
    t.equal(await pendingApprovals(h), 0, 'asking about the held tool opened no approval request');
    t.same(mcp.executions, {}, 'no tool ran');
  }),
);

t.test('the authority unreachable: tools/list is a JSON-RPC error in enforce, the list unchanged in shadow; both recorded', (t) =>
  withHarness(t, backend!, async (h) => {
    const closed = createServer();
    const deadUrl = await listen(closed);
    await closeServer(closed);

    const enforce = await setUp(t, h, { authorityUrl: deadUrl });
    const error = await enforce.list('support-1').then(
      () => undefined,
      (thrown: unknown) => thrown,
    );
    t.ok(error instanceof McpError, 'listTools fails with a JSON-RPC error');
    t.equal((error as McpError).code, -32603, 'internal error: the gate cannot vouch for the list');
    t.match((error as McpError).data, { reason: 'AUTHORITY_UNAVAILABLE' }, 'the reason says the authority could not be asked');

    const shadow = await setUp(t, h, { authorityUrl: deadUrl, mode: 'shadow' });
    t.same(await shadow.list('support-1'), ['drop_tables', 'fail_ticket', 'get_ticket', 'issue_refund', 'slow_export'], 'on a shadow route the list passes');

    const records = await eventually('both refusals recorded', async () => {
      const all = (await h.records()).filter((r) => r.kind === 'permit.rejected' && r.code === 'AUTHORITY_UNAVAILABLE');
      return all.length === 2 ? all : undefined;
    });
    t.same(records.map((r) => r.mode).sort(), ['enforce', 'shadow'], 'one refusal, one would-block');
  }),
);
