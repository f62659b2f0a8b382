/**
 * The MCP gate end to end: the official MCP SDK as client and as server (Streamable HTTP), the
 * proxy between them on loopback, permits from a test authority whose policy binds
 * `arguments_digest` for `agent.tool.invoke`. Asserts on what the MCP server ran and on the
 * verification records, never on time.
 *
 * @example
 *   npx tap --disable-coverage dist/test/e2e/mcp-gate.test.js
 */
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import t, { type Test } from 'tap';
import { request } from 'undici';
import { argumentsDigest } from '../../proxy/mcp/call-facts.js';
import { PERMIT_META_KEY } from '../../proxy/mcp/jsonrpc.js';
import { EvaluateResponse } from '../../shared/wire/evaluate.js';
import type { VerificationRecord } from '../../shared/wire/verification-records.js';
import { appBackends } from '../helpers/backends.js';
import { startMcpUpstream } from '../helpers/mcp-upstream.js';
import { eventually, proxyConfig, withHarness, type Harness } from '../helpers/proxy-harness.js';

const [backend] = appBackends();

/** Every tool call is allowed except the destructive one; the permit binds the arguments' digest. */
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
`;

const TOOLS = [
  { name: 'get_ticket' },
  { name: 'fail_*' },
  { name: 'slow_export', facts: { steps: { argument: '/steps' } } },
  { name: 'drop_tables', block: true },
];

async function setUp(t: Test, h: Harness, options: { mode?: 'shadow' } = {}) {
  const put = await request(`${h.authorityUrl}/v1/policies`, {
    method: 'PUT',
    headers: { ...h.authority.bearer(h.authority.acmeAdmin), 'content-type': 'application/json' },
    body: JSON.stringify({ source: POLICY, format: 'yaml' }),
  });
  const text = await put.body.text();
  if (put.statusCode !== 200) throw new Error(`PUT /v1/policies answered ${put.statusCode}: ${text}`);
  const mcp = await startMcpUpstream(t);
  const proxy = await h.startProxy({ upstream: mcp.url });
  const route = { name: 'helpdesk', match: { path: '/mcp' }, ...(options.mode ? { mode: options.mode } : {}), mcp: { server: 'helpdesk', tools: TOOLS } };
  proxy.setConfig(proxyConfig(h.authority.acme.id, mcp.url, { routes: [route] }));
  const client = new Client({ name: 'agent', version: '1.0.0' });
  await client.connect(new StreamableHTTPClientTransport(new URL(`${proxy.url}/mcp`)));
  t.teardown(() => client.close());
  return { mcp, proxy, client };
}

/** A permit for `tool` called with `args`, by actor agent-1. */
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

const withPermit = (token: string) => ({ [PERMIT_META_KEY]: token });
type ToolResult = { content?: unknown; isError?: boolean; _meta?: Record<string, unknown> };
const reasonOf = (result: ToolResult) => result._meta?.['countersign/reason'];
const count = (records: VerificationRecord[], kind: string, code?: string) => records.filter((r) => r.kind === kind && (code === undefined || r.code === code)).length;

t.test('tools/call is decided per tool; everything else that does not act passes', (t) =>
  withHarness(t, backend!, async (h) => {
    const { mcp, client } = await setUp(t, h);

    const tools = await client.listTools();
    t.same(tools.tools.map((tool) => tool.name).sort(), ['fail_ticket', 'get_ticket', 'slow_export'], 'initialize and tools/list pass, the blocked tool left out of the list');

    const token = await permitFor(h, 'get_ticket', { id: 'T-1' });
    const allowed = (await client.callTool({ name: 'get_ticket', arguments: { id: 'T-1' }, _meta: withPermit(token) })) as ToolResult;
    t.same(allowed.content, [{ type: 'text', text: 'ticket T-1: open' }], "the tool's result passes through unchanged");
    t.notOk(allowed.isError);
    t.equal(mcp.executions.get_ticket, 1, 'the tool ran once');
    t.notOk(mcp.metas[0] !== undefined && PERMIT_META_KEY in mcp.metas[0], 'the MCP server never sees the permit');

    const replayed = (await client.callTool({ name: 'get_ticket', arguments: { id: 'T-1' }, _meta: withPermit(token) })) as ToolResult;
    t.equal(replayed.isError, true, 'a replayed permit is refused');
    t.equal(reasonOf(replayed), 'PERMIT_ALREADY_USED');

    const none = (await client.callTool({ name: 'get_ticket', arguments: { id: 'T-2' } })) as ToolResult;
    t.equal(none.isError, true, 'a call without a permit is refused');
    t.equal(reasonOf(none), 'MISSING_PERMIT');
    t.match(JSON.stringify(none.content), new RegExp(`arguments_digest ${argumentsDigest({ id: 'T-2' })}`), 'the refusal says what to evaluate');

    const other = await permitFor(h, 'get_ticket', { id: 'T-3' });
    const changed = (await client.callTool({ name: 'get_ticket', arguments: { id: 'T-4' }, _meta: withPermit(other) })) as ToolResult;
    t.equal(reasonOf(changed), 'BINDING_MISMATCH', 'a changed argument is refused');

    const blocked = (await client.callTool({ name: 'drop_tables', arguments: {} })) as ToolResult;
    t.equal(reasonOf(blocked), 'TOOL_BLOCKED', 'a blocked tool is refused');

    const failing = await permitFor(h, 'fail_ticket', { id: 'T-5' });
    const failed = (await client.callTool({ name: 'fail_ticket', arguments: { id: 'T-5' }, _meta: withPermit(failing) })) as ToolResult;
    t.same(failed.content, [{ type: 'text', text: 'no ticket T-5' }], "the tool's own isError result passes through");
    t.equal(mcp.executions.get_ticket, 1, 'no refused call ran');
    t.equal(mcp.executions.drop_tables, undefined);

    const records = await eventually('the execution records', async () => {
      const all = await h.records();
      return count(all, 'execution.observed') === 2 ? all : undefined;
    });
    t.equal(count(records, 'permit.verified'), 2, 'each permitted call consumed its permit, with a record');
    t.equal(count(records, 'permit.rejected', 'PERMIT_ALREADY_USED'), 1);
    t.equal(count(records, 'permit.rejected', 'MISSING_PERMIT'), 1);
    t.equal(count(records, 'permit.rejected', 'BINDING_MISMATCH'), 1);
    t.equal(count(records, 'permit.rejected', 'TOOL_BLOCKED'), 1);
    t.same(
      records.map((r) => [r.kind, r.code, r.tool]),
      [
        ['permit.verified', '', 'get_ticket'],
        ['execution.observed', '', 'get_ticket'],
        ['permit.rejected', 'PERMIT_ALREADY_USED', 'get_ticket'],
        ['permit.rejected', 'MISSING_PERMIT', 'get_ticket'],
        ['permit.rejected', 'BINDING_MISMATCH', 'get_ticket'],
        ['permit.rejected', 'TOOL_BLOCKED', 'drop_tables'],
        ['permit.verified', '', 'fail_ticket'],
        ['execution.observed', 'TOOL_RESULT_ERROR', 'fail_ticket'],
      ],
      'every record of a tool call names its tool',
    );
    const executions = records.filter((r) => r.kind === 'execution.observed');
    t.same(
      executions.map((r) => [r.upstream, r.code]),
      [
        ['answered', ''],
        ['answered', 'TOOL_RESULT_ERROR'],
      ],
      "the records say whether the tool answered with isError",
    );
  }),
);

t.test('the same call with the same permit, 50 times at once, runs once', (t) =>
  withHarness(t, backend!, async (h) => {
    const { mcp, client } = await setUp(t, h);
    const token = await permitFor(h, 'get_ticket', { id: 'T-9' });
    const results = (await Promise.all(
      Array.from({ length: 50 }, () => client.callTool({ name: 'get_ticket', arguments: { id: 'T-9' }, _meta: withPermit(token) })),
    )) as ToolResult[];
    t.equal(mcp.executions.get_ticket, 1, 'the tool ran once');
    t.equal(results.filter((r) => r.isError !== true).length, 1, 'one call got the result');
    t.equal(results.filter((r) => reasonOf(r) === 'PERMIT_ALREADY_USED').length, 49, 'the others were refused as replays');
  }),
);

t.test("a streaming tool's progress notifications arrive through the gate", (t) =>
  withHarness(t, backend!, async (h) => {
    const { mcp, client } = await setUp(t, h);
    const token = await permitFor(h, 'slow_export', { steps: 3 });
    const progress: number[] = [];
    const result = (await client.callTool({ name: 'slow_export', arguments: { steps: 3 }, _meta: withPermit(token) }, undefined, {
      onprogress: (p) => progress.push(p.progress),
    })) as ToolResult;
    t.same(progress, [1, 2, 3], 'every progress notification arrived, in order');
    t.same(result.content, [{ type: 'text', text: 'exported in 3 steps' }]);
    t.equal(mcp.executions.slow_export, 1);
  }),
);

t.test('a method the gate does not understand, a batch that acts, and headers the body contradicts are refused', (t) =>
  withHarness(t, backend!, async (h) => {
    const { mcp, proxy } = await setUp(t, h);
    const post = async (body: unknown, headers: Record<string, string> = {}) => {
      const response = await request(`${proxy.url}/mcp`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream', ...headers },
        body: typeof body === 'string' ? body : JSON.stringify(body),
      });
      return { status: response.statusCode, json: (await response.body.json()) as Record<string, unknown> & Array<Record<string, unknown>> };
    };
    const before = mcp.methods.length;

    const unknown = await post({ jsonrpc: '2.0', id: 7, method: 'logging/setLevel', params: { level: 'debug' } });
    t.equal(unknown.status, 200);
    t.equal(unknown.json.id, 7, 'a JSON-RPC error with the request id');
    t.match(unknown.json.error, { code: -32600, data: { reason: 'MCP_METHOD_NOT_ALLOWED' } });

    const batch = await post([
      { jsonrpc: '2.0', id: 1, method: 'tools/list' },
      { jsonrpc: '2.0', id: 2, method: 'tools/call', params: { name: 'get_ticket', arguments: { id: 'T-1' } } },
    ]);
    t.same(batch.json.map((answer) => (answer.error as { data: { reason: string } }).data.reason), ['MCP_BATCH_REFUSED', 'MCP_BATCH_REFUSED']);

    const lying = await post({ jsonrpc: '2.0', id: 3, method: 'tools/call', params: { name: 'drop_tables', arguments: {} } }, { 'mcp-method': 'tools/call', 'mcp-name': 'get_ticket' });
    t.equal(lying.status, 400);
    t.match(lying.json.error, { code: -32020, data: { reason: 'MCP_HEADER_MISMATCH' } });

    const garbage = await post('{"jsonrpc": "2.0", "id": ');
    t.equal(garbage.status, 400);
    t.match(garbage.json.error, { code: -32700, data: { reason: 'MCP_UNREADABLE' } });

    t.equal(mcp.methods.length, before, 'the MCP server got none of them');
    const records = await h.records();
    for (const reason of ['MCP_METHOD_NOT_ALLOWED', 'MCP_BATCH_REFUSED', 'MCP_HEADER_MISMATCH', 'MCP_UNREADABLE']) {
      t.equal(count(records, 'permit.rejected', reason), 1, `${reason} is recorded`);
    }
    t.notOk(records.some((r) => r.tool !== undefined), 'with no tool: none of them is a call the gate read');
  }),
);

t.test('shadow forwards every call and records what enforce would have done', (t) =>
  withHarness(t, backend!, async (h) => {
    const { mcp, client } = await setUp(t, h, { mode: 'shadow' });
    const result = (await client.callTool({ name: 'get_ticket', arguments: { id: 'T-1' } })) as ToolResult;
    t.same(result.content, [{ type: 'text', text: 'ticket T-1: open' }], 'the call ran without a permit');
    t.equal(mcp.executions.get_ticket, 1);
    const records = await h.records();
    const rejected = records.filter((r) => r.kind === 'permit.rejected');
    t.same(
      rejected.map((r) => [r.mode, r.code, r.tool]),
      [['shadow', 'MISSING_PERMIT', 'get_ticket']],
      'the would-be block is recorded',
    );
  }),
);
