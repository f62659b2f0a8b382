/**
 * Starts the Envoy external authorizer's listeners that `ext_authz:` configures (gRPC, HTTP or
 * both) on one check (check.ts), so both transports place and verify through the same state and
 * gate as the forwarding server. A listener that cannot start stops the others that did. The gRPC
 * listener also serves grpc.health.v1, reporting `ready`.
 *
 * @example
 *   const extAuthz = await serveExtAuthz(config.ext_authz, { current: () => state, gate, metrics, logger, ready });
 *   extAuthz.urls;     // { grpc: '127.0.0.1:9191', http: 'http://127.0.0.1:9192' }
 *   extAuthz.checks(); // { ext_authz_grpc: 'ok' } for /readyz
 *   await extAuthz.drain(10_000);
 *   await extAuthz.close();
 */
import { createExtAuthzCheck, headersEnvoyMustSend, type ExtAuthzCheckOptions } from './check.js';
import { maxHeaderBytes, type ExtAuthzConfig } from './config.js';
import { startExtAuthzGrpc, type ExtAuthzGrpcServer } from './grpc-server.js';
import { startExtAuthzHttp, type ExtAuthzHttpServer } from './http-server.js';

export interface ExtAuthzListeners {
  /** `grpc`: `host:port` of the gRPC service; `http`: `http://host:port` of the HTTP service (each when configured). */
  urls: { grpc?: string; http?: string };
  /** Readiness of each configured transport: `ok` while it serves. */
  checks(): Record<string, 'ok' | 'unavailable'>;
  drain(timeoutMs: number): Promise<void>;
  close(): Promise<void>;
}

export interface ServeExtAuthzOptions extends ExtAuthzCheckOptions {
  /** The proxy's readiness (readiness.ts), for the gRPC health service; default: ready while serving. */
  ready?: () => Promise<boolean>;
}

export async function serveExtAuthz(config: ExtAuthzConfig, options: ServeExtAuthzOptions): Promise<ExtAuthzListeners> {
  const check = createExtAuthzCheck(options);
  const { logger, ready } = options;
  let grpc: ExtAuthzGrpcServer | undefined;
  let http: ExtAuthzHttpServer | undefined;
  try {
    if (config.grpc !== undefined) grpc = await startExtAuthzGrpc({ listen: config.grpc.listen, check, logger, ready });
    if (config.http !== undefined) {
      const { listen, path_prefix: pathPrefix, check_timeout_ms: checkTimeoutMs, max_request_headers_kb: headersKb } = config.http;
      http = await startExtAuthzHttp({ listen, pathPrefix, checkTimeoutMs, maxHeaderBytes: maxHeaderBytes(headersKb), check, logger });
    }
  } catch (error) {
    await grpc?.close();
    throw error;
  }
  const started = [grpc, http].filter((server) => server !== undefined);
  if (http !== undefined) {
    // Envoy's HTTP service sends only the headers it is told to: say which, where operators look.
    logger.info({ allowed_headers: headersEnvoyMustSend(options.current().config) }, 'ext_authz http: Envoy must send these request headers (allowed_headers)');
  }
  return {
    urls: { ...(grpc !== undefined ? { grpc: grpc.address } : {}), ...(http !== undefined ? { http: http.url } : {}) },
    checks() {
      const checks: Record<string, 'ok' | 'unavailable'> = {};
      if (grpc !== undefined) checks.ext_authz_grpc = grpc.serving() ? 'ok' : 'unavailable';
      if (http !== undefined) checks.ext_authz_http = http.serving() ? 'ok' : 'unavailable';
      return checks;
    },
    async drain(timeoutMs) {
      await Promise.all(started.map((server) => server.drain(timeoutMs)));
    },
    async close() {
      await Promise.all(started.map((server) => server.close()));
    },
  };
}
