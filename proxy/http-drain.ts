/**
 * Draining a node:http server, for the forwarding server (server.ts) and the ext_authz HTTP
 * service (ext-authz/http-server.ts): it stops accepting, closes each kept-alive connection once
 * it is idle, and waits for the requests in flight, for up to `timeoutMs`. What a request that
 * arrives meanwhile on an open connection gets is the caller's to answer (503 `SHUTTING_DOWN`).
 *
 * @example
 *   draining = true;
 *   await drainHttpServer(server, inFlight, 10_000);
 */
import type { Server } from 'node:http';

export async function drainHttpServer(server: Server, inFlight: ReadonlySet<Promise<unknown>>, timeoutMs: number): Promise<void> {
  if (!server.listening && inFlight.size === 0) return;
  let sweep: NodeJS.Timeout | undefined;
  let deadline: NodeJS.Timeout | undefined;
  const closed = new Promise<void>((resolve) => {
    if (!server.listening) return resolve();
    server.close(() => resolve());
    // A connection that just answered stays open for keep-alive (Envoy keeps its connections to
    // the service too); close it once it is idle.
    sweep = setInterval(() => server.closeIdleConnections(), 25);
    server.closeIdleConnections();
  });
  // A request whose client left may still be at work (waiting for the upstream, or the gate), on no connection.
  const settled = closed.then(() => Promise.allSettled([...inFlight]));
  await Promise.race([settled, new Promise<void>((resolve) => (deadline = setTimeout(resolve, timeoutMs)))]);
  clearInterval(sweep);
  clearTimeout(deadline);
}
