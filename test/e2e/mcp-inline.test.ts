/**
 * The MCP gate deciding for unmodified clients, end to end: the official MCP SDK as client and
 * server (Streamable HTTP), the proxy between them on loopback, a test authority whose policy
 * allows reading tickets, holds VIP tickets for a person and denies the destructive tool, and an
 * OAuth issuer on loopback (its JWKS served over HTTP, tokens signed with jose). The client brings
 * no permit, only its bearer token; the gate evaluates with its own key. Asserts on what the MCP
 * server ran and on the verification records, never on time.
 *
 * @example
 *   npx tap --disable-coverage dist/test/e2e/mcp-inline.test.js
 */
import { createServer } from 'node:http';
import { Client as ModernClient, StreamableHTTPClientTransport as ModernTransport } from '@modelcontextprotocol/client';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { UrlElicitationRequiredError } from '@modelcontextprotocol/sdk/types.js';
import t, { type Test } from 'tap';
import { request } from 'undici';
import type { VerificationRecord } from '../../shared/wire/verification-records.js';
import { appBackends } from '../helpers/backends.js';
import { closeServer, listen } from '../helpers/loopback.js';
import { FIRST_STATELESS_VERSION } from '../../proxy/mcp/era.js';
import { startJwtIssuer } from '../helpers/jwt-issuer.js';
import { startMcpUpstream } from '../helpers/mcp-upstream.js';
import { startMcpUpstreamV2 } from '../helpers/mcp-upstream-v2.js';
import { eventually, proxyConfig, withHarness, type Harness } from '../helpers/proxy-harness.js';

const [backend] = appBackends();

/** Tickets read freely, VIP tickets wait for a person, the destructive tool never runs. */
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
        when: 'context.target.id == "helpdesk/drop_tables"'
        decision: deny
        reason: DESTRUCTIVE_TOOL
        remediation:
          code: USE_HUMAN_OPERATOR
          message: Agents never drop tables; hand this task to a human operator.
      - id: vip
        when: 'has(context.ticket) && context.ticket in ["VIP-1", "VIP-2"] && approvals.count == 0'
        decision: hold
        reason: VIP_TICKET
`;

const TOOLS = [{ name: 'get_ticket', facts: { ticket: { argument: '/id' } } }, { name: 'drop_tables' }];

interface Setup {
  mcp: { executions: Record<string, number>; authorizations?: Array<string | undefined> };
  endpoint: string;
  token: (sub?: string, audience?: string) => Promise<string>;
  connect: (options?: { token?: string; elicitation?: boolean }) => Promise<Client>;
}

/** `v2`: the MCP server is the SDK's v2 server, which speaks 2026-07-28 as well. */
async function setUp(t: Test, h: Harness, options: { sessions?: boolean; inline?: Record<string, unknown>; authorityUrl?: string; v2?: boolean } = {}): Promise<Setup> {
  const put = await request(`${h.authorityUrl}/v1/policies`, {
    method: 'PUT',
    headers: { ...h.authority.bearer(h.authority.acmeAdmin), 'content-type': 'application/json' },
    body: JSON.stringify({ source: POLICY, format: 'yaml' }),
  });
  if (put.statusCode !== 200) throw new Error(`PUT /v1/policies answered ${put.statusCode}: ${await put.body.text()}`);
  const issuer = await startJwtIssuer(t);
  const mcp = options.v2 === true ? await startMcpUpstreamV2(t) : await startMcpUpstream(t, { sessions: options.sessions ?? false });
  const proxy = await h.startProxy({ upstream: mcp.url });
  const endpoint = `${proxy.url}/mcp`;
  const gateKey = await h.authority.key(['evaluate:write']);
  const inline = {
    api_key: gateKey,
    actor: { jwt: { issuer: issuer.issuer, audience: endpoint, jwks_url: issuer.jwksUrl }, prefix: 'agent:' },
    ...options.inline,
  };
  const route = { name: 'helpdesk', match: { path: '/mcp' }, mcp: { server: 'helpdesk', inline, tools: TOOLS } };
  proxy.setConfig(proxyConfig(h.authority.acme.id, mcp.url, { authority: { url: options.authorityUrl ?? h.authorityUrl, api_key: 'cs_test_unused' }, routes: [route] }));
  const token = (sub = 'support-1', audience = endpoint) => issuer.sign(sub, audience);
  const connect = async (connectOptions: { token?: string; elicitation?: boolean } = {}) => {
    const bearer = connectOptions.token ?? (await token());
    const client = new Client({ name: 'ide', version: '1.0.0' }, connectOptions.elicitation === true ? { capabilities: { elicitation: { url: {} } } } : {});
    await client.connect(new StreamableHTTPClientTransport(new URL(endpoint), { requestInit: { headers: { authorization: `Bearer ${bearer}` } } }));
    t.teardown(() => client.close());
    return client;
  };
  return { mcp, endpoint, token, connect };
}

type ToolResult = { content?: Array<{ type: string; text?: string }>; isError?: boolean; _meta?: Record<string, unknown> };
const reasonOf = (result: ToolResult) => result._meta?.['countersign/reason'];
const textOf = (result: ToolResult) => (result.content ?? []).map((part) => part.text ?? '').join(' ');
const count = (records: VerificationRecord[], kind: string, code?: string) => records.filter((r) => r.kind === kind && (code === undefined || r.code === code)).length;

async function approve(t: Test, h: Harness, approvalId: string): Promise<void> {
  const approver = await h.authority.idp.sign({ sub: 'erin', org_id: h.authority.acme.id, role: 'approver' });
  const response = await request(`${h.authorityUrl}/v1/approvals/${approvalId}/resolve`, {
    method: 'POST',
    headers: { authorization: `Bearer ${approver}`, 'content-type': 'application/json' },
    body: JSON.stringify({ decision: 'approve' }),
  });
  const text = await response.body.text();
  t.equal(response.statusCode, 200, 'a person approves the call in the authority', response.statusCode === 200 ? {} : { body: text });
}

t.test('an allowed call runs once with the gate’s permit; a denied call is explained; the token stays with the gate', (t) =>
  withHarness(t, backend!, async (h) => {
    const { mcp, connect } = await setUp(t, h);
    const client = await connect();

    const allowed = (await client.callTool({ name: 'get_ticket', arguments: { id: 'T-1' } })) as ToolResult;
    t.same(allowed.content, [{ type: 'text', text: 'ticket T-1: open' }], "the tool's result passes through unchanged");
    t.equal(mcp.executions.get_ticket, 1, 'the tool ran once');

    const denied = (await client.callTool({ name: 'drop_tables', arguments: {} })) as ToolResult;
    t.equal(denied.isError, true, 'a denied call is an isError result');
    t.equal(reasonOf(denied), 'POLICY_DENIED');
    t.same(denied._meta?.['countersign/reason_codes'], ['DESTRUCTIVE_TOOL'], "the policy's reason codes");
    t.match(textOf(denied), /hand this task to a human operator/, "the policy's remediation, in words");
    t.notMatch(textOf(denied), /permit/, 'not an instruction to bring a permit');
    t.equal(mcp.executions.drop_tables, undefined, 'the denied tool did not run');

    t.ok(mcp.authorizations!.length > 0);
    t.same(
      mcp.authorizations!.filter((value) => value !== undefined),
      [],
      "the caller's token never reaches the MCP server",
    );

    const records = await eventually('the execution record', async () => {
      const all = await h.records();
      return count(all, 'execution.observed') === 1 ? all : undefined;
    });
    const verified = records.filter((r) => r.kind === 'permit.verified');
    t.equal(verified.length, 1, "the gate's permit was verified and consumed, on the record");
    t.equal(verified[0]!.actor_id, 'agent:support-1', 'for the actor the token names, with the prefix');
    t.equal(count(records, 'permit.rejected', 'POLICY_DENIED'), 1, 'the denial is on the record');
  }),
);

t.test('a held call runs once after a person approves it; a changed argument needs a new approval', (t) =>
  withHarness(t, backend!, async (h) => {
    const { mcp, connect } = await setUp(t, h);
    const client = await connect();
    const call = (id: string) => client.callTool({ name: 'get_ticket', arguments: { id } }) as Promise<ToolResult>;

    const held = await call('VIP-1');
    t.equal(held.isError, true, 'a held call does not run');
    t.equal(reasonOf(held), 'APPROVAL_REQUIRED');
    const approvalId = held._meta?.['countersign/approval_id'] as string;
    t.match(held._meta?.['countersign/approval_url'], `${h.authorityUrl}/console/?approval=${approvalId}`, "the link to the console's inbox");
    t.match(textOf(held), /make the same call again/, 'the text says to call again after the approval');
    const again = await call('VIP-1');
    t.equal(again._meta?.['countersign/approval_id'], approvalId, 'the same call, still waiting, names the same approval');
    t.equal(mcp.executions.get_ticket, undefined, 'nothing ran while it waits');

    await approve(t, h, approvalId);
    const approved = await call('VIP-1');
    t.same(approved.content, [{ type: 'text', text: 'ticket VIP-1: open' }], "the client's retry runs");
    t.equal(mcp.executions.get_ticket, 1, 'once');

    const third = await call('VIP-1');
    t.equal(third.isError, true, 'a third identical call does not run on the used approval');
    t.not(third._meta?.['countersign/approval_id'], approvalId, 'it needs a new approval');
    const changed = await call('VIP-2');
    t.equal(changed.isError, true, 'a changed argument does not run on the approval either');
    t.not(changed._meta?.['countersign/approval_id'], approvalId, 'it has an approval of its own');
    t.equal(mcp.executions.get_ticket, 1, 'the tool ran exactly once');

    const records = await eventually('the execution record', async () => {
      const all = await h.records();
      return count(all, 'execution.observed') === 1 ? all : undefined;
    });
    t.equal(count(records, 'permit.verified'), 1, 'one permit consumed');
    t.equal(count(records, 'permit.rejected'), 4, 'every held call is a recorded refusal');
  }),
);

t.test('the same approved call sent 50 times at once runs once', (t) =>
  withHarness(t, backend!, async (h) => {
    const { mcp, connect } = await setUp(t, h);
    const client = await connect();
    const held = (await client.callTool({ name: 'get_ticket', arguments: { id: 'VIP-1' } })) as ToolResult;
    await approve(t, h, held._meta?.['countersign/approval_id'] as string);
    const results = (await Promise.all(Array.from({ length: 50 }, () => client.callTool({ name: 'get_ticket', arguments: { id: 'VIP-1' } })))) as ToolResult[];
    t.equal(mcp.executions.get_ticket, 1, 'the tool ran once');
    t.equal(results.filter((r) => r.isError !== true).length, 1, 'one call got the result');
    t.equal(results.filter((r) => r.isError === true).length, 49, 'the others were refused');
  }),
);

t.test('a client that declared URL elicitation gets the hold as one', (t) =>
  withHarness(t, backend!, async (h) => {
    const { mcp, connect } = await setUp(t, h, { sessions: true });
    const client = await connect({ elicitation: true });
    const error = await client.callTool({ name: 'get_ticket', arguments: { id: 'VIP-1' } }).then(
      () => undefined,
      (caught: unknown) => caught,
    );
    t.ok(error instanceof UrlElicitationRequiredError, 'the SDK surfaces -32042 as UrlElicitationRequiredError');
    const elicitation = (error as UrlElicitationRequiredError).elicitations[0]!;
    t.equal((error as UrlElicitationRequiredError).code, -32042);
    t.equal(elicitation.mode, 'url');
    t.match(elicitation.url, new RegExp(`^${h.authorityUrl}/console/\\?approval=${elicitation.elicitationId}$`), 'a link to the approval');
    t.match(elicitation.message, /make the same call again/);

    const plain = await connect();
    const held = (await plain.callTool({ name: 'get_ticket', arguments: { id: 'VIP-1' } })) as ToolResult;
    t.equal(held.isError, true, 'a client of another session without the capability gets the isError answer');
    t.equal(held._meta?.['countersign/approval_id'], elicitation.elicitationId, 'naming the same approval');
    t.equal(mcp.executions.get_ticket, undefined, 'nothing ran');
  }),
);

t.test('a 2026-07-28 client gets the hold as an input_required URL elicitation, and its retry after the approval runs once', (t) =>
  withHarness(t, backend!, async (h) => {
    const { mcp, endpoint, token } = await setUp(t, h, { v2: true });
    const client = new ModernClient({ name: 'agent', version: '2.0.0' }, { versionNegotiation: { mode: { pin: FIRST_STATELESS_VERSION } }, capabilities: { elicitation: { url: {} } } });
    const elicited: Array<{ url?: string }> = [];
    // The person at the client opens the link, a person approves there, then the client carries on.
    client.setRequestHandler('elicitation/create', async (request) => {
      const params = request.params as { url?: string };
      elicited.push(params);
      const approvalId = new URL(params.url ?? 'http://x/').searchParams.get('approval');
      if (elicited.length === 1 && approvalId !== null) await approve(t, h, approvalId);
      return { action: 'accept' };
    });
    await client.connect(new ModernTransport(new URL(endpoint), { requestInit: { headers: { authorization: `Bearer ${await token()}` } } }));
    t.teardown(() => client.close());

    const result = (await client.callTool({ name: 'get_ticket', arguments: { id: 'VIP-1' } })) as ToolResult;
    t.equal(elicited.length, 1, 'the client was asked once to open the approval page');
    t.match(elicited[0]?.url, `${h.authorityUrl}/console/?approval=`, "the link to the console's approval");
    t.same(result.content, [{ type: 'text', text: 'ticket VIP-1: open' }], 'the retried call ran');
    t.equal(mcp.executions.get_ticket, 1, 'once');
  }),
);

t.test('no token, a token for another audience or a bad one: 401 with WWW-Authenticate, nothing runs', (t) =>
  withHarness(t, backend!, async (h) => {
    const { mcp, endpoint, token } = await setUp(t, h);
    const post = async (authorization?: string) => {
      const response = await request(endpoint, {
        method: 'POST',
        headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream', ...(authorization ? { authorization } : {}) },
        body: JSON.stringify({ jsonrpc: '2.0', id: 9, method: 'tools/call', params: { name: 'get_ticket', arguments: { id: 'T-1' } } }),
      });
      return { status: response.statusCode, challenge: response.headers['www-authenticate'], json: (await response.body.json()) as { id: number; error: { data: { reason: string } } } };
    };
    const none = await post();
    t.equal(none.status, 401, 'no token: 401');
    t.equal(none.challenge, 'Bearer');
    t.match(none.json, { id: 9, error: { code: -32600, data: { reason: 'UNAUTHENTICATED', error: 'unauthorized', status: 401 } } }, 'a JSON-RPC error body');

    const elsewhere = await post(`Bearer ${await token('support-1', 'https://other.example/mcp')}`);
    t.equal(elsewhere.status, 401, 'a token for another audience: 401');
    t.equal(elsewhere.challenge, 'Bearer error="invalid_token"');

    const forged = await post(`Bearer ${(await token()).slice(0, -4)}AAAA`);
    t.equal(forged.status, 401, 'a token whose signature fails: 401');

    t.equal(mcp.executions.get_ticket, undefined, 'nothing ran');
    const records = await h.records();
    t.equal(count(records, 'permit.rejected', 'UNAUTHENTICATED'), 3, 'each refusal is recorded');
  }),
);

t.test('pass_token: true forwards the caller’s token; the authority unreachable fails closed', (t) =>
  withHarness(t, backend!, async (h) => {
    const passing = await setUp(t, h, { inline: { pass_token: true } });
    const client = await passing.connect();
    await client.callTool({ name: 'get_ticket', arguments: { id: 'T-1' } });
    t.equal(passing.mcp.executions.get_ticket, 1);
    t.match(passing.mcp.authorizations!.at(-1), /^Bearer /, 'with pass_token the MCP server gets the Authorization header');

    const closed = createServer();
    const deadUrl = await listen(closed);
    await closeServer(closed);
    const cut = await setUp(t, h, { authorityUrl: deadUrl });
    const cutClient = await cut.connect();
    const result = (await cutClient.callTool({ name: 'get_ticket', arguments: { id: 'T-1' } })) as ToolResult;
    t.equal(result.isError, true, 'the call is refused');
    t.match(result._meta, { 'countersign/reason': 'AUTHORITY_UNAVAILABLE', 'countersign/status': 503 }, 'as an outage');
    t.match(textOf(result), /send the call again/);
    t.equal(cut.mcp.executions.get_ticket, undefined, 'nothing was forwarded');
  }),
);

t.test('a trusted hop names the caller in a header', (t) =>
  withHarness(t, backend!, async (h) => {
    const { mcp, endpoint } = await setUp(t, h, { inline: { actor: { header: 'x-authenticated-agent' } } });
    const post = async (headers: Record<string, string>) => {
      const response = await request(endpoint, {
        method: 'POST',
        headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream', ...headers },
        body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/call', params: { name: 'get_ticket', arguments: { id: 'T-1' } } }),
      });
      await response.body.text();
      return response.statusCode;
    };
    t.equal(await post({}), 401, 'without the header: 401');
    t.equal(mcp.executions.get_ticket, undefined);
    t.equal(await post({ 'x-authenticated-agent': 'support-1' }), 200);
    t.equal(mcp.executions.get_ticket, 1, 'with it, the call is decided and runs');
    const records = await eventually('the permit record', async () => {
      const all = await h.records();
      return count(all, 'permit.verified') === 1 ? all : undefined;
    });
    t.equal(records.find((r) => r.kind === 'permit.verified')!.actor_id, 'support-1', 'as the actor the header names');
  }),
);
