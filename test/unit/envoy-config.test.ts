/**
 * The plain Envoy configurations (config/envoy/envoy.yaml: gRPC; envoy-http.yaml: HTTP) against
 * the gate they call (config/proxy-ext-authz.yaml), structurally: no Envoy runs here. The ext_authz
 * filter comes before the router with Envoy's type URLs, fails closed, sends the whole body for
 * body-bound routes, names a cluster that exists and reaches the gate's listener; the HTTP variant
 * sends every header the gate reads and lets the gate's headers reach the upstream.
 *
 * @example
 *   node test/run.mjs --disable-coverage test/unit/envoy-config.test.ts
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import t from 'tap';
import { parse } from 'yaml';
import { loadProxyConfig } from '../../proxy/config.js';
import { headersEnvoyMustSend } from '../../proxy/ext-authz/check.js';
import { REPO_ROOT as root } from '../helpers/repo.js';

const EXT_AUTHZ = 'type.googleapis.com/envoy.extensions.filters.http.ext_authz.v3.ExtAuthz';
const ROUTER = 'type.googleapis.com/envoy.extensions.filters.http.router.v3.Router';
const HCM = 'type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager';

interface Cluster {
  name: string;
  typed_extension_protocol_options?: Record<string, { explicit_http_config?: { http2_protocol_options?: unknown } }>;
  load_assignment: { endpoints: Array<{ lb_endpoints: Array<{ endpoint: { address: { socket_address: { address: string; port_value: number } } } }> }> };
}

function envoyConfig(file: string) {
  const config = parse(readFileSync(join(root, 'config', 'envoy', file), 'utf8')) as {
    static_resources: { listeners: Array<{ filter_chains: Array<{ filters: Array<{ name: string; typed_config: Record<string, any> }> }> }>; clusters: Cluster[] };
  };
  const hcm = config.static_resources.listeners[0]!.filter_chains[0]!.filters[0]!;
  const filters = (hcm.typed_config.http_filters as Array<{ name: string; typed_config: Record<string, any> }>) ?? [];
  const cluster = (name: string) => config.static_resources.clusters.find((c) => c.name === name);
  const endpoint = (c: Cluster) => c.load_assignment.endpoints[0]!.lb_endpoints[0]!.endpoint.address.socket_address;
  return { hcm, filters, cluster, endpoint };
}

const gate = () => loadProxyConfig(join(root, 'config', 'proxy-ext-authz.yaml'), { COUNTERSIGN_PROXY_ORGANIZATION: 'org_1' });

t.test('both files: ext_authz before the router, failing closed, the whole body, requests ids and normalized paths', async (t) => {
  const config = await gate();
  const largestBody = Math.max(config.max_body_bytes, ...config.routes.map((route) => route.max_body_bytes));
  for (const file of ['envoy.yaml', 'envoy-http.yaml']) {
    const { hcm, filters } = envoyConfig(file);
    t.equal(hcm.typed_config['@type'], HCM, `${file}: an HTTP connection manager`);
    t.same(filters.map((f) => f.typed_config['@type']), [EXT_AUTHZ, ROUTER], `${file}: ext_authz, then the router`);
    t.equal(filters[0]!.name, 'envoy.filters.http.ext_authz');
    const authz = filters[0]!.typed_config;
    t.equal(authz.transport_api_version, 'V3', `${file}: the v3 API`);
    t.equal(authz.failure_mode_allow, false, `${file}: a failed check never lets a request through`);
    t.same(authz.status_on_error, { code: 'ServiceUnavailable' }, `${file}: an unreachable gate is a 503`);
    t.ok(authz.with_request_body.max_request_bytes >= largestBody, `${file}: max_request_bytes covers the gate's max_body_bytes`);
    t.equal(authz.with_request_body.allow_partial_message, false, `${file}: never a partial body`);
    t.equal(hcm.typed_config.generate_request_id, true, `${file}: X-Request-ID on every request`);
    t.equal(hcm.typed_config.normalize_path, true, `${file}: the gate and the app see one normalized path`);
  }
});

t.test('gRPC: the grpc_service cluster exists, speaks HTTP/2, and is the gate\'s gRPC listener', async (t) => {
  const config = await gate();
  const { filters, cluster, endpoint } = envoyConfig('envoy.yaml');
  const authz = filters[0]!.typed_config;
  const name = authz.grpc_service.envoy_grpc.cluster_name as string;
  const target = cluster(name);
  t.ok(target, `cluster ${name} exists`);
  t.ok(target?.typed_extension_protocol_options?.['envoy.extensions.upstreams.http.v3.HttpProtocolOptions']?.explicit_http_config?.http2_protocol_options, 'HTTP/2');
  t.same(target && endpoint(target), { address: config.ext_authz!.grpc!.listen.host, port_value: config.ext_authz!.grpc!.listen.port });
  t.equal(authz.with_request_body.pack_as_bytes, true, 'the body as bytes (raw_body)');
  t.ok(cluster('app'), 'and the application cluster the route names');
});

t.test('HTTP: the server_uri cluster is the gate\'s HTTP listener, and Envoy sends and passes on the right headers', async (t) => {
  const config = await gate();
  const { filters, cluster, endpoint } = envoyConfig('envoy-http.yaml');
  const authz = filters[0]!.typed_config;
  const target = cluster(authz.http_service.server_uri.cluster as string);
  t.ok(target, 'the server_uri cluster exists');
  t.same(target && endpoint(target), { address: config.ext_authz!.http!.listen.host, port_value: config.ext_authz!.http!.listen.port });
  t.equal(authz.http_service.path_prefix, config.ext_authz!.http!.path_prefix, 'the same path_prefix as the gate');
  const allowed = (authz.allowed_headers.patterns as Array<{ exact: string }>).map((p) => p.exact);
  for (const header of headersEnvoyMustSend(config)) t.ok(allowed.includes(header), `allowed_headers has ${header}`);
  const upstream = (authz.http_service.authorization_response.allowed_upstream_headers.patterns as Array<{ exact: string }>).map((p) => p.exact);
  t.same(upstream.sort(), ['x-countersign-mode', 'x-countersign-permit-id'], 'the gate\'s headers reach the upstream');
});
