/**
 * The demo MCP server that `countersign start` serves at `POST /mcp` of its demo upstream, so the
 * MCP route of config/proxy.yaml gates a real MCP endpoint with nothing else installed: a small
 * "helpdesk" on the Streamable HTTP transport, stateless (no `Mcp-Session-Id`), every answer JSON.
 * Written on node:http alone: the package does not depend on an MCP SDK.
 *
 * It speaks `initialize` (protocol 2025-11-25, and the earlier versions clients still send),
 * `notifications/*` (202), `ping`, `tools/list` and `tools/call`. Its tools do nothing real: each
 * answers with what it would have done.
 *
 *   get_ticket     {id}                         reads a ticket
 *   issue_refund   {order, amount_usd}           "refunded 40 USD on A-17"
 *   send_email     {to: [addresses], subject, body}
 *   drop_database  {name}                        what an agent must never run (blocked at the gate)
 *
 * @example
 *   createServer((req, res) => (req.url === DEMO_MCP_PATH ? serveDemoMcp(req, res) : notFound(res)));
 *   // POST /mcp {"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"issue_refund","arguments":{"order":"A-17","amount_usd":40}}}
 *   // → {"jsonrpc":"2.0","id":1,"result":{"content":[{"type":"text","text":"refunded 40 USD on A-17"}]}}
 */
import type { IncomingMessage, ServerResponse } from 'node:http';

/** Where the demo upstream serves it. */
export const DEMO_MCP_PATH = '/mcp';
/** The newest protocol version it speaks, and the ones before it that it accepts. */
export const DEMO_MCP_PROTOCOL = '2025-11-25';
const SUPPORTED_PROTOCOLS: readonly string[] = [DEMO_MCP_PROTOCOL, '2025-06-18', '2025-03-26', '2024-11-05'];
const MAX_BODY_BYTES = 64 * 1024;

type Json = Record<string, unknown>;
type ToolResult = { content: Array<{ type: 'text'; text: string }>; isError?: true };

interface DemoTool {
  description: string;
  inputSchema: Json;
  /** What the tool "ran", or why its arguments will not do (an `isError` result). */
  run(args: Json): string | { invalid: string };
}

const text = (description: string) => ({ type: 'string', description });

const TOOLS: Record<string, DemoTool> = {
  get_ticket: {
    description: 'Reads a support ticket.',
    inputSchema: { type: 'object', properties: { id: text('the ticket id, such as T-1') }, required: ['id'] },
    run: (args) => (typeof args.id === 'string' ? `ticket ${args.id}: open, the customer asks for a refund on order A-17` : { invalid: 'id must be a string' }),
  },
  issue_refund: {
    description: 'Refunds an order.',
    inputSchema: {
      type: 'object',
      properties: { order: text('the order id, such as A-17'), amount_usd: { type: 'number', description: 'the amount in USD' } },
      required: ['order', 'amount_usd'],
    },
    run: (args) =>
      typeof args.order === 'string' && typeof args.amount_usd === 'number'
        ? `refunded ${args.amount_usd} USD on ${args.order}`
        : { invalid: 'order must be a string and amount_usd a number' },
  },
  send_email: {
    description: 'Sends an email to customers.',
    inputSchema: {
      type: 'object',
      properties: { to: { type: 'array', items: text('an email address') }, subject: text('the subject'), body: text('the text') },
      required: ['to', 'subject', 'body'],
    },
    run: (args) =>
      Array.isArray(args.to) && args.to.every((to) => typeof to === 'string') && typeof args.subject === 'string' && typeof args.body === 'string'
        ? `sent "${args.subject}" to ${args.to.length} recipient${args.to.length === 1 ? '' : 's'}`
        : { invalid: 'to must be a list of addresses, subject and body strings' },
  },
  drop_database: {
    description: 'Drops a database, irreversibly.',
    inputSchema: { type: 'object', properties: { name: text('the database') }, required: ['name'] },
    run: (args) => (typeof args.name === 'string' ? `dropped database ${args.name}` : { invalid: 'name must be a string' }),
  },
};

const isObject = (value: unknown): value is Json => typeof value === 'object' && value !== null && !Array.isArray(value);

/** A JSON-RPC error object (JSON-RPC 2.0 codes). */
const rpcError = (id: unknown, code: number, message: string) => ({ jsonrpc: '2.0', id: id ?? null, error: { code, message } });

function callTool(params: Json): { result: ToolResult } | { error: [number, string] } {
  const tool = typeof params.name === 'string' && Object.hasOwn(TOOLS, params.name) ? TOOLS[params.name]! : undefined;
  if (tool === undefined) return { error: [-32602, `unknown tool: ${String(params.name)}`] };
  const args = params.arguments ?? {};
  if (!isObject(args)) return { result: { content: [{ type: 'text', text: 'the arguments must be an object' }], isError: true } };
  const ran = tool.run(args);
  return typeof ran === 'string'
    ? { result: { content: [{ type: 'text', text: ran }] } }
    : { result: { content: [{ type: 'text', text: `invalid arguments: ${ran.invalid}` }], isError: true } };
}

/**
 * The answer to one JSON-RPC message: `undefined` for a notification or a response (HTTP 202,
 * no body), else the JSON-RPC response to send with HTTP 200.
 */
function answerDemoMcp(message: Json): Json | undefined {
  const { id, method } = message;
  if (typeof method !== 'string' || id === undefined) return undefined;
  const params = isObject(message.params) ? message.params : {};
  switch (method) {
    case 'initialize': {
      const asked = params.protocolVersion;
      return {
        jsonrpc: '2.0',
        id,
        result: {
          // The client's version when this server speaks it, else the newest it speaks (the client then decides).
          protocolVersion: typeof asked === 'string' && SUPPORTED_PROTOCOLS.includes(asked) ? asked : DEMO_MCP_PROTOCOL,
          capabilities: { tools: { listChanged: false } },
          serverInfo: { name: 'helpdesk', version: '1.0.0' },
          instructions: 'A demo helpdesk shipped with Countersign: its tools answer what they would have done.',
        },
      };
    }
    case 'ping':
      return { jsonrpc: '2.0', id, result: {} };
    case 'tools/list':
      return { jsonrpc: '2.0', id, result: { tools: Object.entries(TOOLS).map(([name, tool]) => ({ name, description: tool.description, inputSchema: tool.inputSchema })) } };
    case 'tools/call': {
      const called = callTool(params);
      return 'result' in called ? { jsonrpc: '2.0', id, result: called.result } : rpcError(id, ...called.error);
    }
    default:
      return rpcError(id, -32601, `method not found: ${method}`);
  }
}

function send(res: ServerResponse, status: number, body?: unknown, headers: Record<string, string> = {}): void {
  if (body === undefined) {
    res.writeHead(status, headers).end();
    return;
  }
  const json = JSON.stringify(body);
  res.writeHead(status, { 'content-type': 'application/json', 'content-length': String(Buffer.byteLength(json)), ...headers }).end(json);
}

/** The body, or null when it is larger than MAX_BODY_BYTES (read to its end all the same, so the answer reaches the client). */
async function bodyOf(req: IncomingMessage): Promise<Buffer | null> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of req) {
    size += (chunk as Buffer).length;
    if (size <= MAX_BODY_BYTES) chunks.push(chunk as Buffer);
  }
  return size > MAX_BODY_BYTES ? null : Buffer.concat(chunks);
}

/** Serves one request to the MCP endpoint (Streamable HTTP, stateless, JSON answers). */
export function serveDemoMcp(req: IncomingMessage, res: ServerResponse): void {
  // No server-initiated stream (GET) and no sessions to end (DELETE): 405, which clients expect.
  if (req.method !== 'POST') return send(res, 405, rpcError(null, -32000, 'this server answers POST only'), { allow: 'POST' });
  const version = req.headers['mcp-protocol-version'];
  if (typeof version === 'string' && !SUPPORTED_PROTOCOLS.includes(version)) {
    return send(res, 400, rpcError(null, -32600, `unsupported protocol version ${version} (supported: ${SUPPORTED_PROTOCOLS.join(', ')})`));
  }
  bodyOf(req).then(
    (body) => {
      if (body === null) return send(res, 413, rpcError(null, -32600, `the message is larger than ${MAX_BODY_BYTES} bytes`));
      let message: unknown;
      try {
        message = JSON.parse(body.toString('utf8'));
      } catch {
        return send(res, 400, rpcError(null, -32700, 'the body is not JSON'));
      }
      if (!isObject(message) || message.jsonrpc !== '2.0') return send(res, 400, rpcError(null, -32600, 'one JSON-RPC 2.0 message per request'));
      const answer = answerDemoMcp(message);
      return answer === undefined ? send(res, 202) : send(res, 200, answer);
    },
    () => res.destroy(),
  );
}
