/**
 * `ext_authz:` in proxy.yaml: the gate as an Envoy external authorizer, beside (or instead of)
 * the forwarding listener. Each transport has its own listener; the routes, facts, modes and
 * permit header are the configuration's own, shared with the forwarding server.
 *
 * - `grpc.listen`: `envoy.service.auth.v3.Authorization/Check` (default 127.0.0.1:9191).
 * - `http.listen`: Envoy's HTTP authorization service (default 127.0.0.1:9192); `http.path_prefix`
 *   is the `path_prefix` of Envoy's `http_service`, taken off again before matching;
 *   `http.check_timeout_ms` its timeout (default 200, Envoy's); `http.max_request_headers_kb`
 *   Envoy's `max_request_headers_kb` (default 60, Envoy's).
 * - gRPC needs no timeout setting: Envoy sends its own with each call (`grpc-timeout`).
 * - `only: true`: no forwarding listener. Envoy forwards; `upstream` is then not needed (and not
 *   used when given), nor is `listen`.
 *
 * @example
 *   ext_authz:
 *     only: true
 *     grpc: { listen: 127.0.0.1:9191 }
 *     http: { listen: 127.0.0.1:9192, path_prefix: /authz, check_timeout_ms: 2000 }
 */
import { z } from 'zod';
import { hostPort } from '../../shared/config-file.js';

/**
 * Envoy's default ext_authz timeout. Over HTTP, Envoy does not say how long it waits, so the gate
 * assumes its default: a check whose consume could land after Envoy gave up is refused (503)
 * instead. Set `check_timeout_ms` to `http_service.server_uri.timeout`; a longer value lets a slow
 * store spend a permit on a request Envoy already answered with its own error.
 */
export const DEFAULT_CHECK_TIMEOUT_MS = 200;

/** Envoy's default `max_request_headers_kb`: the request headers it accepts, and may pass on. */
export const DEFAULT_MAX_REQUEST_HEADERS_KB = 60;

/**
 * A check request's head beyond the client's headers: its request line (path_prefix + path), and
 * the headers Envoy adds (x-envoy-*, x-forwarded-*, content-length).
 */
const CHECK_REQUEST_OVERHEAD_BYTES = 4 * 1024;

/** node:http's `maxHeaderSize` for a `max_request_headers_kb`. */
export function maxHeaderBytes(maxRequestHeadersKb: number): number {
  return maxRequestHeadersKb * 1024 + CHECK_REQUEST_OVERHEAD_BYTES;
}

/** Envoy adds the prefix in front of a path that starts with `/`: one with a trailing slash would make `//`. */
const PathPrefix = z
  .string()
  .regex(/^(\/[^/?#\s]+)*$/, { message: 'empty, or a path such as /authz (starts with /, no trailing slash, no query)' });

export const ExtAuthzSchema = z
  .object({
    grpc: z
      .object({ listen: hostPort('127.0.0.1:9191').default({ host: '127.0.0.1', port: 9191 }) })
      .strict()
      .optional(),
    http: z
      .object({
        listen: hostPort('127.0.0.1:9192').default({ host: '127.0.0.1', port: 9192 }),
        path_prefix: PathPrefix.default(''),
        check_timeout_ms: z.number().int().min(10).max(60_000).default(DEFAULT_CHECK_TIMEOUT_MS),
        max_request_headers_kb: z.number().int().min(1).max(8192).default(DEFAULT_MAX_REQUEST_HEADERS_KB),
      })
      .strict()
      .optional(),
    only: z.boolean().default(false),
  })
  .strict()
  .refine((section) => section.grpc !== undefined || section.http !== undefined, {
    message: 'give grpc, http or both: the transports Envoy calls (such as grpc: { listen: 127.0.0.1:9191 })',
  });

export type ExtAuthzConfig = z.output<typeof ExtAuthzSchema>;

/** Whether a configuration (as parsed) runs the forwarding listener. */
export function forwards(config: { ext_authz?: ExtAuthzConfig | undefined }): boolean {
  return config.ext_authz?.only !== true;
}

/**
 * Whether a raw (unvalidated) configuration asks for ext_authz only, so that `upstream` is not
 * required. Read from the input because the requirement is checked beside every other field.
 */
export function asksExtAuthzOnly(input: unknown): boolean {
  if (typeof input !== 'object' || input === null) return false;
  const section = (input as Record<string, unknown>).ext_authz;
  return typeof section === 'object' && section !== null && (section as Record<string, unknown>).only === true;
}
