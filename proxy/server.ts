/**
 * The proxy's HTTP face on `node:http`: match the route, let the gate decide, then forward to the
 * upstream over a keep-alive undici `Agent` (created once; it pools per upstream origin), or answer
 * the error envelope. The upstream is contacted only after the gate said forward.
 *
 * - Matched routes: a body-bound route (`needsBody`) has its body buffered up to `max_body_bytes`
 *   (never more) before the check; any other route's body is not read before the check and is
 *   streamed afterwards. Enforce blocks answer `{error, message, status, request_id, reason}`.
 * - Unmatched routes: `unmatched: pass` streams them through (outcome `passthrough`);
 *   `unmatched: deny` answers 403 `forbidden`, reason `UNMATCHED_ROUTE` (not `permit_required`:
 *   no permit can ever open a path that is not a configured route).
 * - MCP routes (`mcp:`): the MCP gate decides each JSON-RPC message (mcp/serve.ts) and forwards
 *   through the same forwarding, answering refusals in JSON-RPC rather than the error envelope.
 * - WebSocket (any `Upgrade`) requests: piped through raw on unmatched `pass` paths; on a matched
 *   route 403 `forbidden`, reason `UPGRADE_ON_GATED_ROUTE`: the gate verifies HTTP requests, and
 *   an upgraded connection would carry any number of unverified actions.
 * - The permit header is never forwarded (also not on pass-through: it is a credential for the
 *   gate alone), nor are client-supplied `x-countersign-*` headers, so the upstream can trust them.
 * - A permitted request (verified, not a shadow would-block) gets an `execution.observed` record
 *   after the answer, appended within a few milliseconds in a batch with others
 *   (execution-records.ts); one the store cannot take is held and written once it is back
 *   (record-backlog.ts), and never changes the answer.
 *   It says whether the upstream answered (with the status), was not reached, or may have been
 *   (forward.ts, upstream-outcome.ts); the caller's 502 says the same in its `reason`.
 * - Tracing on (shared/telemetry): each request runs in a server span joining the caller's
 *   `traceparent`, named after its route when it is placed (`observe`); the gate's check and the
 *   forward are its children (gate.ts, forward.ts).
 * - Shutdown (`drain`): the listener stops accepting; requests in flight finish; a request that
 *   arrives during the drain on a kept-alive connection gets 503 `service_unavailable` (reason
 *   `SHUTTING_DOWN`) with `Connection: close`, before its permit is touched.
 *
 * @example
 *   const proxy = createProxyServer({ current: () => state, gate, executionRecords, metrics, logger });
 *   proxy.server.listen(config.listen.port, config.listen.host);
 *   await proxy.drain(10_000); // SIGTERM: in-flight requests finish, new ones get 503
 *   await proxy.close(); // cuts what is left, waits for pending records, closes the upstream pool
 */
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import { connect as netConnect, type Socket } from 'node:net';
import type { Readable } from 'node:stream';
import { connect as tlsConnect } from 'node:tls';
import type { Duplex } from 'node:stream';
import type { Logger } from 'pino';
import { Agent } from 'undici';
import { CountersignError } from '../shared/errors.js';
import { ATTR } from '../shared/telemetry/attributes.js';
import { tracing } from '../shared/telemetry/index.js';
import type { ProxyConfig } from './config.js';
import { recordExecution, type ExecutionRecords } from './execution-records.js';
import { executionOutcome, forwardRequest, unavailableError, upstreamOf, type ExecutionOutcome, type ResponseObserver, type Upstream } from './forward.js';
import type { Gate } from './gate.js';
import { countVerification, UNMATCHED_ROUTE, type ProxyMetrics, type RequestOutcome } from './metrics.js';
import { drainHttpServer } from './http-drain.js';
import { exchangeToolList } from './mcp/exchange.js';
import { createInlineGate, withheldHeaders } from './mcp/inline.js';
import { serveMcp, type McpServeContext } from './mcp/serve.js';
import { gateState, placeRequest, type GateState } from './placement.js';
import { ProxyStopped } from './upstream-outcome.js';
import {
  abortedWhenGone,
  type BufferedBody,
  bufferedBody,
  forwardHeaders,
  parseJson,
  queryOf,
  rawError,
  readBounded,
  requestIdOf,
  sendError,
  streamedBody,
  upgradeHead,
  withoutHeaders,
} from './http-messages.js';

export interface ProxyState extends GateState {
  /** config.upstream, parsed once. */
  upstream: Upstream;
}

/** The state a configuration serves with: its route table compiled and its upstream parsed. */
export function proxyState(config: ProxyConfig): ProxyState {
  return { upstream: upstreamOf(config.upstream), ...gateState(config) };
}

export interface ProxyServerOptions {
  /** A getter, so that a reload swaps the configuration and its route table in one step. */
  current: () => ProxyState;
  gate: Gate;
  /** Where permitted requests' `execution.observed` records go; the gate flushes it too. close() closes it. */
  executionRecords: ExecutionRecords;
  metrics: ProxyMetrics;
  logger: Logger;
  /** Upstream time limits (ms); defaults 30 s for the answer's headers, 300 s between body bytes. */
  upstreamHeadersTimeoutMs?: number;
  upstreamBodyTimeoutMs?: number;
  /**
   * How long an idle client connection is kept open (default 120 s). Longer than the idle timeout
   * of the clients in front (Go's 90 s, load balancers' 60 s): a client that reuses a connection
   * the server has just closed meets a reset, and a POST cannot always be retried after one.
   */
  keepAliveTimeoutMs?: number;
}

export interface ProxyServer {
  server: Server;
  /**
   * Stops accepting and lets the requests in flight finish, for up to `timeoutMs`; meanwhile new
   * requests on open connections get the 503 envelope. Resolves when nothing is left, or at the deadline.
   */
  drain(timeoutMs: number): Promise<void>;
  /** Cuts whatever is still open (the drain's leftovers), waits for pending records, closes the upstream pool. */
  close(): Promise<void>;
}

export const DEFAULT_KEEP_ALIVE_TIMEOUT_MS = 120_000;

export function createProxyServer(options: ProxyServerOptions): ProxyServer {
  const { current, gate, metrics, logger, executionRecords } = options;
  const agent = new Agent({
    keepAliveTimeout: 30_000,
    headersTimeout: options.upstreamHeadersTimeoutMs ?? 30_000,
    bodyTimeout: options.upstreamBodyTimeoutMs ?? 300_000,
  });
  // Inline MCP routes evaluate at the authority over the same pooled agent.
  const inline = createInlineGate({ dispatcher: agent, logger });
  const upgradeSockets = new Set<Duplex>();
  /** Requests being handled: a drain waits for them, and close() for their records. */
  const inFlight = new Set<Promise<void>>();
  let draining = false;

  async function handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const started = performance.now();
    // Every answer carries it: sendError's headers, or responseHeaders on a forwarded one.
    const requestId = requestIdOf(req);
    const state = current();
    // The same string is placed and forwarded (placement.ts, paths.ts).
    const placed = placeRequest(state, req.method ?? 'GET', req.url, req.headers);
    if (placed.kind === 'refuse') {
      observe(placed.route, placed.outcome, started);
      return sendError(res, requestId, placed.error);
    }
    const { target } = placed;
    if (placed.kind === 'pass') {
      const result = await forward(req, res, state, { target, requestId, route: UNMATCHED_ROUTE, body: streamedBody(req), added: {} });
      observe(UNMATCHED_ROUTE, result.status === null ? 'upstream_error' : 'passthrough', started);
      return;
    }

    const { route } = placed;
    if (route.mcp !== undefined) {
      const context: McpServeContext = {
        gate,
        metrics,
        logger,
        executionRecords,
        permitHeader: state.config.permit_header,
        inline,
        authorityUrl: state.config.authority.url,
        forward: (body, added, observer) =>
          forward(req, res, state, { target, requestId, route: route.name, body, added, observer, ownLength: true, withheld: withheldHeaders(route.mcp!) }),
        exchange: (body, added) =>
          exchangeToolList({ dispatcher: agent, metrics, logger }, req, res, {
            upstream: state.upstream, permitHeader: state.config.permit_header, target, requestId, route: route.name, body, added, withheld: withheldHeaders(route.mcp!),
          }),
        observe,
      };
      return serveMcp(context, req, res, { route, mcp: route.mcp, target, requestId, started });
    }
    let buffered: BufferedBody | undefined;
    if (route.needsBody) {
      const read = await readBounded(req, route.max_body_bytes);
      if (read === null) return; // the client went away; nothing to answer
      buffered = read;
    }
    const checkStarted = performance.now();
    const decision = await gate.check({
      route,
      params: placed.params,
      query: new URLSearchParams(queryOf(target)),
      headers: req.headers,
      ...(buffered !== undefined ? { body: buffered.tooLarge ? undefined : parseJson(buffered), bodyTooLarge: buffered.tooLarge } : {}),
      requestId,
      // A client that left before its permit was consumed does not spend it.
      signal: abortedWhenGone(res),
    });
    metrics.verificationDuration.observe({ route: route.name }, (performance.now() - checkStarted) / 1000);
    countVerification(metrics, route, decision);

    if (decision.action === 'block') {
      logger.info({ request_id: requestId, route: route.name, code: decision.code, reason: decision.reason, detail: decision.detail }, 'request blocked');
      observe(route.name, 'blocked', started);
      return sendError(res, requestId, new CountersignError(decision.code, decision.detail, { reason: decision.reason }));
    }
    if (decision.wouldBlock !== null) {
      logger.info({ request_id: requestId, route: route.name, code: decision.wouldBlock.code, reason: decision.wouldBlock.reason }, 'shadow: would have blocked');
    }
    const permitted = decision.wouldBlock === null && decision.permitId !== null;
    const added: Record<string, string> = { 'x-countersign-mode': decision.mode };
    if (permitted) added['x-countersign-permit-id'] = decision.permitId!;
    const body = buffered === undefined ? streamedBody(req) : bufferedBody(req, buffered);
    const result = await forward(req, res, state, { target, requestId, route: route.name, body, added });
    const outcome: RequestOutcome = result.status === null ? 'upstream_error' : decision.wouldBlock !== null ? 'would_block' : 'forwarded';
    observe(route.name, outcome, started);
    if (permitted) recordExecution(executionRecords, { route, decision, requestId, result });
  }

  function observe(route: string, outcome: RequestOutcome, started: number): void {
    metrics.requests.inc({ route, outcome });
    metrics.requestDuration.observe({ route }, (performance.now() - started) / 1000);
    tracing?.annotateRequest(route, { [ATTR.route]: route, [ATTR.outcome]: outcome });
  }

  interface ForwardInput {
    target: string;
    requestId: string;
    route: string;
    body: Readable | Buffer | undefined;
    added: Record<string, string>;
    /** Sees the answer as it passes (the MCP gate reads a tool result). */
    observer?: ResponseObserver | undefined;
    /** The body is a message the MCP gate may have rewritten: a Buffer goes with its own length. */
    ownLength?: boolean;
    /** Request headers the upstream must not get (lower case): an inline MCP route's caller token. */
    withheld?: readonly string[];
  }

  /** What the execution record and the metrics need: the upstream's status (null: no answer). */
  interface ForwardSummary extends ExecutionOutcome {
    durationMs: number;
  }

  async function forward(req: IncomingMessage, res: ServerResponse, state: ProxyState, input: ForwardInput): Promise<ForwardSummary> {
    let headers = forwardHeaders(req, state.config.permit_header, input.requestId, input.added);
    // A rewritten message goes with its own length (undici sets it from the Buffer).
    if (input.ownLength === true && Buffer.isBuffer(input.body)) headers = withoutHeaders(headers, ['content-length']);
    if (input.withheld !== undefined && input.withheld.length > 0) headers = withoutHeaders(headers, input.withheld);
    const result = await forwardRequest(agent, res, {
      upstream: state.upstream,
      target: input.target,
      method: req.method ?? 'GET',
      headers,
      body: input.body,
      requestId: input.requestId,
      ...(input.observer !== undefined ? { observer: input.observer } : {}),
    });
    const summary: ForwardSummary = { durationMs: result.durationMs, ...executionOutcome(result) };
    if (result.outcome === 'answered') return summary;
    const context = { request_id: input.requestId, route: input.route, upstream: summary.upstream, code: summary.code };
    if (result.outcome === 'cut_short' && result.by === 'upstream') {
      metrics.upstreamErrors.inc({ route: input.route });
      logger.warn({ err: result.error, ...context }, 'upstream answer interrupted');
    } else if (result.outcome === 'cut_short') {
      logger.info(context, 'client went away before the upstream answer reached it');
    } else if (result.outcome === 'failed') {
      // A client leaving or the proxy stopping is not the upstream's failure.
      if (result.failure.code === 'CLIENT_GONE' || result.failure.code === 'PROXY_STOPPED') {
        logger.info({ err: result.error, ...context }, 'forwarding ended before the upstream answered');
      } else {
        metrics.upstreamErrors.inc({ route: input.route });
        logger.warn({ err: result.error, ...context }, 'upstream unavailable');
      }
      if (!result.clientGone) sendError(res, input.requestId, unavailableError(result.failure));
    }
    return summary;
  }

  function handleUpgrade(req: IncomingMessage, socket: Duplex, head: Buffer): void {
    const requestId = requestIdOf(req);
    socket.on('error', () => socket.destroy());
    if (draining) return rawError(socket, requestId, shuttingDown());
    const state = current();
    const placed = placeRequest(state, req.method ?? 'GET', req.url, req.headers, { upgrade: true });
    if (placed.kind === 'refuse') {
      metrics.requests.inc({ route: placed.route, outcome: placed.outcome });
      rawError(socket, requestId, placed.error);
      return;
    }
    const { target } = placed;
    const upstream = state.upstream.url;
    const port = Number(upstream.port || (upstream.protocol === 'https:' ? 443 : 80));
    const host = upstream.hostname.replace(/^\[|\]$/g, '');
    const upstreamSocket: Socket =
      upstream.protocol === 'https:' ? tlsConnect({ host, port, servername: host }) : netConnect({ host, port });
    upgradeSockets.add(socket);
    upgradeSockets.add(upstreamSocket);
    let connected = false;
    upstreamSocket.on(upstream.protocol === 'https:' ? 'secureConnect' : 'connect', () => {
      connected = true;
      metrics.requests.inc({ route: UNMATCHED_ROUTE, outcome: 'passthrough' });
      upstreamSocket.write(upgradeHead(req, state.upstream.pathPrefix + target, upstream.host, state.config.permit_header, requestId));
      if (head.length > 0) upstreamSocket.write(head);
      upstreamSocket.pipe(socket);
      socket.pipe(upstreamSocket);
    });
    upstreamSocket.on('error', (error) => {
      if (!connected) {
        metrics.requests.inc({ route: UNMATCHED_ROUTE, outcome: 'upstream_error' });
        metrics.upstreamErrors.inc({ route: UNMATCHED_ROUTE });
        logger.warn({ err: error, request_id: requestId }, 'upstream unavailable for an upgrade');
        rawError(socket, requestId, new CountersignError('upstream_unavailable'));
      } else {
        socket.destroy();
      }
    });
    const cleanup = () => {
      upgradeSockets.delete(socket);
      upgradeSockets.delete(upstreamSocket);
      socket.destroy();
      upstreamSocket.destroy();
    };
    socket.on('close', cleanup);
    upstreamSocket.on('close', () => {
      if (connected) cleanup();
    });
  }

  const server = createServer((req, res) => {
    if (draining) {
      // Before anything else, so the permit it carries stays unused for the retry elsewhere.
      res.setHeader('connection', 'close');
      return sendError(res, requestIdOf(req), shuttingDown());
    }
    // Tracing on: the request's server span, joining the caller's trace (shared/telemetry).
    const traced = tracing;
    const handled = (traced === null ? handle(req, res) : traced.serve(req, res, () => handle(req, res))).catch((error: unknown) => {
      // A bug or an unexpected failure: answer what can still be answered, never crash.
      logger.error({ err: error }, 'proxy request failed');
      if (!res.headersSent && !res.destroyed) sendError(res, requestIdOf(req), new CountersignError('internal'));
      else res.destroy();
    });
    inFlight.add(handled);
    void handled.finally(() => inFlight.delete(handled));
  });
  server.keepAliveTimeout = options.keepAliveTimeoutMs ?? DEFAULT_KEEP_ALIVE_TIMEOUT_MS;
  server.on('upgrade', handleUpgrade);
  server.on('clientError', (error: NodeJS.ErrnoException, socket: Duplex) => {
    if (socket.writable && error.code !== 'ECONNRESET') socket.end('HTTP/1.1 400 Bad Request\r\nConnection: close\r\nContent-Length: 0\r\n\r\n');
    else socket.destroy();
  });

  async function drain(timeoutMs: number): Promise<void> {
    draining = true;
    await drainHttpServer(server, inFlight, timeoutMs);
  }

  return {
    server,
    drain,
    async close() {
      draining = true;
      // Upgraded sockets left node:http's bookkeeping but still hold server.close() open.
      for (const socket of upgradeSockets) socket.destroy();
      await new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      });
      // What is still in flight is past the drain: its record says the proxy stopped it.
      await agent.destroy(new ProxyStopped());
      await Promise.allSettled([...inFlight]);
      await executionRecords.close();
    },
  };
}

function shuttingDown(): CountersignError {
  return new CountersignError('service_unavailable', 'The proxy is shutting down; nothing was forwarded and the permit was not used. Send the request again.', {
    reason: 'SHUTTING_DOWN',
  });
}

// ---- requests ----
