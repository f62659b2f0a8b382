/**
 * An MCP server for the gate's tests built with the MCP SDK's v2 server package
 * (`@modelcontextprotocol/server`): `createMcpHandler` serves the 2026-07-28 protocol and, on the
 * same endpoint, 2025-era clients through its stateless fallback, on loopback through a small
 * node:http adapter. It counts what it runs and what it is sent, so tests assert on effects.
 *
 * Tools: `get_ticket {id}` (a text result), `fail_ticket {id}` (an `isError` result),
 * `slow_export {steps}` (one progress notification per step, then a result), `drop_tables {}` and
 * `secret_tool {}` (what a blocked and an unconfigured tool would do).
 *
 * @example
 *   const upstream = await startMcpUpstreamV2(t, { responseMode: 'sse' });
 *   upstream.url; // http://127.0.0.1:PORT (the endpoint is /mcp)
 *   upstream.executions.get_ticket; // how many times the tool ran
 */
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import { Readable } from 'node:stream';
import { createMcpHandler, McpServer } from '@modelcontextprotocol/server';
import type { Test } from 'tap';
import { z } from 'zod';
import { closeServer, listen } from './loopback.js';

export interface McpUpstreamV2 {
  url: string;
  /** Tool name → how many times it ran. */
  executions: Record<string, number>;
  /** Every JSON-RPC method POSTed, in arrival order. */
  methods: string[];
  /** The `params` of every `tools/call` POSTed, as sent. */
  callParams: Array<Record<string, unknown>>;
}

export interface McpUpstreamV2Options {
  /** How 2026-07-28 answers are sent: JSON unless the tool sends notifications first (auto), always an event stream, always JSON. */
  responseMode?: 'auto' | 'sse' | 'json';
  /** Answers a POSTed message itself (as JSON) when it returns a body; the SDK's server answers otherwise. */
  intercept?: (message: Record<string, unknown>) => unknown;
}

export async function startMcpUpstreamV2(t: Test, options: McpUpstreamV2Options = {}): Promise<McpUpstreamV2> {
  const upstream: McpUpstreamV2 = { url: '', executions: {}, methods: [], callParams: [] };
  const ran = (tool: string) => {
    upstream.executions[tool] = (upstream.executions[tool] ?? 0) + 1;
  };
  const text = (value: string) => [{ type: 'text' as const, text: value }];

  const handler = createMcpHandler(
    () => {
      const server = new McpServer({ name: 'helpdesk', version: '2.0.0' });
      server.registerTool('get_ticket', { description: 'Reads a ticket', inputSchema: z.object({ id: z.string() }) }, async ({ id }) => {
        ran('get_ticket');
        return { content: text(`ticket ${id}: open`) };
      });
      server.registerTool('fail_ticket', { description: 'Fails', inputSchema: z.object({ id: z.string() }) }, async ({ id }) => {
        ran('fail_ticket');
        return { content: text(`no ticket ${id}`), isError: true };
      });
      server.registerTool('slow_export', { description: 'Reports progress', inputSchema: z.object({ steps: z.number() }) }, async ({ steps }, ctx) => {
        ran('slow_export');
        const progressToken = ctx.mcpReq._meta?.progressToken;
        for (let step = 1; step <= steps; step++) {
          if (progressToken !== undefined) await ctx.mcpReq.notify({ method: 'notifications/progress', params: { progressToken, progress: step, total: steps } });
        }
        return { content: text(`exported in ${steps} steps`) };
      });
      server.registerTool('drop_tables', { description: 'Destroys data', inputSchema: z.object({}) }, async () => {
        ran('drop_tables');
        return { content: text('dropped') };
      });
      server.registerTool('secret_tool', { description: 'Not in the gate’s table', inputSchema: z.object({}) }, async () => {
        ran('secret_tool');
        return { content: text('secret') };
      });
      return server;
    },
    { responseMode: options.responseMode ?? 'auto', keepAliveMs: 0 },
  );

  const http = createServer((req, res) => {
    void serve(req, res).catch(() => {
      if (!res.headersSent) res.writeHead(500).end();
      else res.destroy();
    });
  });
  async function serve(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const chunks: Buffer[] = [];
    for await (const chunk of req) chunks.push(chunk as Buffer);
    const body = Buffer.concat(chunks);
    if (req.method === 'POST') {
      const message = note(body);
      const intercepted = message === undefined ? undefined : options.intercept?.(message);
      if (intercepted !== undefined) return void res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify(intercepted));
    }
    const headers = new Headers();
    for (const [name, value] of Object.entries(req.headers)) if (typeof value === 'string') headers.set(name, value);
    const request = new Request(`http://${req.headers.host ?? '127.0.0.1'}${req.url ?? '/'}`, {
      method: req.method ?? 'GET',
      headers,
      ...(req.method === 'POST' ? { body } : {}),
    });
    const response = await handler.fetch(request);
    res.writeHead(response.status, Object.fromEntries(response.headers.entries()));
    if (response.body === null) return void res.end();
    const stream = Readable.fromWeb(response.body as import('node:stream/web').ReadableStream<Uint8Array>);
    res.on('close', () => stream.destroy());
    stream.pipe(res);
  }
  /** Counts the body's messages; the message when the body is a single one. */
  function note(body: Buffer): Record<string, unknown> | undefined {
    let value: unknown;
    try {
      value = JSON.parse(body.toString('utf8'));
    } catch {
      return undefined;
    }
    for (const message of Array.isArray(value) ? value : [value]) {
      if (typeof message !== 'object' || message === null || typeof message.method !== 'string') continue;
      upstream.methods.push(message.method);
      if (message.method === 'tools/call') upstream.callParams.push(message.params as Record<string, unknown>);
    }
    return typeof value === 'object' && value !== null && !Array.isArray(value) ? (value as Record<string, unknown>) : undefined;
  }

  upstream.url = await listen(http);
  t.teardown(async () => {
    await handler.close();
    http.closeAllConnections();
    await closeServer(http);
  });
  return upstream;
}
