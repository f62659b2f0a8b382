/**
 * When tracing is on (shared/telemetry/settings.ts): off by default, on by OTEL_TRACES_EXPORTER or
 * an OTLP endpoint, off by none or OTEL_SDK_DISABLED whatever else is set, OTLP over HTTP only,
 * nothing secret in what is logged. Also the attribute names against the semantic conventions
 * package, the GenAI tool attributes of an agent's tool call, and that the off path does not load
 * the SDK.
 */
import * as semconv from '@opentelemetry/semantic-conventions';
import * as incubating from '@opentelemetry/semantic-conventions/incubating';
import t from 'tap';
import { ATTR, genAiToolAttributes } from '../../shared/telemetry/attributes.js';
import { TelemetryConfigError, tracingSettings } from '../../shared/telemetry/settings.js';

const on = (env: NodeJS.ProcessEnv) => {
  const settings = tracingSettings(env, 'countersign-proxy');
  if (!settings.enabled) throw new Error(`expected tracing on, got off: ${settings.reason}`);
  return settings;
};
const off = (env: NodeJS.ProcessEnv) => {
  const settings = tracingSettings(env, 'countersign-proxy');
  if (settings.enabled) throw new Error('expected tracing off');
  return settings.reason;
};

t.test('off by default; on by an exporter or an endpoint', async (t) => {
  t.match(off({}), /no OTEL_TRACES_EXPORTER or OTLP endpoint/);
  t.match(off({ OTEL_TRACES_EXPORTER: '', OTEL_EXPORTER_OTLP_ENDPOINT: '  ' }), /no OTEL_TRACES_EXPORTER/, 'blank is unset, as the SDK reads it');
  t.match(off({ OTEL_SERVICE_NAME: 'x', OTEL_EXPORTER_OTLP_PROTOCOL: 'http/json', OTEL_EXPORTER_OTLP_HEADERS: 'a=b' }), /no OTEL_TRACES_EXPORTER/, 'other OTEL_* variables alone do not turn it on');

  t.same(on({ OTEL_TRACES_EXPORTER: 'otlp' }), {
    enabled: true,
    serviceName: 'countersign-proxy',
    exporters: ['otlp'],
    protocol: 'http/protobuf',
    endpoint: 'http://localhost:4318/v1/traces',
    headerNames: [],
  }, 'otlp alone: the SDK defaults (http/protobuf to localhost:4318)');
  t.same(on({ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://collector:4318' }).endpoint, 'http://collector:4318/v1/traces', 'a base endpoint gets /v1/traces');
  t.same(on({ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://collector:4318/otlp/' }).endpoint, 'http://collector:4318/otlp/v1/traces');
  t.same(on({ OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: 'https://collector.example/custom', OTEL_EXPORTER_OTLP_ENDPOINT: 'http://other:4318' }).endpoint, 'https://collector.example/custom', 'the traces endpoint is used as given, and wins');
  t.same(on({ OTEL_TRACES_EXPORTER: 'console' }), { enabled: true, serviceName: 'countersign-proxy', exporters: ['console'], headerNames: [] }, 'console: no OTLP settings');
  t.same(on({ OTEL_TRACES_EXPORTER: 'otlp, console,otlp' }).exporters, ['otlp', 'console'], 'a list, trimmed and deduplicated');
});

t.test('off wins: OTEL_SDK_DISABLED and none', async (t) => {
  t.equal(off({ OTEL_SDK_DISABLED: 'true', OTEL_TRACES_EXPORTER: 'otlp', OTEL_EXPORTER_OTLP_ENDPOINT: 'http://c:4318' }), 'OTEL_SDK_DISABLED=true');
  t.equal(off({ OTEL_SDK_DISABLED: ' TRUE ', OTEL_EXPORTER_OTLP_PROTOCOL: 'grpc', OTEL_TRACES_EXPORTER: 'zipkin' }), 'OTEL_SDK_DISABLED=true', 'disabled is not even checked for other mistakes');
  t.equal(off({ OTEL_TRACES_EXPORTER: 'none', OTEL_EXPORTER_OTLP_ENDPOINT: 'http://c:4318' }), 'OTEL_TRACES_EXPORTER=none', 'none beats an endpoint');
  t.ok(on({ OTEL_SDK_DISABLED: 'false', OTEL_TRACES_EXPORTER: 'otlp' }), 'OTEL_SDK_DISABLED=false is not disabled');
  t.ok(on({ OTEL_SDK_DISABLED: 'yes', OTEL_TRACES_EXPORTER: 'otlp' }), 'only "true" disables, as in the SDK');
});

t.test('OTLP over HTTP only; unknown values stop the start', async (t) => {
  t.equal(on({ OTEL_TRACES_EXPORTER: 'otlp', OTEL_EXPORTER_OTLP_PROTOCOL: 'http/json' }).protocol, 'http/json');
  t.equal(on({ OTEL_TRACES_EXPORTER: 'otlp', OTEL_EXPORTER_OTLP_PROTOCOL: 'grpc', OTEL_EXPORTER_OTLP_TRACES_PROTOCOL: 'http/json' }).protocol, 'http/json', 'the traces protocol wins');
  const refused = (env: NodeJS.ProcessEnv, message: RegExp, label: string) => {
    try {
      tracingSettings(env, 'countersign-proxy');
      t.fail(`${label}: not refused`);
    } catch (error) {
      t.ok(error instanceof TelemetryConfigError, `${label}: a TelemetryConfigError`);
      t.match(error, { message, code: 'CONFIG_INVALID' }, label);
    }
  };
  refused({ OTEL_TRACES_EXPORTER: 'otlp', OTEL_EXPORTER_OTLP_PROTOCOL: 'grpc' }, /OTEL_EXPORTER_OTLP_PROTOCOL=grpc: .*OTLP\/HTTP only.*4318/, 'grpc is refused, saying what to set');
  refused({ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://c:4317', OTEL_EXPORTER_OTLP_TRACES_PROTOCOL: 'grpc' }, /OTEL_EXPORTER_OTLP_TRACES_PROTOCOL=grpc/, 'the variable named is the one that said grpc');
  refused({ OTEL_TRACES_EXPORTER: 'otlp', OTEL_EXPORTER_OTLP_PROTOCOL: 'http/xml' }, /"http\/xml" is not supported/, 'an unknown protocol');
  refused({ OTEL_TRACES_EXPORTER: 'zipkin' }, /"zipkin" is not supported; use otlp/, 'an exporter other than otlp or console');
  refused({ OTEL_TRACES_EXPORTER: 'otlp,none' }, /none beside other exporters/, 'none with another exporter is ambiguous');
  refused({ OTEL_EXPORTER_OTLP_ENDPOINT: 'collector:4318' }, /OTEL_EXPORTER_OTLP_ENDPOINT must be an http or https URL/, 'a scheme that is not http(s)');
  refused({ OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: 'not a url' }, /OTEL_EXPORTER_OTLP_TRACES_ENDPOINT is not a URL/, 'not a URL');
  t.ok(on({ OTEL_TRACES_EXPORTER: 'console', OTEL_EXPORTER_OTLP_PROTOCOL: 'grpc' }), 'the protocol matters only to the otlp exporter');
});

t.test('what is logged holds no secret', async (t) => {
  const settings = on({
    OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: 'https://user:s3cret@collector.example:4318/v1/traces?token=abc#frag',
    OTEL_EXPORTER_OTLP_HEADERS: 'Authorization=Bearer%20tok_123,x-tenant=acme',
    OTEL_EXPORTER_OTLP_TRACES_HEADERS: 'api-key=k_456',
  });
  t.equal(settings.endpoint, 'https://collector.example:4318/v1/traces', 'no userinfo, query or fragment');
  t.equal(on({ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://user:pw@collector:4318' }).endpoint, 'http://collector:4318/v1/traces', 'nor in the base endpoint');
  t.same(settings.headerNames, ['authorization', 'x-tenant', 'api-key'], 'header names only');
  const text = JSON.stringify(settings);
  for (const secret of ['s3cret', 'token=abc', 'tok_123', 'k_456', 'acme']) t.notOk(text.includes(secret), `${secret} is not in the settings`);
});

t.test('service.name: OTEL_SERVICE_NAME, then OTEL_RESOURCE_ATTRIBUTES, then the process default', async (t) => {
  const base = { OTEL_TRACES_EXPORTER: 'otlp' };
  t.equal(on(base).serviceName, 'countersign-proxy');
  t.equal(on({ ...base, OTEL_RESOURCE_ATTRIBUTES: 'deployment.environment=prod,service.name=gate%20eu' }).serviceName, 'gate eu');
  t.equal(on({ ...base, OTEL_RESOURCE_ATTRIBUTES: 'service.name=gate-eu', OTEL_SERVICE_NAME: 'gate-us' }).serviceName, 'gate-us');
  t.equal(on({ ...base, OTEL_RESOURCE_ATTRIBUTES: 'service.name=gate-eu,broken' }).serviceName, 'countersign-proxy', 'a malformed variable is discarded whole, as the SDK does');
});

t.test('attribute names are the semantic conventions', async (t) => {
  t.equal(ATTR.httpMethod, semconv.ATTR_HTTP_REQUEST_METHOD);
  t.equal(ATTR.httpRoute, semconv.ATTR_HTTP_ROUTE);
  t.equal(ATTR.httpStatus, semconv.ATTR_HTTP_RESPONSE_STATUS_CODE);
  t.equal(ATTR.urlScheme, semconv.ATTR_URL_SCHEME);
  t.equal(ATTR.serverAddress, semconv.ATTR_SERVER_ADDRESS);
  t.equal(ATTR.serverPort, semconv.ATTR_SERVER_PORT);
  t.equal(ATTR.errorType, semconv.ATTR_ERROR_TYPE);
  t.equal(ATTR.genAiToolName, incubating.ATTR_GEN_AI_TOOL_NAME);
  t.equal(ATTR.genAiToolCallId, incubating.ATTR_GEN_AI_TOOL_CALL_ID);
  t.equal(ATTR.genAiToolType, incubating.ATTR_GEN_AI_TOOL_TYPE);
  const own = Object.values(ATTR).filter((name) => !/^(http|url|server|error|gen_ai)\./.test(name));
  t.ok(own.every((name) => name.startsWith('countersign.')), 'every other name is in the countersign.* namespace');
});

t.test('GenAI tool attributes of an agent.tool.invoke evaluation', async (t) => {
  const tool = (context: Record<string, unknown>) => genAiToolAttributes({ action_type: 'agent.tool.invoke', context });
  t.same(tool({ target: { type: 'tool', id: 'send_email' } }), { 'gen_ai.tool.name': 'send_email' });
  t.same(tool({ target: { type: 'tool', id: 'send_email' }, action_id: 'call_1' }), { 'gen_ai.tool.name': 'send_email', 'gen_ai.tool.call.id': 'call_1' }, "the agent form's action.id is the call id");
  t.same(tool({ target: { type: 'tool', id: 'x' }, action_id: 'a', tool_call_id: 'call_9', tool_type: 'function' }), {
    'gen_ai.tool.name': 'x',
    'gen_ai.tool.call.id': 'call_9',
    'gen_ai.tool.type': 'function',
  }, 'tool_call_id wins over action_id; a known tool_type is kept');
  t.same(tool({ target: { type: 'tool', id: 'x' }, tool_type: 'shell' }), { 'gen_ai.tool.name': 'x' }, 'an unknown tool_type is not recorded');
  t.same(tool({ target: { type: 'repository', id: 'x' } }), {}, 'a target that is not a tool names no tool');
  t.same(tool({ target: { type: 'tool', id: 42 }, action_id: { nested: true } }), {}, 'only strings');
  t.equal(tool({ target: { type: 'tool', id: 'y'.repeat(5000) } })['gen_ai.tool.name'], 'y'.repeat(256), 'long values are cut');
  t.same(genAiToolAttributes({ action_type: 'deploy.production', context: { target: { type: 'tool', id: 'x' } } }), {}, 'other action types: none');
  t.same(genAiToolAttributes({ action_type: 'agent.tool.invoke' }), {}, 'no context: none');
});

t.test('tracing off: no OpenTelemetry module is loaded', async (t) => {
  // Every module of both processes, as their entries load them.
  await import('../../authority/main.js');
  await import('../../proxy/main.js');
  const { startTelemetry, tracing } = await import('../../shared/telemetry/index.js');
  const saved = { ...process.env };
  for (const name of Object.keys(process.env)) if (name.startsWith('OTEL_')) delete process.env[name];
  try {
    const { createLogger } = await import('../../shared/logging.js');
    const telemetry = await startTelemetry({ serviceName: 'countersign-proxy', logger: createLogger({ name: 'test', level: 'silent' }) });
    t.same(telemetry.settings, { enabled: false, reason: 'no OTEL_TRACES_EXPORTER or OTLP endpoint is set' });
    t.equal(tracing, null, 'the hot paths see null');
    await telemetry.shutdown();
  } finally {
    process.env = saved;
  }
  // This file imported @opentelemetry/semantic-conventions itself, and prom-client loads
  // @opentelemetry/api for its exemplars; the SDK, its exporters and the rest must stay unloaded.
  const { createRequire } = await import('node:module');
  const require = createRequire(import.meta.url);
  const packages = new Set(Object.keys(require.cache).map((file) => /@opentelemetry\/([^/]+)\//.exec(file)?.[1]).filter((name) => name !== undefined));
  t.same([...packages].filter((name) => name !== 'api' && name !== 'semantic-conventions'), [], 'no SDK, exporter, resource or core module');
});
