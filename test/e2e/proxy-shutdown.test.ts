/**
 * The proxy's graceful stop (`startProxy(...).close()`, what SIGTERM runs): a request in flight
 * finishes with the upstream's answer, and a request that arrives during the drain on the same
 * kept-alive connection gets the 503 error envelope with its request id and `Connection: close`,
 * without reaching the upstream or touching its permit. A regression test: such a request used to
 * be forwarded by a proxy already shutting down, or cut without an answer.
 *
 * @example
 *   npx tap --disable-coverage test/e2e/proxy-shutdown.test.ts
 */
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { createServer } from 'node:http';
import { connect } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import t, { type Test } from 'tap';
import { request } from 'undici';
import { startProxy } from '../../proxy/main.js';
import { createLogger } from '../../shared/logging.js';
import { verificationStream } from '../../shared/permits/store-keys.js';
import { EvaluateResponse } from '../../shared/wire/evaluate.js';
import { VerificationRecord } from '../../shared/wire/verification-records.js';
import { createTestAuthority, GENEROUS_LIMITS } from '../helpers/authority.js';
import { appBackends, realServersMissing } from '../helpers/backends.js';
import { ManualClock } from '../helpers/clock.js';
import { closeServer, listen } from '../helpers/loopback.js';
import { eventually } from '../helpers/proxy-harness.js';

/** True once the port refuses new connections: the drain has begun. */
function refuses(url: string): Promise<true | undefined> {
  return new Promise((resolve) => {
    const socket = connect(Number(new URL(url).port), '127.0.0.1');
    socket.on('connect', () => {
      socket.destroy();
      resolve(undefined);
    });
    socket.on('error', () => resolve(true));
  });
}

/** The answers on one connection, split into status, headers and body. */
function parseAnswers(raw: string): Array<{ status: number; headers: Record<string, string>; body: string }> {
  const answers = [];
  let rest = raw;
  while (rest.startsWith('HTTP/1.1 ')) {
    const headEnd = rest.indexOf('\r\n\r\n');
    const [statusLine, ...lines] = rest.slice(0, headEnd).split('\r\n');
    const headers = Object.fromEntries(lines.map((line) => [line.slice(0, line.indexOf(':')).toLowerCase(), line.slice(line.indexOf(':') + 1).trim()]));
    const length = Number(headers['content-length']);
    const body = rest.slice(headEnd + 4, headEnd + 4 + length);
    answers.push({ status: Number(statusLine!.split(' ')[1]), headers, body });
    rest = rest.slice(headEnd + 4 + length);
  }
  return answers;
}

for (const backend of appBackends()) {
  t.test(`the proxy's drain on ${backend.name}`, async (t: Test) => {
    const clock = new ManualClock(Date.now());
    const opened = await backend.open({ now: () => clock.now() });
    const authority = await createTestAuthority(opened, { config: GENEROUS_LIMITS, clock });
    t.teardown(async () => {
      await authority.close();
      await opened.cleanup();
    });
    const authorityUrl = (await authority.app.listen({ host: '127.0.0.1', port: 0 })).replace('localhost', '127.0.0.1');
    // The authority dates a permit no earlier than the replay store's epoch, which Redis creates at
    // its own (real) time on the first evaluate: a manual clock left behind by a slow set-up would
    // make the gate, on the same clock, find fresh permits not yet valid.
    clock.advance(Math.max(0, Date.now() - clock.now()));

    const received: string[] = [];
    let release: () => void = () => undefined;
    const released = new Promise<void>((resolve) => (release = resolve));
    const upstreamServer = createServer((req, res) => {
      received.push(req.url ?? '');
      req.resume();
      // /echo/stuck is never answered.
      if (req.url?.startsWith('/echo/stuck')) return;
      req.on('end', () => void released.then(() => res.writeHead(201, { 'content-type': 'text/plain', 'content-length': '8' }).end('upstream')));
    });
    const upstream = await listen(upstreamServer);
    t.teardown(() => closeServer(upstreamServer));

    const dir = await mkdtemp(join(tmpdir(), 'countersign-drain-'));
    t.teardown(() => rm(dir, { recursive: true, force: true }));
    const keyFile = join(dir, 'proxy.key');
    await writeFile(keyFile, `${await authority.key(['verify:execute'])}\n`, { mode: 0o600 });
    const file = join(dir, 'proxy.yaml');
    await writeFile(
      file,
      `listen: 127.0.0.1:0
admin_listen: 127.0.0.1:0
upstream: ${upstream}
authority:
  url: ${authorityUrl}
  api_key_file: ${keyFile}
organization: ${authority.acme.id}
log_level: silent
routes:
  - name: echo
    match: { method: POST, path: /echo/:id }
    action_type: demo.echo
    facts:
      actor_id: { header: X-Actor-Id }
      environment: { const: dev }
      target: { type: { const: demo }, id: { path: id } }
`,
    );
    const options = { env: {}, logger: createLogger({ name: 'proxy', level: 'silent' }), store: opened.store, now: () => clock.now(), watch: false };
    const proxy = await startProxy(file, options);
    t.teardown(() => proxy.close());
    const records = async () => (await opened.store.readRecords(verificationStream(authority.acme.id), '0', 1000)).map((entry) => VerificationRecord.parse(entry.fields));

    const permit = async (id: string) => {
      const response = await request(`${authorityUrl}/v1/evaluate`, {
        method: 'POST',
        headers: { ...authority.bearer(authority.acmeAdmin), 'content-type': 'application/json' },
        body: JSON.stringify({ action_type: 'demo.echo', actor_id: 'demo-agent', context: { environment: 'dev', target: { type: 'demo', id } } }),
      });
      const decision = EvaluateResponse.parse(await response.body.json());
      if (!decision.permit_token || !decision.permit_id) throw new Error(`no permit for ${id}`);
      return { token: decision.permit_token, id: decision.permit_id };
    };
    const post = (id: string, token: string, requestId: string) =>
      `POST /echo/${id} HTTP/1.1\r\nHost: proxy\r\nContent-Type: application/json\r\nContent-Length: 2\r\nX-Actor-Id: demo-agent\r\n` +
      `X-Service-Permit: ${token}\r\nX-Request-ID: ${requestId}\r\n\r\n{}`;

    await t.test('a request on a kept-alive connection during the drain gets the 503 envelope; the one in flight completes', async (t) => {
      const first = await permit('in-flight');
      const second = await permit('during-drain');
      const socket = connect(Number(new URL(proxy.url).port), '127.0.0.1');
      let raw = '';
      socket.on('data', (chunk: Buffer) => (raw += chunk.toString('utf8')));
      const ended = new Promise<void>((resolve) => socket.on('close', () => resolve()));
      socket.write(post('in-flight', first.token, 'req-in-flight'));
      await eventually('the first request to reach the upstream', async () => (received.includes('/echo/in-flight') ? true : undefined));

      const closed = proxy.close();
      await eventually('the drain to begin (the port refuses new connections)', () => refuses(proxy.url));
      // Same connection, while the first is still in flight.
      socket.write(post('during-drain', second.token, 'req-during-drain'));
      release();
      await ended;
      await closed;

      const [answered, refused, ...more] = parseAnswers(raw);
      t.equal(more.length, 0, 'two answers on the connection');
      t.match(answered, { status: 201, body: 'upstream', headers: { 'x-request-id': 'req-in-flight' } }, 'the request in flight got the upstream’s answer');
      t.match(refused, { status: 503, headers: { 'x-request-id': 'req-during-drain', connection: 'close', 'content-type': /application\/json/ } });
      t.same(JSON.parse(refused!.body), {
        error: 'service_unavailable',
        message: 'The proxy is shutting down; nothing was forwarded and the permit was not used. Send the request again.',
        status: 503,
        request_id: 'req-during-drain',
        reason: 'SHUTTING_DOWN',
      });
      t.same(received, ['/echo/in-flight'], 'the upstream saw only the request in flight');
      const written = await records();
      t.same(written.filter((record) => record.permit_id === second.id), [], "the refused request's permit was not touched");
      t.match(
        written.filter((record) => record.permit_id === first.id).map((record) => [record.kind, record.upstream_status]),
        [['permit.verified', ''], ['execution.observed', '201']],
        "the in-flight request's records were written before the stop",
      );
    });

    await t.test('a request still in flight when the drain runs out is cut, and recorded as unknown', async (t) => {
      const impatient = await startProxy(file, { ...options, drainTimeoutMs: 0 });
      const stuck = await permit('stuck');
      const socket = connect(Number(new URL(impatient.url).port), '127.0.0.1');
      socket.on('error', () => undefined);
      const ended = new Promise<void>((resolve) => socket.on('close', () => resolve()));
      socket.write(post('stuck', stuck.token, 'req-stuck'));
      await eventually('the request to reach the upstream', async () => (received.includes('/echo/stuck') ? true : undefined));
      await impatient.close();
      await ended;
      const execution = (await records()).find((record) => record.kind === 'execution.observed' && record.permit_id === stuck.id);
      t.match(execution, { upstream: 'unknown', upstream_status: '', code: 'PROXY_STOPPED' }, 'written before close() resolved');
    });
  });
}

if (realServersMissing()) t.comment(`the Postgres + Redis variant did not run: ${realServersMissing()}`);
