/**
 * An MCP server for the gate's tests, built with the official SDK (`@modelcontextprotocol/sdk`)
 * on the Streamable HTTP transport in its stateless mode (a server and a transport per request, as
 * the SDK's own stateless example does), or with `sessions: true` in its stateful one (a session
 * per `initialize`, named by `Mcp-Session-Id`), on loopback. It counts what it runs and what it is
 * sent, so tests assert on effects, never on time.
 *
 * Tools: `get_ticket {id}` (a text result), `fail_ticket {id}` (an `isError` result),
 * `slow_export {steps}` (one progress notification per step, then a result; answered as an
 * event stream), `drop_tables {}` (what a blocked tool would do), `issue_refund {order, amount_usd}`
 * (the example policy's `agent.tool` class holds a refund over 100 USD for a person).
 *
 * @example
 *   const upstream = await startMcpUpstream(t);
 *   upstream.url; // http://127.0.0.1:PORT (the endpoint is /mcp)
 *   upstream.executions.get_ticket; // how many times the tool ran
 */
import { randomUUID } from 'node:crypto';
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js';
import type { Test } from 'tap';
import { z } from 'zod';
import { closeServer, listen } from './loopback.js';

export interface McpUpstream {
  url: string;
  /** Tool name → how many times it ran. */
  executions: Record<string, number>;
  /** Every JSON-RPC method POSTed (batches counted per entry), in arrival order. */
  methods: string[];
  /** The `_meta` of every tool call the server ran. */
  metas: Array<Record<string, unknown> | undefined>;
  /** The Authorization header of every POST (undefined when none came), in arrival order. */
  authorizations: Array<string | undefined>;
}

export async function startMcpUpstream(t: Test, options: { sessions?: boolean } = {}): Promise<McpUpstream> {
  const upstream: McpUpstream = { url: '', executions: {}, methods: [], metas: [], authorizations: [] };
  const sessions = new Map<string, StreamableHTTPServerTransport>();
  const ran = (tool: string, meta: Record<string, unknown> | undefined) => {
    upstream.executions[tool] = (upstream.executions[tool] ?? 0) + 1;
    upstream.metas.push(meta);
  };

  function mcpServer(): McpServer {
    const server = new McpServer({ name: 'helpdesk', version: '1.0.0' });
    server.registerTool('get_ticket', { description: 'Reads a ticket', inputSchema: { id: z.string() } }, async ({ id }, extra) => {
      ran('get_ticket', extra._meta);
      return { content: [{ type: 'text', text: `ticket ${id}: open` }] };
    });
    server.registerTool('fail_ticket', { description: 'Fails', inputSchema: { id: z.string() } }, async ({ id }, extra) => {
      ran('fail_ticket', extra._meta);
      return { content: [{ type: 'text', text: `no ticket ${id}` }], isError: true };
    });
    server.registerTool('slow_export', { description: 'Reports progress', inputSchema: { steps: z.number() } }, async ({ steps }, extra) => {
      ran('slow_export', extra._meta);
      const progressToken = extra._meta?.progressToken;
      for (let step = 1; step <= steps; step++) {
        if (progressToken !== undefined) {
          await extra.sendNotification({ method: 'notifications/progress', params: { progressToken, progress: step, total: steps } });
        }
      }
      return { content: [{ type: 'text', text: `exported in ${steps} steps` }] };
    });
    server.registerTool('issue_refund', { description: 'Refunds an order', inputSchema: { order: z.string(), amount_usd: z.number() } }, async ({ order, amount_usd }, extra) => {
      ran('issue_refund', extra._meta);
      return { content: [{ type: 'text', text: `refunded ${amount_usd} USD on ${order}` }] };
    });
    server.registerTool('drop_tables', { description: 'Destroys data' }, async (extra) => {
      ran('drop_tables', extra._meta);
      return { content: [{ type: 'text', text: 'dropped' }] };
    });
    return server;
  }

  const http = createServer((req, res) => {
    void (async () => {
      const body = req.method === 'POST' ? await jsonBody(req) : undefined;
      for (const message of Array.isArray(body) ? body : [body]) {
        if (message !== undefined && typeof message === 'object' && message !== null && 'method' in message) upstream.methods.push(String(message.method));
      }
      if (req.method === 'POST') upstream.authorizations.push(req.headers.authorization);
      if (options.sessions === true) return handleInSession(req, res, body);
      const server = mcpServer();
      const transport = new StreamableHTTPServerTransport({ sessionIdGenerator: undefined });
      res.on('close', () => {
        void transport.close();
        void server.close();
      });
      await server.connect(transport);
      await transport.handleRequest(req, res, body);
    })().catch(() => {
      if (!res.headersSent) res.writeHead(500).end();
    });
  });
  async function handleInSession(req: IncomingMessage, res: ServerResponse, body: unknown): Promise<void> {
    const id = req.headers['mcp-session-id'];
    let transport = typeof id === 'string' ? sessions.get(id) : undefined;
    if (transport === undefined) {
      const created = new StreamableHTTPServerTransport({ sessionIdGenerator: () => randomUUID(), onsessioninitialized: (session) => void sessions.set(session, created) });
      await mcpServer().connect(created);
      transport = created;
    }
    await transport.handleRequest(req, res, body);
  }

  upstream.url = await listen(http);
  t.teardown(async () => {
    await Promise.all([...sessions.values()].map((transport) => transport.close()));
    http.closeAllConnections();
    return closeServer(http);
  });
  return upstream;
}

async function jsonBody(req: IncomingMessage): Promise<unknown> {
  const chunks: Buffer[] = [];
  for await (const chunk of req) chunks.push(chunk as Buffer);
  try {
    return JSON.parse(Buffer.concat(chunks).toString('utf8')) as unknown;
  } catch {
    return undefined;
  }
}
