/**
 * The demo upstream that `npm start` puts behind the proxy: `POST /echo/:id` answers what it
 * received, including the headers the proxy added, so the README walkthrough can show a request
 * that reached the protected system only after its permit was verified; `/mcp` is the demo MCP
 * server (demo-mcp.ts) that docs/mcp.md's walkthrough gates.
 *
 * @example
 *   const upstream = await startDemoUpstream({ host: '127.0.0.1', port: 7090 });
 *   // curl -X POST http://127.0.0.1:7090/echo/1 -d '{"hello":"world"}'
 *   await upstream.close();
 */
import { createServer, type IncomingMessage } from 'node:http';
import type { AddressInfo } from 'node:net';
import { DEMO_MCP_PATH, serveDemoMcp } from './demo-mcp.js';

export interface DemoUpstream {
  url: string;
  close(): Promise<void>;
}

const MAX_BODY_BYTES = 64 * 1024;

async function bodyOf(request: IncomingMessage): Promise<string> {
  let size = 0;
  const chunks: Buffer[] = [];
  for await (const chunk of request) {
    size += (chunk as Buffer).length;
    if (size > MAX_BODY_BYTES) break;
    chunks.push(chunk as Buffer);
  }
  return Buffer.concat(chunks).toString('utf8');
}

export async function startDemoUpstream(listen: { host: string; port: number }): Promise<DemoUpstream> {
  const server = createServer((request, response) => {
    if (request.url === DEMO_MCP_PATH) return serveDemoMcp(request, response);
    const match = /^\/echo\/([^/?]+)/.exec(request.url ?? '');
    if (request.method !== 'POST' || !match) {
      response.writeHead(404, { 'content-type': 'application/json' }).end(JSON.stringify({ error: 'not_found' }));
      return;
    }
    bodyOf(request).then(
      (body) => {
        response.writeHead(200, { 'content-type': 'application/json' }).end(
          JSON.stringify({
            echoed: decodeURIComponent(match[1] as string),
            body,
            permit_id: request.headers['x-countersign-permit-id'] ?? null,
            mode: request.headers['x-countersign-mode'] ?? null,
          }),
        );
      },
      () => response.destroy(),
    );
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(listen.port, listen.host, resolve);
  });
  const address = server.address() as AddressInfo;
  return {
    url: `http://${address.address}:${address.port}`,
    close: () => new Promise<void>((resolve) => server.close(() => resolve())),
  };
}
