/**
 * Envoy's external authorization API, and gRPC's standard health service, as @grpc/grpc-js serves
 * them: the `.proto` files beside this module (protos/: a subset of Envoy's API with its packages
 * and field numbers, and grpc/health/v1/health.proto as gRPC publishes it) loaded once with
 * @grpc/proto-loader, and TypeScript shapes of the messages as the loader hands them over
 * (`keepCase`: the proto's snake_case field names; bytes as Buffer; enums as numbers).
 *
 * The build copies protos/ next to the compiled module (dist/proxy/ext-authz/protos/), so the
 * files are found relative to this module both from the sources and from dist/.
 *
 * @example
 *   const Authorization = authorizationService();
 *   server.addService(Authorization.service, { Check: handler });      // the server
 *   const client = new Authorization('127.0.0.1:9191', credentials.createInsecure()); // a client
 */
import { fileURLToPath } from 'node:url';
import { loadPackageDefinition, type ServiceClientConstructor } from '@grpc/grpc-js';
import { loadSync } from '@grpc/proto-loader';

/** The folder holding envoy/…, google/rpc/…, grpc/health/… (an include path of the loader). */
export const PROTO_ROOT = fileURLToPath(new URL('./protos/', import.meta.url));

/** The file declaring `envoy.service.auth.v3.Authorization`, relative to PROTO_ROOT. */
export const EXTERNAL_AUTH_PROTO = 'envoy/service/auth/v3/external_auth.proto';

/** The file declaring `grpc.health.v1.Health`, relative to PROTO_ROOT. */
export const HEALTH_PROTO = 'grpc/health/v1/health.proto';

/** The full name of the ext_authz service, as health checks name it. */
export const AUTHORIZATION_SERVICE_NAME = 'envoy.service.auth.v3.Authorization';

/** Loader options: the server and the tests read messages the same way. */
export const LOADER_OPTIONS = { keepCase: true, longs: String, enums: Number, defaults: false, oneofs: true, includeDirs: [PROTO_ROOT] };

/** grpc.health.v1.HealthCheckResponse.ServingStatus. */
export const SERVING_STATUS = { UNKNOWN: 0, SERVING: 1, NOT_SERVING: 2, SERVICE_UNKNOWN: 3 } as const;

/** google.rpc.Code values the authorizer answers with. */
export const GRPC_CODE = { OK: 0, INVALID_ARGUMENT: 3, PERMISSION_DENIED: 7, INTERNAL: 13, UNAVAILABLE: 14 } as const;

let loaded: ServiceClientConstructor | undefined;
let loadedHealth: ServiceClientConstructor | undefined;

/** The `Authorization` service: `.service` for a server, `new (…)` for a client. Loaded on first use. */
export function authorizationService(): ServiceClientConstructor {
  if (loaded !== undefined) return loaded;
  const definition = loadSync(EXTERNAL_AUTH_PROTO, LOADER_OPTIONS);
  const root = loadPackageDefinition(definition) as unknown as { envoy: { service: { auth: { v3: { Authorization: ServiceClientConstructor } } } } };
  loaded = root.envoy.service.auth.v3.Authorization;
  return loaded;
}

/** The standard `grpc.health.v1.Health` service (Kubernetes gRPC probes, Envoy health checks). Loaded on first use. */
export function healthService(): ServiceClientConstructor {
  if (loadedHealth !== undefined) return loadedHealth;
  const root = loadPackageDefinition(loadSync(HEALTH_PROTO, LOADER_OPTIONS)) as unknown as { grpc: { health: { v1: { Health: ServiceClientConstructor } } } };
  loadedHealth = root.grpc.health.v1.Health;
  return loadedHealth;
}

export interface HealthCheckRequest {
  service?: string;
}

export interface HealthCheckResponse {
  status: number;
}

// ---- the messages, as decoded (every field optional: proto3 leaves unset fields out) ----

export interface HeaderValue {
  key?: string;
  value?: string;
  raw_value?: Buffer;
}

export interface HeaderValueOption {
  header?: HeaderValue;
  /** google.protobuf.BoolValue. */
  append?: { value?: boolean };
  append_action?: number;
  keep_empty_value?: boolean;
}

export interface HttpRequestAttributes {
  id?: string;
  method?: string;
  headers?: Record<string, string>;
  header_map?: { headers?: HeaderValue[] };
  path?: string;
  host?: string;
  scheme?: string;
  query?: string;
  fragment?: string;
  /** int64, as a decimal string. */
  size?: string;
  protocol?: string;
  body?: string;
  raw_body?: Buffer;
}

export interface Peer {
  address?: { socket_address?: { address?: string; port_value?: number } };
  service?: string;
  labels?: Record<string, string>;
  principal?: string;
  certificate?: string;
}

export interface CheckRequest {
  attributes?: {
    source?: Peer;
    destination?: Peer;
    request?: { time?: { seconds?: string; nanos?: number }; http?: HttpRequestAttributes };
    context_extensions?: Record<string, string>;
    tls_session?: { sni?: string };
  };
}

export interface CheckResponse {
  status: { code: number; message?: string };
  denied_response?: { status?: { code: number }; headers?: HeaderValueOption[]; body?: string };
  ok_response?: { headers?: HeaderValueOption[]; headers_to_remove?: string[]; response_headers_to_add?: HeaderValueOption[] };
  /** Set by the loader when decoding (`oneofs: true`): which of the two is present. */
  http_response?: 'denied_response' | 'ok_response';
}
