/**
 * Forwarding one request to the upstream on undici's lowest level, `dispatch`: the upstream's
 * answer is written straight into the client's response as it arrives, with no Readable, no
 * `stream.pipeline` and no AbortController per request in between. The benchmark chose it over
 * http-proxy-3 and undici's `request` (README, Performance → Proxy): it spends about half their
 * CPU per request.
 *
 * - Backpressure: when the client reads slowly, the upstream is paused until the response drains.
 * - The client leaving before the answer is complete aborts the upstream request.
 * - An upstream that fails before answering gets the caller's 502; one that fails halfway through
 *   an answer cuts the client's connection (the status line is already out, so that is the only
 *   honest signal left).
 *
 * @example
 *   const upstream = upstreamOf('http://127.0.0.1:7090/api');
 *   const result = await forwardRequest(agent, res, { upstream, target: '/echo/1', method: 'POST',
 *     headers: ['x-request-id', id], body: req, requestId: id });
 *   if (result.outcome === 'unreachable') sendError(res, id, new CountersignError('upstream_unavailable'));
 */
import type { ServerResponse } from 'node:http';
import type { Readable } from 'node:stream';
import type { Dispatcher } from 'undici';
import { responseHeaders } from './http-messages.js';

/** The upstream's origin and path prefix, parsed once per configuration (not per request). */
export interface Upstream {
  url: URL;
  origin: string;
  /** The upstream URL's path without a trailing slash, put before every forwarded path. */
  pathPrefix: string;
}

export function upstreamOf(url: string): Upstream {
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
}

export type ForwardResult =
  /** The upstream answered and the answer reached the client whole. */
  | { outcome: 'answered'; status: number; durationMs: number }
  /** The upstream answered, but the answer broke off halfway; the client's connection was cut. */
  | { outcome: 'interrupted'; status: number; durationMs: number; error: Error }
  /** No answer from the upstream (refused, reset, timed out); nothing was sent to the client yet. */
  | { outcome: 'unreachable'; durationMs: number; error: Error }
  /** The client left before the answer was complete; the upstream request was aborted. */
  | { outcome: 'client_gone'; status: number | null; durationMs: number };

class ClientGone extends Error {
  readonly code = 'CLIENT_GONE';
}

/** Sends the request upstream and the answer to `res`; never rejects. */
export function forwardRequest(agent: Dispatcher, res: ServerResponse, request: ForwardRequest): Promise<ForwardResult> {
  const started = performance.now();
  return new Promise((resolve) => {
    let controller: Dispatcher.DispatchController | null = null;
    let status: number | null = null;
    let settled = false;
    const finish = (result: ForwardResult) => {
      if (settled) return;
      settled = true;
      res.off('close', onClose);
      res.off('drain', onDrain);
      resolve(result);
    };
    const onClose = () => {
      if (res.writableFinished) return;
      controller?.abort(new ClientGone('the client went away'));
      finish({ outcome: 'client_gone', status, durationMs: performance.now() - started });
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
          if (res.destroyed) started.abort(new ClientGone('the client went away'));
        },
        onResponseStart(_controller, statusCode, headers) {
          status = statusCode;
          res.writeHead(statusCode, responseHeaders(headers as Record<string, string | string[] | undefined>, request.requestId));
        },
        onResponseData(paused, chunk) {
          if (!res.write(chunk)) paused.pause();
        },
        onResponseEnd() {
          res.end();
          finish({ outcome: 'answered', status: status as number, durationMs: performance.now() - started });
        },
        onResponseError(_controller, error) {
          const durationMs = performance.now() - started;
          if (error instanceof ClientGone || settled) return finish({ outcome: 'client_gone', status, durationMs });
          if (status === null) return finish({ outcome: 'unreachable', durationMs, error });
          res.destroy();
          finish({ outcome: 'interrupted', status, durationMs, error });
        },
      },
    );
  });
}
