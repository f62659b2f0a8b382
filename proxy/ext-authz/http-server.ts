/**
 * Envoy's HTTP authorization service on `node:http`: Envoy's ext_authz filter with `http_service`
 * (or an Istio `envoyExtAuthzHttp` provider) sends each client request's method, its path behind
 * `path_prefix`, the headers it is allowed to send, and (with `with_request_body`) the buffered
 * body. The gate answers (check.ts):
 *
 * - 200: allowed. `x-countersign-mode` and `x-countersign-permit-id` are for Envoy to set on the
 *   request (list them in `allowed_upstream_headers`); `x-envoy-auth-headers-to-remove` names the
 *   headers Envoy removes (the permit header; any x-countersign-* header the gate does not set).
 * - Anything else: denied; Envoy answers the client with this status, headers and body (the error
 *   envelope). Envoy treats a 5xx from the service as a failed check: it answers `status_on_error`
 *   (403 unless set) without this body, or lets the request through under `failure_mode_allow`,
 *   which must stay false.
 * - A caller that gave up spends nothing: `checkTimeoutMs` (Envoy's timeout, which it does not
 *   send) bounds the consume, less the answer's margin (check.ts), and Envoy closing the
 *   connection aborts it; a consume landing after either is not made or is undone.
 * - Request heads up to `maxHeaderBytes` (Envoy accepts 60 KiB of headers by default, and always
 *   sends `Authorization`): a larger limit than node:http's 16 KiB, so no check gets a bare 431.
 * - Drain: the listener stops accepting, checks in flight finish, a check arriving meanwhile on an
 *   open connection gets 503 `service_unavailable` (Envoy fails it closed).
 *
 * @example
 *   const http = await startExtAuthzHttp({ listen: { host: '127.0.0.1', port: 9192 }, pathPrefix: '/authz',
 *     checkTimeoutMs: 200, maxHeaderBytes: 64 * 1024, check, logger });
 *   http.url; // http://127.0.0.1:9192
 *   await http.drain(10_000);
 *   await http.close();
 */
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { Logger } from 'pino';
import { CountersignError } from '../../shared/errors.js';
import { drainHttpServer } from '../http-drain.js';
import { abortedWhenGone, readBounded, sendError } from '../http-messages.js';
import { envoyBodySent, requestIdFrom, type ExtAuthzCheck, type ExtAuthzVerdict } from './check.js';

export interface ExtAuthzHttpOptions {
  listen: { host: string; port: number };
  /** Envoy's `http_service.path_prefix`: taken off the path before it is placed; '' for none. */
  pathPrefix: string;
  /** How long Envoy waits for an answer (its `http_service.server_uri.timeout`), in ms. */
  checkTimeoutMs: number;
  /** The largest request head accepted, in bytes (node:http's `maxHeaderSize`). */
  maxHeaderBytes: number;
  check: ExtAuthzCheck;
  logger: Logger;
}

export interface ExtAuthzHttpServer {
  /** `http://host:port` as bound. */
  url: string;
  /** False once a drain began. */
  serving(): boolean;
  /** Stops accepting and lets checks in flight finish, for up to `timeoutMs`. */
  drain(timeoutMs: number): Promise<void>;
  /** Cuts whatever is left. */
  close(): Promise<void>;
}

/** Envoy removes the headers this response header lists (comma-separated) before forwarding. */
export const HEADERS_TO_REMOVE = 'x-envoy-auth-headers-to-remove';

export async function startExtAuthzHttp(options: ExtAuthzHttpOptions): Promise<ExtAuthzHttpServer> {
  const { check, logger, pathPrefix, checkTimeoutMs } = options;
  const inFlight = new Set<Promise<void>>();
  let draining = false;

  async function handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    // Envoy stops waiting after its timeout, and closes the connection when it gives up earlier.
    const deadlineMs = Date.now() + checkTimeoutMs;
    const requestId = requestIdFrom(req.headers);
    const url = req.url ?? '';
    // Envoy sends path_prefix + the client's path, and the client's path starts with `/`.
    if (pathPrefix !== '' && !(url.startsWith(`${pathPrefix}/`) || url === pathPrefix || url.startsWith(`${pathPrefix}?`))) {
      const error = new CountersignError('invalid_request', `The check request's path does not start with the configured path_prefix ${pathPrefix}.`, { reason: 'PATH_PREFIX_MISMATCH' });
      return respond(res, requestId, check.refuseMalformed('http', error));
    }
    let target = url.slice(pathPrefix.length);
    if (target === '' || target.startsWith('?')) target = `/${target}`;
    const verdict = await check.decide('http', {
      method: req.method ?? 'GET',
      target,
      headers: req.headers,
      requestId,
      deadlineMs,
      signal: abortedWhenGone(res),
      body: async (limit) => {
        const sent = envoyBodySent(req.headers);
        if (sent !== 'whole') return { sent };
        const body = await readBounded(req, limit);
        return body === null ? null : { sent, body };
      },
    });
    if (verdict === null) return; // Envoy gave up on the check while its body was read
    respond(res, requestId, verdict);
  }

  const server = createServer({ maxHeaderSize: options.maxHeaderBytes }, (req, res) => {
    if (draining) {
      res.setHeader('connection', 'close');
      return sendError(res, requestIdFrom(req.headers), shuttingDown());
    }
    const handled = handle(req, res).catch((error: unknown) => {
      // A bug or an unexpected failure: a denial, never an allow.
      logger.error({ err: error }, 'ext_authz HTTP check failed');
      if (!res.headersSent && !res.destroyed) sendError(res, requestIdFrom(req.headers), new CountersignError('internal'));
      else res.destroy();
    });
    inFlight.add(handled);
    void handled.finally(() => inFlight.delete(handled));
  });

  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(options.listen.port, options.listen.host, () => {
      server.off('error', reject);
      resolve();
    });
  });
  const bound = server.address() as AddressInfo;
  const url = `http://${bound.family === 'IPv6' ? `[${bound.address}]` : bound.address}:${bound.port}`;

  return {
    url,
    serving: () => !draining,
    async drain(timeoutMs) {
      draining = true;
      await drainHttpServer(server, inFlight, timeoutMs);
    },
    async close() {
      draining = true;
      await new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      });
      await Promise.allSettled([...inFlight]);
    },
  };
}

function respond(res: ServerResponse, requestId: string, verdict: ExtAuthzVerdict): void {
  if (!verdict.allow) return sendError(res, requestId, verdict.error);
  // A body left unread (the route binds no body facts) is small, Envoy having buffered it:
  // node:http discards it after the answer and keeps the connection.
  res.writeHead(
    200,
    Object.assign({}, verdict.set, {
      [HEADERS_TO_REMOVE]: verdict.remove.join(', '),
      'content-length': 0,
      'cache-control': 'no-store',
    }),
  );
  res.end();
}

function shuttingDown(): CountersignError {
  return new CountersignError('service_unavailable', 'The authorizer is shutting down; no permit was used. Envoy fails this check closed.', { reason: 'SHUTTING_DOWN' });
}
