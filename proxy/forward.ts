/**
 * Forwarding one request to the upstream on undici's lowest level, `dispatch`: the upstream's
 * answer is written straight into the client's response as it arrives, with no Readable, no
 * `stream.pipeline` and no AbortController per request in between. The benchmark chose it over
 * http-proxy-3 and undici's `request`: it spends about half their CPU per request
 * (docs/architecture.md, "Forwarding with undici `dispatch`").
 *
 * - Backpressure: when the client reads slowly, the upstream is paused until the response drains.
 * - The client leaving: before the request was handed to a connection, it is stopped there (it
 *   never leaves). Once it may have reached the upstream, the proxy waits for the upstream's status
 *   (bounded by the agent's headers timeout) without reading the answer's body, so that the record
 *   says what the upstream answered instead of "unknown". An answer under way is aborted.
 * - An upstream that fails before answering gets the caller's 502; one that fails halfway through
 *   an answer cuts the client's connection (the status line is already out, so that is the only
 *   honest signal left).
 *
 * @example
 *   const upstream = upstreamOf('http://127.0.0.1:7090/api');
 *   const result = await forwardRequest(agent, res, { upstream, target: '/echo/1', method: 'POST',
 *     headers: ['x-request-id', id], body: req, requestId: id });
 *   if (result.outcome === 'failed' && !result.clientGone) sendError(res, id, unavailableError(result.failure));
 */
import type { ServerResponse } from 'node:http';
import type { Readable } from 'node:stream';
import type { Dispatcher } from 'undici';
import { CountersignError } from '../shared/errors.js';
import { ATTR, SPAN } from '../shared/telemetry/attributes.js';
import { tracing } from '../shared/telemetry/index.js';
import type { UpstreamOutcome } from '../shared/wire/verification-records.js';
import { errorMessage, responseHeaders } from './http-messages.js';
import { classifyUpstreamFailure, ClientGone, type UpstreamFailure } from './upstream-outcome.js';

/** The upstream's origin and path prefix, parsed once per configuration (not per request). */
export interface Upstream {
  url: URL;
  origin: string;
  /** The upstream URL's path without a trailing slash, put before every forwarded path. */
  pathPrefix: string;
}

/** Throws without a URL: only a configuration with `ext_authz.only` has none, and it forwards nothing. */
export function upstreamOf(url: string | undefined): Upstream {
  if (url === undefined) throw new TypeError('the forwarding listener needs an upstream (the configuration has ext_authz.only: true)');
  const parsed = new URL(url);
  return { url: parsed, origin: parsed.origin, pathPrefix: parsed.pathname.replace(/\/+$/, '') };
}

export interface ForwardRequest {
  upstream: Upstream;
  /** Origin-form path and query, as the client sent it. */
  target: string;
  method: string;
  /** Flat [name, value, …] list (forwardHeaders). */
  headers: string[];
  body: Readable | Buffer | undefined;
  requestId: string;
  /** Sees the answer's headers and bytes as they pass to the client (the MCP gate reads a tool result's `isError`). */
  observer?: ResponseObserver;
}

export interface ResponseObserver {
  headers(headers: Record<string, string | string[] | undefined>): void;
  data(chunk: Buffer): void;
}

export type ForwardResult =
  /** The upstream answered and the answer reached the client whole. */
  | { outcome: 'answered'; status: number; durationMs: number }
  /**
   * The upstream answered, but not all of the answer reached the client: the upstream broke off
   * halfway (`by: 'upstream'`; the client's connection was cut), or the client left (`by: 'client'`).
   */
  | { outcome: 'cut_short'; by: 'upstream' | 'client'; status: number; durationMs: number; error?: unknown }
  /** No answer from the upstream; `failure` says whether the request may have reached it. Nothing was sent to the client. */
  | { outcome: 'failed'; failure: UpstreamFailure; clientGone: boolean; durationMs: number; error: unknown };

/**
 * Sends the request upstream and the answer to `res`; never rejects. With tracing on, in a CLIENT
 * span whose context the upstream receives as its `traceparent` (and `tracestate`), in place of
 * the caller's: the upstream's parent is this hop. With tracing off the caller's headers pass as sent.
 */
export function forwardRequest(agent: Dispatcher, res: ServerResponse, request: ForwardRequest): Promise<ForwardResult> {
  const traced = tracing;
  if (traced === null) return forwardOnce(agent, res, request);
  const upstream = request.upstream.url;
  return traced.inSpan(SPAN.forward, () => forwardOnce(agent, res, Object.assign({}, request, { headers: traced.withPropagation(request.headers) })), {
    kind: 'client',
    attributes: {
      [ATTR.httpMethod]: request.method,
      [ATTR.serverAddress]: upstream.hostname.replace(/^\[|\]$/g, ''),
      [ATTR.serverPort]: Number(upstream.port || (upstream.protocol === 'https:' ? 443 : 80)),
      [ATTR.urlScheme]: upstream.protocol.slice(0, -1),
      [ATTR.requestId]: request.requestId,
    },
    after: (result) => {
      const outcome = executionOutcome(result);
      return { [ATTR.httpStatus]: outcome.status ?? undefined, [ATTR.upstream]: outcome.upstream };
    },
    // As the HTTP conventions have it for a client: no whole answer, or a 4xx/5xx one, is an error.
    failure: (result) => (result.outcome !== 'answered' ? executionOutcome(result).code : result.status >= 400 ? String(result.status) : undefined),
  });
}

function forwardOnce(agent: Dispatcher, res: ServerResponse, request: ForwardRequest): Promise<ForwardResult> {
  const started = performance.now();
  return new Promise((resolve) => {
    let controller: Dispatcher.DispatchController | null = null;
    let status: number | null = null;
    let dispatched = false;
    let clientGone = false;
    let settled = false;
    const elapsed = () => performance.now() - started;
    const finish = (result: ForwardResult) => {
      if (settled) return;
      settled = true;
      res.off('close', onClose);
      res.off('drain', onDrain);
      resolve(result);
    };
    const onClose = () => {
      if (res.writableFinished) return;
      clientGone = true;
      if (status === null) return; // not sent yet: onRequestStart stops it; sent: wait for the status
      controller?.abort(new ClientGone());
      finish({ outcome: 'cut_short', by: 'client', status, durationMs: elapsed() });
    };
    const onDrain = () => controller?.resume();
    res.on('close', onClose);
    res.on('drain', onDrain);

    agent.dispatch(
      {
        origin: request.upstream.origin,
        path: request.upstream.pathPrefix + request.target,
        method: request.method as Dispatcher.HttpMethod,
        headers: request.headers,
        body: request.body ?? null,
      },
      {
        onRequestStart(started) {
          controller = started;
          // Aborted here, undici writes nothing: the request never leaves.
          if (clientGone || res.destroyed) {
            clientGone = true;
            return started.abort(new ClientGone());
          }
          dispatched = true;
        },
        onResponseStart(responding, statusCode, headers) {
          status = statusCode;
          if (clientGone) {
            // The status is what the record needs; the body has nowhere to go.
            responding.abort(new ClientGone());
            return finish({ outcome: 'cut_short', by: 'client', status: statusCode, durationMs: elapsed() });
          }
          request.observer?.headers(headers as Record<string, string | string[] | undefined>);
          res.writeHead(statusCode, responseHeaders(headers as Record<string, string | string[] | undefined>, request.requestId));
        },
        onResponseData(paused, chunk) {
          request.observer?.data(chunk);
          if (!res.write(chunk)) paused.pause();
        },
        onResponseEnd() {
          res.end();
          finish({ outcome: 'answered', status: status as number, durationMs: elapsed() });
        },
        onResponseError(_controller, error) {
          if (settled) return;
          const durationMs = elapsed();
          if (status === null) {
            return finish({ outcome: 'failed', failure: classifyUpstreamFailure(error, { dispatched, clientGone }), clientGone, durationMs, error });
          }
          if (clientGone) return finish({ outcome: 'cut_short', by: 'client', status, durationMs });
          res.destroy();
          finish({ outcome: 'cut_short', by: 'upstream', status, durationMs, error });
        },
      },
    );
  });
}

/** What the `execution.observed` record says about a forwarded request. */
export interface ExecutionOutcome {
  upstream: UpstreamOutcome;
  /** The upstream's status when it answered; null otherwise. */
  status: number | null;
  /** Stable; empty for a complete answer. */
  code: string;
  reason: string;
}

export function executionOutcome(result: ForwardResult): ExecutionOutcome {
  switch (result.outcome) {
    case 'answered':
      return { upstream: 'answered', status: result.status, code: '', reason: '' };
    case 'cut_short':
      return result.by === 'client'
        ? { upstream: 'answered', status: result.status, code: 'CLIENT_GONE', reason: 'the upstream answered; the client went away before the whole answer reached it' }
        : {
            upstream: 'answered',
            status: result.status,
            code: 'UPSTREAM_ANSWER_INTERRUPTED',
            reason: `the upstream broke off its answer (${result.error === undefined ? 'no detail' : errorMessage(result.error)}); the client got part of it`,
          };
    case 'failed':
      return { upstream: result.failure.upstream, status: null, code: result.failure.code, reason: result.failure.reason };
  }
}

/**
 * The caller's 502. Its `reason` says whether retrying is safe: after `UPSTREAM_NOT_REACHED`
 * nothing ran; after `UPSTREAM_RESULT_UNKNOWN` the action may have run.
 */
export function unavailableError(failure: UpstreamFailure): CountersignError {
  return failure.upstream === 'not_reached'
    ? new CountersignError('upstream_unavailable', 'The protected upstream could not be reached; the request never left the proxy, so nothing ran.', {
        reason: 'UPSTREAM_NOT_REACHED',
      })
    : new CountersignError('upstream_unavailable', 'The protected upstream did not answer; the request may have reached it and run. Check its effect before retrying.', {
        reason: 'UPSTREAM_RESULT_UNKNOWN',
      });
}
