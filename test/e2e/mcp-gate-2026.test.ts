/**
 * The MCP gate and the 2026-07-28 protocol, end to end: the MCP SDK's v2 client speaking
 * 2026-07-28 and its v2 server (which serves 2025-era clients on the same endpoint) with the proxy
 * between them on loopback, the 1.x SDK client on the same gated endpoint, and `tools/list` as
 * the agent sees it. Asserts on what the MCP server ran and on the records, never on time.
 *
 * @example
 *   npx tap --disable-coverage dist/test/e2e/mcp-gate-2026.test.js
 */
import { Client, StreamableHTTPClientTransport } from '@modelcontextprotocol/client';
import { Client as Client1 } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport as Transport1 } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import t, { type Test } from 'tap';
import { request } from 'undici';
import { argumentsDigest } from '../../proxy/mcp/call-facts.js';
import { approvalInputRequired, FIRST_STATELESS_VERSION, PROTOCOL_VERSION_META_KEY } from '../../proxy/mcp/era.js';
import { PERMIT_META_KEY } from '../../proxy/mcp/jsonrpc.js';
import { EvaluateResponse } from '../../shared/wire/evaluate.js';
import type { VerificationRecord } from '../../shared/wire/verification-records.js';
import { appBackends } from '../helpers/backends.js';
import { startMcpUpstreamV2, type McpUpstreamV2Options } from '../helpers/mcp-upstream-v2.js';
import { proxyConfig, withHarness, type Harness } from '../helpers/proxy-harness.js';

const [backend] = appBackends();

const POLICY = `version: 1
action_classes:
  - id: agent.tool
    match:
      action_type: agent.tool.invoke
    actors: ['*']
    bind: [arguments_digest]
    default: allow
`;

/** `secret_tool` is on the server but in no entry: unconfigured. */
const TOOLS = [{ name: 'get_ticket' }, { name: 'fail_*' }, { name: 'slow_export', facts: { steps: { argument: '/steps' } } }, { name: 'drop_tables', block: true }];
const SERVED = ['drop_tables', 'fail_ticket', 'get_ticket', 'secret_tool', 'slow_export'];
const LISTED = ['fail_ticket', 'get_ticket', 'slow_export'];

const ENVELOPE = {
  [PROTOCOL_VERSION_META_KEY]: FIRST_STATELESS_VERSION,
  'io.modelcontextprotocol/clientInfo': { name: 'raw', version: '1.0.0' },
  'io.modelcontextprotocol/clientCapabilities': {},
};

async function setUp(t: Test, h: Harness, options: { mode?: 'shadow'; upstream?: McpUpstreamV2Options } = {}) {
  const put = await request(`${h.authorityUrl}/v1/policies`, {
    method: 'PUT',
    headers: { ...h.authority.bearer(h.authority.acmeAdmin), 'content-type': 'application/json' },
    body: JSON.stringify({ source: POLICY, format: 'yaml' }),
  });
  const text = await put.body.text();
  if (put.statusCode !== 200) throw new Error(`PUT /v1/policies answered ${put.statusCode}: ${text}`);
  const mcp = await startMcpUpstreamV2(t, options.upstream);
  const proxy = await h.startProxy({ upstream: mcp.url });
  const route = { name: 'helpdesk', match: { path: '/mcp' }, ...(options.mode ? { mode: options.mode } : {}), mcp: { server: 'helpdesk', tools: TOOLS } };
  proxy.setConfig(proxyConfig(h.authority.acme.id, mcp.url, { routes: [route] }));
  return { mcp, proxy, endpoint: new URL(`${proxy.url}/mcp`) };
}

/** A v2 client pinned to 2026-07-28 (no fallback to the 2025 handshake). */
async function modernClient(t: Test, endpoint: URL): Promise<Client> {
  const client = new Client({ name: 'agent', version: '2.0.0' }, { versionNegotiation: { mode: { pin: FIRST_STATELESS_VERSION } } });
  await client.connect(new StreamableHTTPClientTransport(endpoint));
  t.teardown(() => client.close());
  return client;
}

async function legacyClient(t: Test, endpoint: URL): Promise<Client1> {
  const client = new Client1({ name: 'agent', version: '1.0.0' });
  await client.connect(new Transport1(endpoint));
  t.teardown(() => client.close());
  return client;
}

async function permitFor(h: Harness, tool: string, args: Record<string, unknown>): Promise<string> {
  const response = await request(`${h.authorityUrl}/v1/evaluate`, {
    method: 'POST',
    headers: { ...h.authority.bearer(h.authority.acmeAdmin), 'content-type': 'application/json' },
    body: JSON.stringify({
      action_type: 'agent.tool.invoke',
      actor_id: 'agent-1',
      context: { target: { type: 'tool', id: `helpdesk/${tool}` }, arguments_digest: argumentsDigest(args), ...(tool === 'slow_export' ? { steps: args.steps } : {}) },
    }),
  });
  const decision = EvaluateResponse.parse(await response.body.json());
  if (decision.permit_token === undefined || decision.permit_token === null) throw new Error(`no permit: ${JSON.stringify(decision)}`);
  return decision.permit_token;
}

async function post(endpoint: URL, body: unknown, headers: Record<string, string> = {}) {
  const response = await request(endpoint, {
    method: 'POST',
    headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream', ...headers },
    body: JSON.stringify(body),
  });
  return { status: response.statusCode, json: (await response.body.json()) as { id?: unknown; result?: Record<string, unknown>; error?: Record<string, unknown> } };
}

const withPermit = (token: string) => ({ [PERMIT_META_KEY]: token });
type ToolResult = { content?: unknown; isError?: boolean; _meta?: Record<string, unknown> };
const reasonOf = (result: ToolResult) => result._meta?.['countersign/reason'];
const names = (tools: Array<{ name: string }>) => tools.map((tool) => tool.name).sort();
const count = (records: VerificationRecord[], kind: string, code?: string) => records.filter((r) => r.kind === kind && (code === undefined || r.code === code)).length;

t.test('2026-07-28: a call with its permit runs once; refusals are isError results the v2 client accepts', (t) =>
  withHarness(t, backend!, async (h) => {
    const { mcp, endpoint } = await setUp(t, h);
    const client = await modernClient(t, endpoint);
    t.equal(client.getProtocolEra(), 'modern', 'the client negotiated 2026-07-28 through the gate');

    t.same(names((await client.listTools()).tools), LISTED, 'tools/list holds neither the blocked nor the unconfigured tool');

    const token = await permitFor(h, 'get_ticket', { id: 'T-1' });
    const allowed = (await client.callTool({ name: 'get_ticket', arguments: { id: 'T-1' }, _meta: withPermit(token) })) as ToolResult;
    t.same(allowed.content, [{ type: 'text', text: 'ticket T-1: open' }], "the tool's result passes through");
    t.equal(mcp.executions.get_ticket, 1, 'the tool ran once');
    const sent = mcp.callParams.at(-1)!._meta as Record<string, unknown>;
    t.equal(sent[PROTOCOL_VERSION_META_KEY], FIRST_STATELESS_VERSION, 'the server got the 2026-07-28 envelope');
    t.notOk(PERMIT_META_KEY in sent, 'and not the permit');

    const replayed = (await client.callTool({ name: 'get_ticket', arguments: { id: 'T-1' }, _meta: withPermit(token) })) as ToolResult;
    t.equal(replayed.isError, true, 'a replay is an isError result, accepted by the v2 client');
    t.equal(reasonOf(replayed), 'PERMIT_ALREADY_USED');

    const none = (await client.callTool({ name: 'get_ticket', arguments: { id: 'T-2' } })) as ToolResult;
    t.equal(reasonOf(none), 'MISSING_PERMIT', 'a call without a permit is refused');
    const blocked = (await client.callTool({ name: 'drop_tables', arguments: {} })) as ToolResult;
    t.equal(reasonOf(blocked), 'TOOL_BLOCKED');
    const unconfigured = (await client.callTool({ name: 'secret_tool', arguments: {} })) as ToolResult;
    t.equal(reasonOf(unconfigured), 'TOOL_NOT_CONFIGURED');

    const failing = await permitFor(h, 'fail_ticket', { id: 'T-5' });
    const failed = (await client.callTool({ name: 'fail_ticket', arguments: { id: 'T-5' }, _meta: withPermit(failing) })) as ToolResult;
    t.same(failed.content, [{ type: 'text', text: 'no ticket T-5' }], "the tool's own isError result passes through");
    t.same(mcp.executions, { get_ticket: 1, fail_ticket: 1 }, 'no refused call ran');

    const records = await h.records();
    t.equal(count(records, 'permit.verified'), 2);
    t.equal(count(records, 'permit.rejected', 'PERMIT_ALREADY_USED'), 1);
    t.equal(count(records, 'permit.rejected', 'TOOL_NOT_CONFIGURED'), 1);
  }),
);

t.test("2026-07-28: a streaming tool's progress notifications arrive through the gate", (t) =>
  withHarness(t, backend!, async (h) => {
    const { mcp, endpoint } = await setUp(t, h);
    const client = await modernClient(t, endpoint);
    const token = await permitFor(h, 'slow_export', { steps: 3 });
    const progress: number[] = [];
    const result = (await client.callTool({ name: 'slow_export', arguments: { steps: 3 }, _meta: withPermit(token) }, { onprogress: (p) => progress.push(p.progress) })) as ToolResult;
    t.same(progress, [1, 2, 3], 'every progress notification arrived, in order');
    t.same(result.content, [{ type: 'text', text: 'exported in 3 steps' }]);
    t.equal(mcp.executions.slow_export, 1);
  }),
);

t.test('2026-07-28: an unknown method and headers the body contradicts are refused; a requestState passes to the server untouched', (t) =>
  withHarness(t, backend!, async (h) => {
    const { mcp, endpoint } = await setUp(t, h);
    const standard = (method: string, name?: string) => ({ 'mcp-protocol-version': FIRST_STATELESS_VERSION, 'mcp-method': method, ...(name ? { 'mcp-name': name } : {}) });
    const before = mcp.methods.length;

    const unknown = await post(endpoint, { jsonrpc: '2.0', id: 1, method: 'resources/subscribe', params: { uri: 'x://y', _meta: ENVELOPE } }, standard('resources/subscribe'));
    t.match(unknown.json.error, { code: -32600, data: { reason: 'MCP_METHOD_NOT_ALLOWED' } }, 'an unknown method is refused');

    const call = (name: string) => ({ jsonrpc: '2.0', id: 2, method: 'tools/call', params: { name, arguments: {}, _meta: ENVELOPE } });
    const lyingName = await post(endpoint, call('drop_tables'), standard('tools/call', 'get_ticket'));
    t.equal(lyingName.status, 400);
    t.match(lyingName.json.error, { code: -32020, data: { reason: 'MCP_HEADER_MISMATCH' } }, 'an Mcp-Name header naming another tool is refused, with MCP\'s HeaderMismatch code');
    const lyingMethod = await post(endpoint, call('get_ticket'), standard('tools/list'));
    t.match(lyingMethod.json.error, { code: -32020, data: { reason: 'MCP_HEADER_MISMATCH' } }, 'an Mcp-Method header naming another method is refused');
    const lyingVersion = await post(endpoint, call('get_ticket'), { ...standard('tools/call', 'get_ticket'), 'mcp-protocol-version': '2025-11-25' });
    t.match(lyingVersion.json.error, { code: -32020, data: { reason: 'MCP_HEADER_MISMATCH' } }, 'a protocol version header the _meta contradicts is refused');
    t.equal(mcp.methods.length, before, 'the MCP server got none of them');

    const refused = await post(endpoint, call('get_ticket'), standard('tools/call', 'get_ticket'));
    t.equal(refused.json.result?.resultType, 'complete', "the gate's own result says resultType complete");
    t.equal(refused.json.result?.isError, true);

    const token = await permitFor(h, 'get_ticket', { id: 'T-7' });
    const retried = {
      jsonrpc: '2.0',
      id: 3,
      method: 'tools/call',
      params: {
        name: 'get_ticket',
        arguments: { id: 'T-7' },
        inputResponses: { 'countersign/approval/apr_1': { action: 'accept' } },
        requestState: 'made-by-the-server',
        _meta: { ...ENVELOPE, ...withPermit(token) },
      },
    };
    const ran = await post(endpoint, retried, standard('tools/call', 'get_ticket'));
    t.same(ran.json.result?.content, [{ type: 'text', text: 'ticket T-7: open' }]);
    const params = mcp.callParams.at(-1)!;
    t.equal(params.requestState, 'made-by-the-server', 'the requestState reached the server as sent');
    t.notOk('inputResponses' in params, "the answer to the gate's own input request did not");
  }),
);

t.test('shadow forwards every 2026-07-28 call and lists every tool', (t) =>
  withHarness(t, backend!, async (h) => {
    const { mcp, endpoint } = await setUp(t, h, { mode: 'shadow' });
    const client = await modernClient(t, endpoint);
    t.same(names((await client.listTools()).tools), SERVED, 'nothing is hidden in shadow');
    const result = (await client.callTool({ name: 'secret_tool', arguments: {} })) as ToolResult;
    t.same(result.content, [{ type: 'text', text: 'secret' }], 'the call ran without a permit');
    t.equal(mcp.executions.secret_tool, 1);
    const records = await h.records();
    t.same(
      records.filter((r) => r.kind === 'permit.rejected').map((r) => [r.mode, r.code]),
      [['shadow', 'TOOL_NOT_CONFIGURED']],
      'the would-be block is recorded',
    );
  }),
);

t.test('one endpoint, both eras: the 1.x client reaches the same v2 server through the gate', (t) =>
  withHarness(t, backend!, async (h) => {
    const { mcp, endpoint } = await setUp(t, h);
    const client = await legacyClient(t, endpoint);
    t.same(names((await client.listTools()).tools), LISTED, 'the 2025-era list (an event stream) is filtered too');
    const token = await permitFor(h, 'get_ticket', { id: 'T-1' });
    const allowed = (await client.callTool({ name: 'get_ticket', arguments: { id: 'T-1' }, _meta: withPermit(token) })) as ToolResult;
    t.same(allowed.content, [{ type: 'text', text: 'ticket T-1: open' }]);
    const blocked = (await client.callTool({ name: 'drop_tables', arguments: {} })) as ToolResult;
    t.equal(reasonOf(blocked), 'TOOL_BLOCKED');
    t.notOk('resultType' in blocked, 'a 2025-era result carries no resultType');
    t.same(mcp.executions, { get_ticket: 1 }, 'the permitted call ran once, the blocked one never');

    const modern = await modernClient(t, endpoint);
    t.equal(modern.getProtocolEra(), 'modern', 'and a 2026-07-28 client on the same endpoint');
  }),
);

t.test('tools/list answered as an event stream is filtered, in both eras', (t) =>
  withHarness(t, backend!, async (h) => {
    const { endpoint } = await setUp(t, h, { upstream: { responseMode: 'sse' } });
    const client = await modernClient(t, endpoint);
    t.same(names((await client.listTools()).tools), LISTED, 'the v2 client reads the filtered stream');

    const list = (headers: Record<string, string>, meta?: Record<string, unknown>) =>
      request(endpoint, {
        method: 'POST',
        headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream', ...headers },
        body: JSON.stringify({ jsonrpc: '2.0', id: 9, method: 'tools/list', params: meta === undefined ? {} : { _meta: meta } }),
      });
    for (const [era, response] of [
      ['2026-07-28', await list({ 'mcp-protocol-version': FIRST_STATELESS_VERSION, 'mcp-method': 'tools/list' }, ENVELOPE)],
      ['2025-11-25', await list({ 'mcp-protocol-version': '2025-11-25' })],
    ] as const) {
      t.match(response.headers['content-type'], /^text\/event-stream/, `${era}: the answer is an event stream`);
      const events = (await response.body.text()).split('\n').filter((line) => line.startsWith('data:'));
      const answer = events.map((line) => JSON.parse(line.slice(5)) as { id?: number; result?: { tools: Array<{ name: string }> } }).find((m) => m.id === 9);
      t.same(names(answer?.result?.tools ?? []), LISTED, `${era}: its result event holds the filtered list`);
    }
  }),
);

t.test("the gate's approval answer for 2026-07-28 is an input_required result the v2 client fulfils", async (t) => {
  const approval = { approvalId: 'apr_1', url: 'https://countersign.example/console/approvals/apr_1', message: 'A person must approve this call first.' };
  let asked = 0;
  const mcp = await startMcpUpstreamV2(t, {
    intercept: (message) => {
      const params = message.params as Record<string, unknown> | undefined;
      if (message.method !== 'tools/call' || params?.inputResponses !== undefined) return undefined;
      asked++;
      return approvalInputRequired(message.id as number, approval);
    },
  });
  const elicited: unknown[] = [];
  const client = new Client(
    { name: 'agent', version: '2.0.0' },
    { versionNegotiation: { mode: { pin: FIRST_STATELESS_VERSION } }, capabilities: { elicitation: { url: {} } } },
  );
  client.setRequestHandler('elicitation/create', async (request) => {
    elicited.push(request.params);
    return { action: 'accept' };
  });
  await client.connect(new StreamableHTTPClientTransport(new URL(`${mcp.url}/mcp`)));
  t.teardown(() => client.close());
  const result = (await client.callTool({ name: 'get_ticket', arguments: { id: 'T-1' } })) as ToolResult;
  t.equal(asked, 1, 'the first round was answered input_required');
  t.same(elicited, [{ mode: 'url', message: approval.message, url: approval.url }], 'the client was asked to open the approval page');
  t.same(result.content, [{ type: 'text', text: 'ticket T-1: open' }], 'the retried call ran');
  t.same(mcp.callParams.at(-1)!.inputResponses, { 'countersign/approval/apr_1': { action: 'accept' } }, 'the retry answered the input request by its key');
  t.equal(mcp.executions.get_ticket, 1);
});
