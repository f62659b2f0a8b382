/**
 * OpenTelemetry traces across real processes on loopback: `countersign authority` and
 * `countersign proxy` as child processes, exporting over OTLP/HTTP (JSON) to a receiver started
 * here, an upstream that records the trace headers it gets, and a client that sends its own W3C
 * `traceparent`. With tracing on, one trace runs from the client through the authority (server
 * span → evaluate → the group commit, linked both ways) and through the proxy (server span → the
 * gate's check → the consume; the forward, whose span the upstream names as its parent); an agent's
 * tool call carries the GenAI tool names; nothing secret reaches a span or a log line. With tracing
 * off, nothing is sent and the caller's trace headers reach the upstream untouched. A tracing
 * variable the processes refuse (grpc) stops the start with exit code 2.
 *
 * It runs the compiled CLI (dist/), which `npm test` builds first. Spans are awaited by polling
 * the receiver (bounded); nothing depends on timing.
 */
import { spawn, spawnSync, type ChildProcessWithoutNullStreams } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { once } from 'node:events';
import { existsSync } from 'node:fs';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { createServer } from 'node:http';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import t, { type Test } from 'tap';
import { request } from 'undici';
import { closeServer, listen } from '../helpers/loopback.js';
import { startOtlpReceiver, type OtlpReceiver, type ReceivedSpan } from '../helpers/otlp-receiver.js';
import { echoRoutesYaml } from '../helpers/echo-route.js';

const CLI = resolve('dist/bin/countersign.js');

// Two authorities (embedded PGlite) and two proxies, started and stopped in turn.
t.setTimeout(6 * 60_000);

t.before(() => {
  if (!existsSync(CLI)) throw new Error('dist/bin/countersign.js is missing: run `npm run build` (npm test does it first)');
});

interface Child {
  child: ChildProcessWithoutNullStreams;
  output: () => string;
  ready: Record<string, unknown>;
}

/** Spawns a countersign command and resolves its ready line (rejects with the output if it exits first). */
async function spawnReady(t: Test, args: string[], env: NodeJS.ProcessEnv, readyMessage: string): Promise<Child> {
  const child = spawn(process.execPath, [CLI, ...args], { env: { PATH: process.env.PATH, ...env }, cwd: resolve('.') });
  t.teardown(() => {
    if (child.exitCode === null) child.kill('SIGKILL');
  });
  let output = '';
  child.stderr.on('data', (chunk) => (output += String(chunk)));
  const ready = await new Promise<Record<string, unknown>>((resolveReady, reject) => {
    child.stdout.on('data', (chunk) => {
      output += String(chunk);
      const line = output.split('\n').find((candidate) => candidate.includes(`"msg":"${readyMessage}"`));
      if (line) resolveReady(JSON.parse(line) as Record<string, unknown>);
    });
    child.once('exit', (code) => reject(new Error(`countersign ${args[0]} exited with ${code} before it was ready:\n${output}`)));
  });
  return { child, output: () => output, ready };
}

/** SIGTERM: the drain, then the SDK's last export; resolves the exit code. */
async function stop(running: Child): Promise<number | null> {
  if (running.child.exitCode !== null) return running.child.exitCode;
  running.child.kill('SIGTERM');
  const [code] = await once(running.child, 'exit');
  return code as number | null;
}

interface Stack {
  authority: Child;
  proxy: Child;
  api: string;
  proxyUrl: string;
  apiKey: string;
  upstreamSeen: Array<{ url: string; traceparent: string | undefined; tracestate: string | undefined }>;
}

/** The upstream, the authority and the proxy in front of the upstream, each with its own extra environment. */
async function startStack(t: Test, authorityEnv: NodeJS.ProcessEnv, proxyEnv: NodeJS.ProcessEnv): Promise<Stack> {
  const upstreamSeen: Stack['upstreamSeen'] = [];
  const upstreamServer = createServer((req, res) => {
    const header = (name: string) => req.headers[name] as string | undefined;
    upstreamSeen.push({ url: req.url ?? '', traceparent: header('traceparent'), tracestate: header('tracestate') });
    req.resume();
    req.on('end', () => res.writeHead(200, { 'content-type': 'application/json' }).end('{"ok":true}'));
  });
  const upstream = await listen(upstreamServer);
  t.teardown(() => closeServer(upstreamServer));

  const dir = await mkdtemp(join(tmpdir(), 'countersign-tracing-'));
  t.teardown(() => rm(dir, { recursive: true, force: true }));
  const dataDir = join(dir, 'data');
  const authority = await spawnReady(
    t,
    ['authority'],
    { COUNTERSIGN_DATA_DIR: dataDir, COUNTERSIGN_AUTHORITY_LISTEN: '127.0.0.1:0', COUNTERSIGN_AUTHORITY_ADMIN_LISTEN: '127.0.0.1:0', ...authorityEnv },
    'authority ready',
  );
  const api = authority.ready.api as string;
  const { api_key: apiKey, organization_id: orgId } = JSON.parse(await readFile(join(dataDir, 'bootstrap.json'), 'utf8')) as { api_key: string; organization_id: string };

  const keyFile = join(dir, 'proxy.key');
  await writeFile(keyFile, `${apiKey}\n`, { mode: 0o600 });
  const configFile = join(dir, 'proxy.yaml');
  await writeFile(
    configFile,
    `listen: 127.0.0.1:0
admin_listen: 127.0.0.1:0
upstream: ${upstream}
authority:
  url: ${api}
  api_key_file: ${keyFile}
organization: ${orgId}
log_level: info
${echoRoutesYaml()}`,
  );
  // The proxy's own in-process store: this test needs no Redis (replay state is not shared with
  // the authority here, which tracing does not care about).
  const proxy = await spawnReady(t, ['proxy', '--config', configFile], { COUNTERSIGN_ALLOW_IN_PROCESS_STORE: '1', ...proxyEnv }, 'proxy listening');
  return { authority, proxy, api, proxyUrl: proxy.ready.proxy as string, apiKey, upstreamSeen };
}

/** The client's side of the trace: one trace id, a fresh span id per call. */
function clientTrace() {
  const traceId = randomBytes(16).toString('hex');
  return {
    traceId,
    span: () => {
      const spanId = randomBytes(8).toString('hex');
      return { spanId, traceparent: `00-${traceId}-${spanId}-01` };
    },
  };
}

async function post(url: string, body: unknown, headers: Record<string, string>) {
  const response = await request(url, { method: 'POST', headers: { 'content-type': 'application/json', ...headers }, body: JSON.stringify(body) });
  const text = await response.body.text();
  return { status: response.statusCode, json: JSON.parse(text) as Record<string, unknown> };
}

const demoAction = (id: string) => ({ action_type: 'demo.echo', actor_id: 'demo-agent', context: { environment: 'dev', target: { type: 'demo', id } } });
const otlpEnv = (receiver: OtlpReceiver) => ({
  OTEL_EXPORTER_OTLP_ENDPOINT: receiver.url,
  OTEL_EXPORTER_OTLP_PROTOCOL: 'http/json',
  // Export within a moment of a span's end rather than the default 5 s.
  OTEL_BSP_SCHEDULE_DELAY: '100',
});

t.test('tracing on: one trace from the client through the authority, the proxy and the upstream', async (t) => {
  const receiver = await startOtlpReceiver();
  t.teardown(() => receiver.close());
  const exportToken = `otlp-token-${randomBytes(6).toString('hex')}`;
  const env = { ...otlpEnv(receiver), OTEL_EXPORTER_OTLP_HEADERS: `x-collector-token=${exportToken}` };
  const stack = await startStack(t, env, env);
  const auth = { authorization: `Bearer ${stack.apiKey}` };
  const client = clientTrace();

  t.equal(stack.authority.ready.tracing, `otlp http/json ${receiver.url}/v1/traces`, "the authority's ready line says where spans go");
  t.equal(stack.proxy.ready.tracing, `otlp http/json ${receiver.url}/v1/traces`, "the proxy's too");
  const spanOf = (what: string, match: (span: ReceivedSpan) => boolean) => receiver.waitFor(match, what);

  await t.test('evaluate: the server span joins the caller, evaluate is its child, the group commit links both ways', async (t) => {
    const call = client.span();
    const decision = await post(`${stack.api}/v1/evaluate`, demoAction('order-1'), { ...auth, traceparent: call.traceparent });
    t.equal(decision.status, 200);
    t.equal(decision.json.decision, 'allow');

    const server = await spanOf('the authority server span', (span) => span.service === 'countersign-authority' && span.parentSpanId === call.spanId);
    t.match(server, { traceId: client.traceId, kind: 'server', name: 'POST /v1/evaluate', statusCode: 0 }, "in the client's trace, named by the route template");
    t.match(server.attributes, { 'http.request.method': 'POST', 'http.route': '/v1/evaluate', 'http.response.status_code': 200, 'url.scheme': 'http', 'countersign.request_id': String });

    const evaluate = await spanOf('the evaluate span', (span) => span.name === 'countersign.evaluate' && span.parentSpanId === server.spanId);
    t.match(evaluate, { traceId: client.traceId, kind: 'internal', service: 'countersign-authority', scope: 'countersign' });
    t.match(evaluate.attributes, {
      'countersign.decision': 'allow',
      'countersign.action_type': 'demo.echo',
      'countersign.mode': 'live',
      'countersign.permit_id': decision.json.permit_id,
      'countersign.evaluation_id': decision.json.evaluation_id,
      'countersign.action_class': 'demo',
      'countersign.reason_codes': Array,
      'countersign.risk_score': Number,
    });
    t.notOk(Object.keys(evaluate.attributes).some((name) => name.startsWith('gen_ai.')), 'no GenAI names outside agent.tool.invoke');

    const commit = await spanOf('the group commit span', (span) => span.name === 'countersign.group_commit' && span.links.some((link) => link.spanId === evaluate.spanId));
    t.equal(commit.parentSpanId, '', 'the batch is a trace of its own: it serves many');
    t.not(commit.traceId, client.traceId);
    t.ok(Number(commit.attributes['countersign.batch.size']) >= 1);
    t.same(commit.links.find((link) => link.spanId === evaluate.spanId), { traceId: client.traceId, spanId: evaluate.spanId }, 'the batch links to the request it served');
    t.ok(evaluate.links.some((link) => link.spanId === commit.spanId && link.traceId === commit.traceId), 'and the request links to its batch');
  });

  await t.test("an agent's tool call carries the GenAI tool names", async (t) => {
    const call = client.span();
    const decision = await post(
      `${stack.api}/v1/evaluate`,
      { actor: { id: 'support-agent', type: 'agent' }, action: { type: 'agent.tool.invoke', id: 'call_42' }, target: { type: 'tool', id: 'send_email' }, context: { recipient_count: 3 } },
      { ...auth, traceparent: call.traceparent },
    );
    t.equal(decision.json.decision, 'allow');
    const server = await spanOf('the agent evaluation server span', (span) => span.kind === 'server' && span.parentSpanId === call.spanId);
    const evaluate = await spanOf('the agent evaluate span', (span) => span.name === 'countersign.evaluate' && span.parentSpanId === server.spanId);
    t.match(evaluate.attributes, {
      'countersign.action_type': 'agent.tool.invoke',
      'countersign.decision': 'allow',
      'gen_ai.tool.name': 'send_email',
      'gen_ai.tool.call.id': 'call_42',
    });
  });

  let permitId = '';
  await t.test('the proxy: server span joins the caller; check, consume and forward are children; the upstream names the forward span', async (t) => {
    const decision = await post(`${stack.api}/v1/evaluate`, demoAction('order-2'), auth);
    permitId = decision.json.permit_id as string;
    const call = client.span();
    const headers = { 'x-service-permit': decision.json.permit_token as string, 'x-actor-id': 'demo-agent', traceparent: call.traceparent, tracestate: 'client=e2e' };
    const through = await post(`${stack.proxyUrl}/echo/order-2`, { hello: 'world' }, headers);
    t.equal(through.status, 200);

    const server = await spanOf('the proxy server span', (span) => span.service === 'countersign-proxy' && span.parentSpanId === call.spanId);
    t.match(server, { traceId: client.traceId, kind: 'server', name: 'POST echo', statusCode: 0 });
    t.match(server.attributes, { 'http.request.method': 'POST', 'http.response.status_code': 200, 'countersign.route': 'echo', 'countersign.outcome': 'forwarded' });

    const check = await spanOf('the gate check span', (span) => span.name === 'countersign.gate.check' && span.parentSpanId === server.spanId);
    t.match(check, { traceId: client.traceId, service: 'countersign-proxy' });
    t.match(check.attributes, {
      'countersign.verification.result': 'verified',
      'countersign.mode': 'enforce',
      'countersign.permit_id': permitId,
      'countersign.action_type': 'demo.echo',
      'countersign.route': 'echo',
    });
    t.notOk('countersign.verification.reason' in check.attributes, 'a verified permit has no refusal reason');

    const consume = await spanOf('the consume span', (span) => span.name === 'countersign.permit.consume' && span.parentSpanId === check.spanId);
    t.match(consume.attributes, { 'countersign.consume.result': 'consumed', 'countersign.permit_id': permitId });

    const forward = await spanOf('the forward span', (span) => span.name === 'countersign.forward' && span.parentSpanId === server.spanId);
    t.match(forward, { traceId: client.traceId, kind: 'client', statusCode: 0 });
    t.match(forward.attributes, { 'http.request.method': 'POST', 'http.response.status_code': 200, 'server.address': '127.0.0.1', 'countersign.upstream': 'answered' });

    const seen = stack.upstreamSeen.find((entry) => entry.url === '/echo/order-2');
    t.equal(seen?.traceparent, `00-${client.traceId}-${forward.spanId}-01`, "the upstream's parent is the proxy's forward span, in the client's trace");
    t.equal(seen?.tracestate, 'client=e2e', "the caller's tracestate travels on");
  });

  await t.test('a replay: the check says why it refused, and nothing is forwarded', async (t) => {
    const call = client.span();
    const decision = await post(`${stack.api}/v1/evaluate`, demoAction('order-3'), auth);
    const headers = { 'x-service-permit': decision.json.permit_token as string, 'x-actor-id': 'demo-agent' };
    t.equal((await post(`${stack.proxyUrl}/echo/order-3`, {}, headers)).status, 200);
    const replay = await post(`${stack.proxyUrl}/echo/order-3`, {}, { ...headers, traceparent: call.traceparent });
    t.equal(replay.status, 403);

    const server = await spanOf('the blocked request server span', (span) => span.service === 'countersign-proxy' && span.parentSpanId === call.spanId);
    t.match(server, { name: 'POST echo', statusCode: 0 }, 'a 4xx is not an error of the server');
    t.match(server.attributes, { 'http.response.status_code': 403, 'countersign.outcome': 'blocked' });
    const check = await spanOf('the refusing check span', (span) => span.name === 'countersign.gate.check' && span.parentSpanId === server.spanId);
    t.match(check.attributes, { 'countersign.verification.result': 'rejected', 'countersign.verification.reason': 'PERMIT_ALREADY_USED', 'countersign.permit_id': decision.json.permit_id });
    // Children end before their parent, so they were exported with it or before.
    t.notOk(receiver.spans.some((span) => span.name === 'countersign.forward' && span.parentSpanId === server.spanId), 'no forward span');
    t.equal(stack.upstreamSeen.filter((entry) => entry.url === '/echo/order-3').length, 1, 'the upstream saw the first use only');
  });

  await t.test('verify-permit: the verdict and the consume, in the caller\'s trace', async (t) => {
    const decision = await post(`${stack.api}/v1/evaluate`, demoAction('order-4'), auth);
    const call = client.span();
    const verdict = await post(
      `${stack.api}/v1/verify-permit`,
      { permit_token: decision.json.permit_token, action_type: 'demo.echo', actor_id: 'demo-agent' },
      { ...auth, traceparent: call.traceparent },
    );
    t.equal(verdict.json.valid, true);
    const server = await spanOf('the verify-permit server span', (span) => span.kind === 'server' && span.parentSpanId === call.spanId);
    t.equal(server.name, 'POST /v1/verify-permit');
    const verify = await spanOf('the verify span', (span) => span.name === 'countersign.verify_permit' && span.parentSpanId === server.spanId);
    t.match(verify.attributes, { 'countersign.verification.result': 'verified', 'countersign.permit_id': decision.json.permit_id, 'countersign.binding': 'partial' });
    const consume = await spanOf("the authority's consume span", (span) => span.name === 'countersign.permit.consume' && span.parentSpanId === verify.spanId);
    t.equal(consume.attributes['countersign.consume.result'], 'consumed');
  });

  await t.test('graceful shutdown exports the last spans; nothing secret was recorded or logged', async (t) => {
    t.equal(await stop(stack.proxy), 0);
    t.equal(await stop(stack.authority), 0);
    t.equal(receiver.undecoded, 0, 'every export was OTLP JSON on /v1/traces');
    t.ok(receiver.headers.length > 0 && receiver.headers.every((headers) => headers['x-collector-token'] === exportToken), 'the export headers were sent');
    const everything = JSON.stringify(receiver.spans);
    t.notOk(everything.includes(stack.apiKey), 'no API key in any span');
    t.notOk(/eyJ[\w-]+\.eyJ[\w-]+\.[\w-]+/.test(everything), 'no permit token in any span');
    t.notOk(everything.includes('demo-agent') || everything.includes('support-agent'), 'no actor id in any span');
    t.notOk(everything.includes('hello'), 'no request body in any span');
    for (const [name, running] of [['authority', stack.authority], ['proxy', stack.proxy]] as const) {
      const log = running.output();
      t.match(log, `tracing on: spans go over OTLP/HTTP to ${receiver.url}/v1/traces`, `the ${name} says where spans go`);
      t.match(log, /"export_headers":\["x-collector-token"\]/, `the ${name} names the export header`);
      t.notOk(log.includes(exportToken), `the ${name} never logs the export header's value`);
    }
  });
});

t.test("tracing off: nothing is sent, and the caller's trace headers reach the upstream untouched", async (t) => {
  const receiver = await startOtlpReceiver();
  t.teardown(() => receiver.close());
  // An endpoint is set for both: what turns tracing off is OTEL_SDK_DISABLED, and none.
  const stack = await startStack(
    t,
    { ...otlpEnv(receiver), OTEL_TRACES_EXPORTER: 'otlp', OTEL_SDK_DISABLED: 'true' },
    { ...otlpEnv(receiver), OTEL_TRACES_EXPORTER: 'none' },
  );
  t.equal(stack.authority.ready.tracing, 'off');
  t.equal(stack.proxy.ready.tracing, 'off');
  const auth = { authorization: `Bearer ${stack.apiKey}` };
  const call = clientTrace().span();
  const decision = await post(`${stack.api}/v1/evaluate`, demoAction('order-9'), { ...auth, traceparent: call.traceparent });
  t.equal(decision.json.decision, 'allow');
  const headers = { 'x-service-permit': decision.json.permit_token as string, 'x-actor-id': 'demo-agent', traceparent: call.traceparent, tracestate: 'client=e2e' };
  t.equal((await post(`${stack.proxyUrl}/echo/order-9`, {}, headers)).status, 200);
  t.same(stack.upstreamSeen, [{ url: '/echo/order-9', traceparent: call.traceparent, tracestate: 'client=e2e' }], 'the proxy passes them as the caller sent them');

  const without = await post(`${stack.api}/v1/evaluate`, demoAction('order-10'), auth);
  t.equal((await post(`${stack.proxyUrl}/echo/order-10`, {}, { 'x-service-permit': without.json.permit_token as string, 'x-actor-id': 'demo-agent' })).status, 200);
  t.same(stack.upstreamSeen[1], { url: '/echo/order-10', traceparent: undefined, tracestate: undefined }, 'and adds none of its own');

  t.equal(await stop(stack.proxy), 0);
  t.equal(await stop(stack.authority), 0);
  t.equal(receiver.requests, 0, 'nothing reached the OTLP endpoint, not even at shutdown');
  t.notMatch(stack.authority.output() + stack.proxy.output(), /tracing on/);
});

t.test('a tracing variable the processes refuse stops the start with exit code 2', async (t) => {
  const dir = await mkdtemp(join(tmpdir(), 'countersign-tracing-'));
  t.teardown(() => rm(dir, { recursive: true, force: true }));
  const result = spawnSync(process.execPath, [CLI, 'authority'], {
    env: {
      PATH: process.env.PATH,
      COUNTERSIGN_DATA_DIR: join(dir, 'data'),
      COUNTERSIGN_AUTHORITY_LISTEN: '127.0.0.1:0',
      COUNTERSIGN_AUTHORITY_ADMIN_LISTEN: '127.0.0.1:0',
      OTEL_EXPORTER_OTLP_ENDPOINT: 'http://127.0.0.1:4317',
      OTEL_EXPORTER_OTLP_PROTOCOL: 'grpc',
    },
    encoding: 'utf8',
  });
  t.equal(result.status, 2);
  t.match(result.stderr, /countersign: OTEL_EXPORTER_OTLP_PROTOCOL=grpc: Countersign exports traces over OTLP\/HTTP only/);
  t.notOk(existsSync(join(dir, 'data')), 'refused before anything was created');
});
