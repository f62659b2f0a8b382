/**
 * The demo MCP server of `countersign start` (bin/demo-mcp.ts, served at `/mcp` of the demo
 * upstream) speaks MCP: the official SDK's client (`@modelcontextprotocol/sdk` 1.x) connects to it
 * directly, with no gate between, negotiates the protocol, lists the helpdesk's tools and calls
 * them. Raw requests show the transport's edges: older protocol versions, notifications, GET, a
 * batch, a body that is not JSON.
 *
 * @example
 *   npx tap --disable-coverage dist/test/e2e/demo-mcp.test.js
 */
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import t from 'tap';
import { request } from 'undici';
import { DEMO_MCP_PROTOCOL } from '../../bin/demo-mcp.js';
import { startDemoUpstream } from '../../bin/demo-upstream.js';

const upstream = await startDemoUpstream({ host: '127.0.0.1', port: 0 });
t.teardown(() => upstream.close());
const endpoint = `${upstream.url}/mcp`;

const post = async (body: unknown, headers: Record<string, string> = {}) => {
  const response = await request(endpoint, {
    method: 'POST',
    headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream', ...headers },
    body: typeof body === 'string' ? body : JSON.stringify(body),
  });
  const text = await response.body.text();
  return { status: response.statusCode, json: text === '' ? undefined : (JSON.parse(text) as Record<string, any>) };
};

t.test("the SDK's client connects, lists the helpdesk's tools and calls them", async (t) => {
  const client = new Client({ name: 'demo-mcp-test', version: '1.0.0' });
  const transport = new StreamableHTTPClientTransport(new URL(endpoint));
  await client.connect(transport);
  t.teardown(() => client.close());
  t.equal(transport.protocolVersion, DEMO_MCP_PROTOCOL, 'the newest protocol the SDK speaks is negotiated');
  t.match(client.getServerVersion(), { name: 'helpdesk' });
  t.ok(client.getServerCapabilities()?.tools, 'it declares tools');

  const { tools } = await client.listTools();
  t.same(tools.map((tool) => tool.name), ['get_ticket', 'issue_refund', 'send_email', 'drop_database']);
  t.same(tools.find((tool) => tool.name === 'issue_refund')?.inputSchema.required, ['order', 'amount_usd']);

  const call = async (name: string, args: Record<string, unknown>) => (await client.callTool({ name, arguments: args })) as { content: Array<{ text: string }>; isError?: boolean };
  t.same((await call('get_ticket', { id: 'T-1' })).content, [{ type: 'text', text: 'ticket T-1: open, the customer asks for a refund on order A-17' }]);
  t.same((await call('issue_refund', { order: 'A-17', amount_usd: 40 })).content, [{ type: 'text', text: 'refunded 40 USD on A-17' }]);
  t.same((await call('send_email', { to: ['a@example.com', 'b@example.com'], subject: 'Your refund', body: 'Done.' })).content[0]?.text, 'sent "Your refund" to 2 recipients');
  t.same((await call('drop_database', { name: 'customers' })).content[0]?.text, 'dropped database customers', 'the tool the gate blocks answers here: no gate is in between');

  const invalid = await call('issue_refund', { order: 'A-17', amount_usd: 'forty' });
  t.equal(invalid.isError, true, 'arguments of the wrong type: a tool error the model can read');
  t.match(invalid.content[0]?.text, /^invalid arguments: /);
  await t.rejects(client.callTool({ name: 'mine_bitcoin', arguments: {} }), /unknown tool: mine_bitcoin/, 'an unknown tool is a protocol error (-32602)');
  await t.resolves(client.ping(), 'ping');
});

t.test('older protocol versions are accepted; one it does not speak is answered with its own', async (t) => {
  for (const version of ['2025-06-18', '2025-03-26', '2024-11-05']) {
    const answer = await post({ jsonrpc: '2.0', id: 1, method: 'initialize', params: { protocolVersion: version, capabilities: {}, clientInfo: { name: 'raw', version: '0' } } });
    t.equal(answer.json?.result.protocolVersion, version, `${version} is kept`);
  }
  const future = await post({ jsonrpc: '2.0', id: 1, method: 'initialize', params: { protocolVersion: '2099-01-01', capabilities: {}, clientInfo: { name: 'raw', version: '0' } } });
  t.equal(future.json?.result.protocolVersion, DEMO_MCP_PROTOCOL, 'an unknown version: the server proposes its own');
  const header = await post({ jsonrpc: '2.0', id: 2, method: 'ping' }, { 'mcp-protocol-version': '1999-01-01' });
  t.equal(header.status, 400, 'an MCP-Protocol-Version it does not speak is 400');
});

t.test('the transport: notifications 202, GET 405, one message per request, JSON only', async (t) => {
  const initialized = await post({ jsonrpc: '2.0', method: 'notifications/initialized' });
  t.same([initialized.status, initialized.json], [202, undefined], 'a notification: 202 without a body');
  const get = await request(endpoint, { method: 'GET', headers: { accept: 'text/event-stream' } });
  await get.body.dump();
  t.equal(get.statusCode, 405, 'no server-initiated stream: 405, as the transport allows');
  const batch = await post([{ jsonrpc: '2.0', id: 1, method: 'ping' }]);
  t.match(batch, { status: 400, json: { error: { code: -32600 } } }, 'a batch is refused');
  const notJson = await post('{"jsonrpc":');
  t.match(notJson, { status: 400, json: { error: { code: -32700 } } });
  const unknown = await post({ jsonrpc: '2.0', id: 3, method: 'resources/list' });
  t.match(unknown, { status: 200, json: { id: 3, error: { code: -32601 } } }, 'a method it does not serve: method not found');
  const huge = await post({ jsonrpc: '2.0', id: 4, method: 'tools/call', params: { name: 'get_ticket', arguments: { id: 'x'.repeat(70_000) } } });
  t.equal(huge.status, 413);
});

t.test('the demo upstream still echoes beside it', async (t) => {
  const response = await request(`${upstream.url}/echo/order-1`, { method: 'POST', body: 'hi' });
  t.match(await response.body.json(), { echoed: 'order-1', body: 'hi' });
});
