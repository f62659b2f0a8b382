/**
 * Regression: on SIGTERM the authority drains, and a request that arrived on a kept-alive
 * connection during the drain once got fastify's own 503 body (no envelope, no request_id).
 * It must get the error envelope: 503 `service_unavailable`, `request_id`, `X-Request-ID`,
 * `Retry-After` and `Connection: close`; a request already in flight completes, and its answer
 * says `Connection: close` too, so the client moves on and the drain ends.
 *
 * The authority runs in this process as `countersign authority` runs it (startAuthority, embedded
 * PGlite, loopback), and `close()` is what its SIGTERM handler calls. Raw sockets give exact
 * control over what the server has received when the drain begins.
 */
import { once } from 'node:events';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { connect, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import t from 'tap';
import { parseAuthorityConfig } from '../../authority/config.js';
import { startAuthority } from '../../authority/main.js';
import { createLogger } from '../../shared/logging.js';
import { ErrorEnvelope } from '../../shared/wire/envelope.js';

interface RawResponse {
  status: number;
  headers: Record<string, string>;
  body: string;
}

/** One HTTP/1.1 connection, written by hand and read one response at a time. */
class RawConnection {
  private buffer = '';
  private wake: (() => void) | undefined;
  ended = false;

  constructor(private readonly socket: Socket) {
    socket.setEncoding('utf8');
    socket.on('data', (chunk: string) => {
      this.buffer += chunk;
      this.wake?.();
    });
    socket.on('close', () => {
      this.ended = true;
      this.wake?.();
    });
  }

  static async open(url: string): Promise<RawConnection> {
    const { hostname, port } = new URL(url);
    const socket = connect(Number(port), hostname);
    await once(socket, 'connect');
    return new RawConnection(socket);
  }

  write(text: string): void {
    this.socket.write(text);
  }

  /** The next complete response (interim 1xx ones included); rejects if the connection closes first. */
  async response(): Promise<RawResponse> {
    for (;;) {
      const head = this.buffer.indexOf('\r\n\r\n');
      if (head >= 0) {
        const [statusLine = '', ...lines] = this.buffer.slice(0, head).split('\r\n');
        const headers = Object.fromEntries(lines.map((line) => [line.slice(0, line.indexOf(':')).toLowerCase(), line.slice(line.indexOf(':') + 1).trim()]));
        const length = Number(headers['content-length'] ?? 0);
        if (this.buffer.length >= head + 4 + length) {
          const body = this.buffer.slice(head + 4, head + 4 + length);
          this.buffer = this.buffer.slice(head + 4 + length);
          return { status: Number(statusLine.split(' ')[1]), headers, body };
        }
      }
      if (this.ended) throw new Error(`the connection closed before a complete response: ${JSON.stringify(this.buffer)}`);
      await new Promise<void>((resolve) => (this.wake = resolve));
      this.wake = undefined;
    }
  }

  async closed(): Promise<void> {
    while (!this.ended) {
      await new Promise<void>((resolve) => (this.wake = resolve));
      this.wake = undefined;
    }
  }

  destroy(): void {
    this.socket.destroy();
  }
}

t.test('requests arriving during the drain get the 503 envelope with request_id and Connection: close; in-flight ones complete', async (t) => {
  const dir = await mkdtemp(join(tmpdir(), 'countersign-drain-'));
  t.teardown(() => rm(dir, { recursive: true, force: true }));
  const config = parseAuthorityConfig({ data_dir: join(dir, 'data'), listen: '127.0.0.1:0', admin_listen: '127.0.0.1:0', log_level: 'silent' });
  const running = await startAuthority(config, { env: {}, logger: createLogger({ name: 'authority', level: 'silent' }) });
  t.teardown(() => running.close());
  const { api_key: key } = JSON.parse(await readFile(join(config.data_dir, 'bootstrap.json'), 'utf8')) as { api_key: string };
  const host = `Host: ${new URL(running.apiUrl).host}\r\n`;

  // A: a kept-alive connection that has served a request already.
  const kept = await RawConnection.open(running.apiUrl);
  t.teardown(() => kept.destroy());
  kept.write(`GET /v1-api-key-self HTTP/1.1\r\n${host}Authorization: Bearer ${key}\r\n\r\n`);
  const first = await kept.response();
  t.equal(first.status, 200);
  t.equal(first.headers.connection, 'keep-alive', 'the connection is kept alive');
  // The next request on it has begun arriving (its head is incomplete) when the drain starts, so
  // the connection is not idle and is not closed under it: it completes during the drain.
  kept.write(`GET /v1-api-key-self HTTP/1.1\r\n${host}`);

  // B: an evaluation in flight, its body not yet sent. The interim 100 Continue says the server
  // has received it (and, since A was written first, A's partial head too).
  const evaluation = JSON.stringify({ action_type: 'demo.echo', actor_id: 'demo-agent', context: { environment: 'dev', target: { type: 'demo', id: 'drain' } } });
  const inFlight = await RawConnection.open(running.apiUrl);
  t.teardown(() => inFlight.destroy());
  inFlight.write(
    `POST /v1/evaluate HTTP/1.1\r\n${host}Authorization: Bearer ${key}\r\nContent-Type: application/json\r\n` +
      `Content-Length: ${Buffer.byteLength(evaluation)}\r\nExpect: 100-continue\r\n\r\n`,
  );
  t.equal((await inFlight.response()).status, 100, 'the evaluation is in flight');

  // SIGTERM's handler calls exactly this. The API listener stops once the drain has begun.
  const closing = running.close();
  while (running.app.server.listening) await new Promise((resolve) => setImmediate(resolve));

  kept.write(`Authorization: Bearer ${key}\r\nX-Request-ID: drain-probe-1\r\n\r\n`);
  const refused = await kept.response();
  t.equal(refused.status, 503);
  const envelope = ErrorEnvelope.parse(JSON.parse(refused.body));
  t.equal(envelope.error, 'service_unavailable');
  t.equal(envelope.status, 503);
  t.equal(envelope.request_id, 'drain-probe-1', 'the request id is in the body');
  t.equal(refused.headers['x-request-id'], 'drain-probe-1', 'and in X-Request-ID');
  t.equal(refused.headers.connection, 'close');
  t.match(refused.headers['retry-after'], /^[1-9][0-9]*$/, 'Retry-After in seconds');
  t.match(refused.headers['content-type'], /^application\/json/);
  await kept.closed();
  t.ok(kept.ended, 'the server closed the kept-alive connection after the refusal');

  inFlight.write(evaluation);
  const answered = await inFlight.response();
  t.equal(answered.status, 200, 'the request in flight when the drain began completes');
  t.equal(JSON.parse(answered.body).decision, 'allow');
  t.equal(answered.headers.connection, 'close', 'and tells its client not to reuse the connection');
  await inFlight.closed();

  await closing;
  t.ok(kept.ended && inFlight.ended, 'the drain ended with both connections answered and closed');
});
