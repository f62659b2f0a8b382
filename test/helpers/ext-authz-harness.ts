/**
 * The proxy as an Envoy external authorizer, on loopback, inside the proxy harness
 * (proxy-harness.ts: a test authority and the SAME shared store): both transports listening, a
 * real @grpc/grpc-js client on the same .proto files, and an HTTP client sending what Envoy's
 * `http_service` sends. `check()` asks either transport the same question and gives back one
 * shape, so a test asserts the same thing of both.
 *
 * @example
 *   withHarness(t, backend, async (h) => {
 *     const authz = await startExtAuthz(t, h);
 *     const verdict = await authz.check('grpc', { path: '/echo/order-1', token });
 *     verdict.allowed; // true
 *     verdict.set['x-countersign-permit-id']; // the permit's id
 *   });
 */
import { credentials, type CallOptions, type Client, type ClientUnaryCall, type ServiceError } from '@grpc/grpc-js';
import type { Test } from 'tap';
import { getGlobalDispatcher, request } from 'undici';
import type { ProxyConfig } from '../../proxy/config.js';
import { createExecutionRecords } from '../../proxy/execution-records.js';
import { serveExtAuthz } from '../../proxy/ext-authz/serve.js';
import { authorizationService, type CheckRequest, type CheckResponse } from '../../proxy/ext-authz/protos.js';
import { createGate } from '../../proxy/gate.js';
import { createRecordBacklog } from '../../proxy/record-backlog.js';
import { createProxyMetrics, type ProxyMetrics } from '../../proxy/metrics.js';
import { isReady, readinessChecks } from '../../proxy/readiness.js';
import { gateState, type GateState } from '../../proxy/placement.js';
import { createLogger } from '../../shared/logging.js';
import { verificationStream } from '../../shared/permits/store-keys.js';
import { staticKeyResolver } from '../../shared/permits/static-keys.js';
import type { SharedStore } from '../../shared/store/types.js';
import type { Harness } from './proxy-harness.js';

export type Transport = 'grpc' | 'http';
export const TRANSPORTS: readonly Transport[] = ['grpc', 'http'];

/** The client's request, as Envoy would describe it to the authorizer. */
export interface ClientRequest {
  method?: string;
  /** Path and query, as in the client's request line. */
  path: string;
  /** The permit header's value (X-Service-Permit). */
  token?: string;
  /** X-Actor-Id; null leaves it out. Default demo-agent. Sent, like every header, as its UTF-8 bytes. */
  actor?: string | null;
  /**
   * X-Actor-Id as raw bytes instead (say, not UTF-8): as they are in gRPC's `header_map` and over
   * HTTP; in gRPC's `headers` (protobuf text) as a lenient UTF-8 decoder reads them.
   */
  actorBytes?: Buffer;
  /** Other client headers (lower-case names). */
  headers?: Record<string, string>;
  /**
   * The client's body. Envoy buffered it (with_request_body) and sends it with
   * `x-envoy-auth-partial-body: false` (`true` when `partial`), unless `envoySends` says otherwise.
   * Without it the client's request had no body: no flag, no body.
   */
  body?: string;
  /**
   * `nothing`: Envoy was not configured to send the body (over gRPC the client's Content-Length
   * still says there is one; over HTTP Envoy's check request has Content-Length 0);
   * `body-without-flag`: it sent the body, but the flag was filtered out. Default: the body and its flag.
   */
  envoySends?: 'nothing' | 'body-without-flag';
  partial?: boolean;
  /** gRPC: the body as `raw_body` (pack_as_bytes) instead of `body`. */
  packAsBytes?: boolean;
  /** gRPC: the headers as `header_map` (encode_raw_headers), each occurrence on its own. */
  rawHeaders?: Array<[string, string]>;
}

/** One answer, whichever transport gave it. */
export interface Verdict {
  allowed: boolean;
  /** 200 when allowed; the denial's status otherwise. */
  status: number;
  /** Allowed: the headers set on the request before it goes upstream. */
  set: Record<string, string>;
  /** Allowed: the headers removed from the request. */
  remove: string[];
  /** Denied: the headers for the client, and the error envelope. */
  headers: Record<string, string>;
  body: Record<string, unknown> | null;
  /** gRPC only: the CheckResponse's google.rpc.Status code. */
  grpcCode?: number;
}

/** The Authorization service's client as @grpc/grpc-js builds it from the .proto files. */
export type AuthorizationClient = Client & {
  Check(request: CheckRequest, callback: (error: ServiceError | null, response?: CheckResponse) => void): ClientUnaryCall;
  Check(request: CheckRequest, options: CallOptions, callback: (error: ServiceError | null, response?: CheckResponse) => void): ClientUnaryCall;
};

export interface ExtAuthzUnderTest {
  metrics: ProxyMetrics;
  /** The gRPC client `check` uses (for deadlines and cancellation of its own). */
  client: AuthorizationClient;
  grpcAddress: string;
  httpUrl: string;
  /** Swaps the configuration as a reload would (both transports see it). */
  setConfig(config: ProxyConfig): void;
  check(transport: Transport, request: ClientRequest): Promise<Verdict>;
  /** The raw CheckResponse for a CheckRequest built by hand. */
  grpcCheck(request: CheckRequest): Promise<CheckResponse>;
}

/**
 * `config` defaults to the harness's (routes echo, echo-shadow, echo-body, wire, echo-staging);
 * `pathPrefix` and `checkTimeoutMs` are the HTTP service's (default '' and 200 ms, Envoy's).
 */
export async function startExtAuthz(
  t: Test,
  h: Harness,
  options: { store?: SharedStore; config?: ProxyConfig; pathPrefix?: string; checkTimeoutMs?: number } = {},
): Promise<ExtAuthzUnderTest> {
  const config = options.config ?? h.config;
  const pathPrefix = options.pathPrefix ?? '';
  const metrics = createProxyMetrics();
  const store = options.store ?? h.opened.store;
  const organization = h.authority.acme.id;
  const jwks = await (await request(`${h.authorityUrl}/v1/permit-keys`, { headers: h.authority.bearer(h.authority.acmeAdmin) })).body.json();
  const logger = createLogger({ name: 'proxy', level: 'silent' });
  const records = createRecordBacklog({ store, stream: verificationStream(organization), logger, onAppendFailed: (count) => metrics.recordAppendFailures.inc(count) });
  const executionRecords = createExecutionRecords({ records });
  t.teardown(async () => {
    await executionRecords.close();
    await records.close(1_000);
  });
  const gate = createGate({
    organization,
    issuer: config.issuer,
    audience: config.audience,
    keys: staticKeyResolver(jwks as Parameters<typeof staticKeyResolver>[0]),
    store,
    now: () => h.clock.now(),
    permitHeader: config.permit_header,
    records,
    executionRecords,
  });
  let state: GateState = gateState(config);
  const http = { listen: { host: '127.0.0.1', port: 0 }, path_prefix: pathPrefix, check_timeout_ms: options.checkTimeoutMs ?? 200, max_request_headers_kb: 60 };
  // Readiness as the proxy process reports it; the static keys are always loaded.
  const ready = async () => isReady(await readinessChecks({ keys: { ready: () => true }, store, readyTimeoutMs: 1_000, frontDoors: () => listeners.checks() }));
  const listeners = await serveExtAuthz(
    { grpc: { listen: { host: '127.0.0.1', port: 0 } }, http, only: true },
    { current: () => state, gate, metrics, logger, ready },
  );
  t.teardown(() => listeners.close());
  const Authorization = authorizationService();
  const client = new Authorization(listeners.urls.grpc!, credentials.createInsecure()) as unknown as AuthorizationClient;
  t.teardown(() => client.close());

  const grpcCheck = (message: CheckRequest) =>
    new Promise<CheckResponse>((resolve, reject) => client.Check(message, (error, response) => (error ? reject(error) : resolve(response!))));

  return {
    metrics,
    client,
    grpcAddress: listeners.urls.grpc!,
    httpUrl: listeners.urls.http!,
    setConfig(next) {
      state = gateState(next);
    },
    grpcCheck,
    async check(transport, asked) {
      return transport === 'grpc' ? fromCheckResponse(await grpcCheck(checkRequest(asked))) : httpCheck(listeners.urls.http!, pathPrefix, asked);
    },
  };
}

/** The client's headers as Envoy lists them: lower case, plus x-request-id and the partial-body flag. */
function clientHeaders(request: ClientRequest): Record<string, string> {
  const headers: Record<string, string> = { 'content-type': 'application/json', ...request.headers };
  if (request.token !== undefined) headers['x-service-permit'] = request.token;
  if (request.actor !== null && request.actorBytes === undefined) headers['x-actor-id'] = request.actor ?? 'demo-agent';
  if (request.body !== undefined && request.envoySends === undefined) headers['x-envoy-auth-partial-body'] = request.partial ? 'true' : 'false';
  return headers;
}

/** A CheckRequest as Envoy's ext_authz filter builds it for an inbound HTTP/1.1 request. */
export function checkRequest(request: ClientRequest): CheckRequest {
  const method = request.method ?? 'POST';
  // The client's own Content-Length comes along (gRPC sends every client header).
  const length: Record<string, string> = request.body === undefined ? {} : { 'content-length': String(Buffer.byteLength(request.body)) };
  const headers: Record<string, string> = { ':authority': 'payments.internal', ':method': method, ':path': request.path, ':scheme': 'http', ...length, ...clientHeaders(request) };
  const sent = request.envoySends === 'nothing' ? undefined : request.body;
  const body = sent === undefined ? {} : request.packAsBytes ? { raw_body: Buffer.from(sent) } : { body: sent };
  const raw: Array<[string, Buffer]> = [...Object.entries(headers), ...(request.rawHeaders ?? [])].map(([key, value]) => [key, Buffer.from(value, 'utf8')]);
  if (request.actorBytes !== undefined) {
    headers['x-actor-id'] = request.actorBytes.toString('utf8');
    raw.push(['x-actor-id', request.actorBytes]);
  }
  const headerForm = request.rawHeaders !== undefined ? { header_map: { headers: raw.map(([key, value]) => ({ key, raw_value: value })) } } : { headers };
  return {
    attributes: {
      source: { address: { socket_address: { address: '10.0.0.7', port_value: 50312 } }, principal: 'spiffe://cluster.local/ns/pay/sa/agent' },
      destination: { address: { socket_address: { address: '10.0.0.9', port_value: 8080 } } },
      request: {
        time: { seconds: String(Math.floor(Date.now() / 1000)), nanos: 0 },
        http: { id: '1729', method, path: request.path, host: 'payments.internal', scheme: 'http', protocol: 'HTTP/1.1', size: String(request.body?.length ?? 0), ...headerForm, ...body },
      },
    },
  };
}

export function fromCheckResponse(response: CheckResponse): Verdict {
  const pairs = (options: Array<{ header?: { key?: string; value?: string } }> = []) =>
    Object.fromEntries(options.map((option) => [option.header?.key ?? '', option.header?.value ?? '']));
  if (response.status.code === 0) {
    return { allowed: true, status: 200, set: pairs(response.ok_response?.headers), remove: response.ok_response?.headers_to_remove ?? [], headers: {}, body: null, grpcCode: 0 };
  }
  const denied = response.denied_response;
  return {
    allowed: false,
    status: denied?.status?.code ?? 403,
    set: {},
    remove: [],
    headers: pairs(denied?.headers),
    body: denied?.body ? (JSON.parse(denied.body) as Record<string, unknown>) : null,
    grpcCode: response.status.code,
  };
}

/** What Envoy's http_service sends: the client's method, path_prefix + path, the allowed headers, the buffered body. */
async function httpCheck(origin: string, pathPrefix: string, client: ClientRequest): Promise<Verdict> {
  // On the wire each value is its bytes; undici writes a string's characters as latin1 bytes.
  const headers = Object.fromEntries(Object.entries(clientHeaders(client)).map(([name, value]) => [name, Buffer.from(value, 'utf8').toString('latin1')]));
  if (client.actorBytes !== undefined) headers['x-actor-id'] = client.actorBytes.toString('latin1');
  // `path` as is: Envoy sends the client's path undecoded and unresolved (`..` included).
  const body = client.envoySends === 'nothing' ? null : (client.body ?? null);
  const response = await getGlobalDispatcher().request({ origin, path: `${pathPrefix}${client.path}`, method: (client.method ?? 'POST') as 'POST', headers, body });
  const text = await response.body.text();
  const flat = Object.fromEntries(Object.entries(response.headers).map(([name, value]) => [name, Array.isArray(value) ? value.join(', ') : (value ?? '')]));
  if (response.statusCode === 200) {
    const set = Object.fromEntries(Object.entries(flat).filter(([name]) => name.startsWith('x-countersign-')));
    const remove = (flat['x-envoy-auth-headers-to-remove'] ?? '').split(',').map((name) => name.trim()).filter((name) => name !== '');
    return { allowed: true, status: 200, set, remove, headers: {}, body: null };
  }
  return { allowed: false, status: response.statusCode, set: {}, remove: [], headers: flat, body: text === '' ? null : (JSON.parse(text) as Record<string, unknown>) };
}
