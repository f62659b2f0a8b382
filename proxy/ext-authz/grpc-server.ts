/**
 * `envoy.service.auth.v3.Authorization/Check` on @grpc/grpc-js: Envoy's ext_authz filter (or an
 * Istio `CUSTOM` policy with an `envoyExtAuthzGrpc` provider) asks, the gate answers (check.ts).
 *
 * - The request's method and path come from `attributes.request.http` (`:method`/`:path` as a
 *   fallback), its headers from `http.headers`, or from `http.header_map` when Envoy sends raw
 *   headers (a header repeated there stays a list, which the gate refuses as ambiguous where it
 *   matters), its body from `http.raw_body` (`pack_as_bytes`) or `http.body`.
 * - Every decision is an answered `CheckResponse`, never a failed call: OK with an
 *   `OkHttpResponse` (headers set with `append: false`, headers to remove), or a denial whose
 *   `google.rpc.Status` matches the HTTP status (403 PERMISSION_DENIED, 503 UNAVAILABLE, 400
 *   INVALID_ARGUMENT, 500 INTERNAL) with a `DeniedHttpResponse` carrying the error envelope. A
 *   failed call would be Envoy's `status_on_error`, or an allow with `failure_mode_allow`.
 * - A caller that gave up spends nothing: the call's deadline (Envoy's `grpc-timeout`) bounds the
 *   consume, less the answer's margin (check.ts), and a cancelled call aborts it; a consume landing
 *   after either is not made or is undone.
 * - `grpc.health.v1.Health` on the same listener reports the proxy's readiness (grpc-health.ts).
 * - Drain: new calls are refused (Envoy fails them closed), calls in flight finish, health watches
 *   end with NOT_SERVING.
 *
 * @example
 *   const grpc = await startExtAuthzGrpc({ listen: { host: '127.0.0.1', port: 9191 }, check, logger });
 *   grpc.address; // 127.0.0.1:9191
 *   await grpc.drain(10_000);
 *   await grpc.close();
 */
import type { IncomingHttpHeaders } from 'node:http';
import { Server, ServerCredentials, type sendUnaryData, type ServerUnaryCall } from '@grpc/grpc-js';
import type { Logger } from 'pino';
import { CountersignError, errorEnvelope, withErrorHeaders } from '../../shared/errors.js';
import { headerBytes } from '../header-text.js';
import { envoyBodySent, requestIdFrom, wholeBody, type CallerLimits, type ExtAuthzCheck, type ExtAuthzRequest, type ExtAuthzVerdict } from './check.js';
import { addHealthService } from './grpc-health.js';
import { authorizationService, GRPC_CODE, type CheckRequest, type CheckResponse, type HeaderValueOption, type HttpRequestAttributes } from './protos.js';

export interface ExtAuthzGrpcOptions {
  listen: { host: string; port: number };
  check: ExtAuthzCheck;
  logger: Logger;
  /** The proxy's readiness, for grpc.health.v1 (grpc-health.ts); default: ready while serving. */
  ready?: () => Promise<boolean>;
}

export interface ExtAuthzGrpcServer {
  /** `host:port` as bound (the port is the actual one when 0 was asked for). */
  address: string;
  /** False once a drain began. */
  serving(): boolean;
  /** Refuses new calls and lets those in flight finish, for up to `timeoutMs`. */
  drain(timeoutMs: number): Promise<void>;
  /** Cuts whatever is left. */
  close(): Promise<void>;
}

/**
 * A check request carries the client's body (up to Envoy's max_request_bytes, at most the
 * proxy's 64 MiB max_body_bytes) plus its headers: above grpc-js's 4 MiB default.
 */
const MAX_CHECK_REQUEST_BYTES = 65 * 1024 * 1024;

export async function startExtAuthzGrpc(options: ExtAuthzGrpcOptions): Promise<ExtAuthzGrpcServer> {
  const { check, logger } = options;
  const server = new Server({ 'grpc.max_receive_message_length': MAX_CHECK_REQUEST_BYTES });
  let serving = true;

  async function answer(checkRequest: CheckRequest, caller: CallerLimits): Promise<CheckResponse> {
    const http = checkRequest.attributes?.request?.http;
    const { headers, pseudo } = headersOf(http);
    const requestId = requestIdFrom(headers);
    // Envoy fills both for every HTTP request; the pseudo-headers are a second source of the same.
    const method = http?.method || pseudo[':method'];
    const target = http?.path || pseudo[':path'];
    if (http === undefined || !method || !target) {
      const error = new CountersignError('invalid_request', 'The check request describes no HTTP request (method and path); the gate checks HTTP requests only.', {
        reason: 'NOT_HTTP',
      });
      return checkResponse(check.refuseMalformed('grpc', error), requestId);
    }
    const request: ExtAuthzRequest = {
      method,
      target,
      headers,
      requestId,
      ...caller,
      body: async (limit) => {
        const sent = envoyBodySent(headers);
        if (sent !== 'whole') return { sent };
        const bytes = http.raw_body !== undefined && http.raw_body.length > 0 ? http.raw_body : Buffer.from(http.body ?? '', 'utf8');
        return { sent, body: wholeBody(bytes, limit) };
      },
    };
    // A gRPC call has no caller to lose halfway through its body: the body came with the request.
    const verdict = (await check.decide('grpc', request)) ?? { allow: false, error: new CountersignError('internal') };
    return checkResponse(verdict, requestId);
  }

  function handle(call: ServerUnaryCall<CheckRequest, CheckResponse>, callback: sendUnaryData<CheckResponse>): void {
    // Envoy's grpc-timeout is when it stops waiting; a cancelled call (the client went away) gave up too.
    const cancelled = new AbortController();
    call.on('cancelled', () => cancelled.abort());
    if (call.cancelled) cancelled.abort();
    const deadline = call.getDeadline();
    const deadlineMs = deadline instanceof Date ? deadline.getTime() : deadline;
    answer(call.request, { signal: cancelled.signal, ...(Number.isFinite(deadlineMs) ? { deadlineMs } : {}) }).then(
      (response) => callback(null, response),
      (error: unknown) => {
        // A bug or an unexpected failure: still a denial Envoy can pass on, never an allow.
        logger.error({ err: error }, 'ext_authz gRPC check failed');
        callback(null, checkResponse({ allow: false, error: new CountersignError('internal') }, requestIdFrom(headersOf(call.request.attributes?.request?.http).headers)));
      },
    );
  }

  server.addService(authorizationService().service, { Check: handle });
  const health = addHealthService(server, { ready: async () => serving && (options.ready === undefined || (await options.ready())) });
  const host = options.listen.host.includes(':') ? `[${options.listen.host}]` : options.listen.host;
  const port = await new Promise<number>((resolve, reject) => {
    server.bindAsync(`${host}:${options.listen.port}`, ServerCredentials.createInsecure(), (error, bound) => (error ? reject(error) : resolve(bound)));
  });

  return {
    address: `${host}:${port}`,
    serving: () => serving,
    async drain(timeoutMs) {
      if (!serving) return;
      serving = false;
      health.drain();
      await new Promise<void>((resolve) => {
        const deadline = setTimeout(() => {
          server.forceShutdown();
          resolve();
        }, timeoutMs);
        server.tryShutdown(() => {
          clearTimeout(deadline);
          resolve();
        });
      });
    },
    async close() {
      serving = false;
      health.drain();
      server.forceShutdown();
    },
  };
}

/** google.rpc.Code for the HTTP status of a denial. */
function grpcCode(status: number): number {
  if (status === 503) return GRPC_CODE.UNAVAILABLE;
  if (status === 400) return GRPC_CODE.INVALID_ARGUMENT;
  if (status >= 500) return GRPC_CODE.INTERNAL;
  return GRPC_CODE.PERMISSION_DENIED;
}

function option(key: string, value: string): HeaderValueOption {
  // `append: false` sets (replaces) the header in every Envoy version; append_action is newer.
  return { header: { key, value }, append: { value: false } };
}

function checkResponse(verdict: ExtAuthzVerdict, requestId: string): CheckResponse {
  if (verdict.allow) {
    return {
      status: { code: GRPC_CODE.OK, message: '' },
      ok_response: { headers: Object.entries(verdict.set).map(([key, value]) => option(key, value)), headers_to_remove: verdict.remove },
    };
  }
  const { error } = verdict;
  const headers: Record<string, string> = withErrorHeaders(error, {
    'content-type': 'application/json; charset=utf-8',
    'cache-control': 'no-store',
    'x-request-id': requestId,
  });
  return {
    status: { code: grpcCode(error.status), message: error.message },
    denied_response: {
      status: { code: error.status },
      headers: Object.entries(headers).map(([key, value]) => option(key, value)),
      body: JSON.stringify(errorEnvelope(error, requestId)),
    },
  };
}

/**
 * The client's headers as node:http would hand them to the forwarding server: lower-case names,
 * `:authority` as `host`, the other pseudo-headers apart, each value its bytes one latin1
 * character each (header-text.ts). From `header_map` (raw: each occurrence on its own, the bytes
 * of `raw_value`) when Envoy sends it, else from `headers` (text, turned back into its UTF-8 bytes).
 */
function headersOf(http: HttpRequestAttributes | undefined): { headers: IncomingHttpHeaders; pseudo: Record<string, string> } {
  const headers: Record<string, string | string[]> = Object.create(null) as Record<string, string | string[]>;
  const pseudo: Record<string, string> = Object.create(null) as Record<string, string>;
  const add = (rawName: string, value: string) => {
    const name = rawName.toLowerCase();
    const key = name === ':authority' ? 'host' : name;
    if (key.startsWith(':')) {
      pseudo[key] = value;
      return;
    }
    const existing = headers[key];
    headers[key] = existing === undefined ? value : Array.isArray(existing) ? [...existing, value] : [existing, value];
  };
  const raw = http?.header_map?.headers ?? [];
  if (raw.length > 0) {
    for (const entry of raw) {
      const value = entry.raw_value !== undefined && entry.raw_value.length > 0 ? entry.raw_value.toString('latin1') : headerBytes(entry.value ?? '');
      add(entry.key ?? '', value);
    }
  } else {
    for (const [name, value] of Object.entries(http?.headers ?? {})) add(name, headerBytes(value));
  }
  if (headers.host === undefined && http?.host) headers.host = headerBytes(http.host);
  return { headers: headers as IncomingHttpHeaders, pseudo };
}
