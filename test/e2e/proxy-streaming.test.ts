/**
 * How the proxy's forwarding (proxy/forward.ts, undici dispatch) handles answers that are not a
 * short 2xx: a large answer streamed whole, an upstream that breaks off halfway, and a client
 * that leaves before the answer came (the proxy still waits for the upstream's status). Events, not time: the test waits for what the upstream saw
 * and what the proxy recorded.
 *
 * @example
 *   npx tap --disable-coverage test/e2e/proxy-streaming.test.ts
 */
import { createHash, randomBytes } from 'node:crypto';
import { once } from 'node:events';
import { createServer, request as httpRequest, type IncomingMessage, type ServerResponse } from 'node:http';
import t, { type Test } from 'tap';
import { appBackends } from '../helpers/backends.js';
import { closeServer, listen } from '../helpers/loopback.js';
import { eventually, proxyConfig, withHarness } from '../helpers/proxy-harness.js';

/** An upstream whose answer to each path the test decides. */
async function scriptedUpstream(t: Test, answer: (path: string, res: ServerResponse) => void) {
  const arrived: string[] = [];
  const closed: string[] = [];
  const server = createServer((req, res) => {
    arrived.push(req.url ?? '');
    req.resume();
    res.on('close', () => closed.push(req.url ?? ''));
    answer(req.url ?? '', res);
  });
  const url = await listen(server);
  t.teardown(() => {
    server.closeAllConnections();
    return closeServer(server);
  });
  return { url, arrived, closed };
}

const LARGE = randomBytes(8 * 1024 * 1024);
const [backend] = appBackends();

t.test('answers that are large, broken off, or left behind', (t) =>
  withHarness(t, backend!, async (h) => {
    const later: ServerResponse[] = [];
    const upstream = await scriptedUpstream(t, (path, res) => {
      if (path === '/large') {
        res.writeHead(200, { 'content-type': 'application/octet-stream', 'content-length': LARGE.length });
        // In 64 KiB pieces, as a file server would.
        let offset = 0;
        const more = () => {
          while (offset < LARGE.length) {
            const piece = LARGE.subarray(offset, offset + 65_536);
            offset += piece.length;
            if (!res.write(piece)) return void res.once('drain', more);
          }
          res.end();
        };
        more();
      } else if (path.startsWith('/echo/broken')) {
        res.writeHead(200, { 'content-type': 'text/plain', 'content-length': 1_000 });
        res.write('only part of it');
        setImmediate(() => res.destroy());
      }
      // /echo/later: answered when the test says so.
      else if (path === '/echo/later') later.push(res);
    });
    const proxy = await h.startProxy({ upstream: upstream.url });
    // /large is an unmatched path: it streams through only under an explicit `unmatched: pass`.
    proxy.setConfig(proxyConfig(h.config.organization, upstream.url, { unmatched: 'pass' }));

    await t.test('a large answer streams through whole', async (t) => {
      const hash = createHash('sha256');
      let size = 0;
      const req = httpRequest(`${proxy.url}/large`);
      req.end();
      const [res] = (await once(req, 'response')) as [IncomingMessage];
      t.equal(res.statusCode, 200);
      t.equal(res.headers['content-length'], String(LARGE.length));
      for await (const chunk of res) {
        hash.update(chunk as Buffer);
        size += (chunk as Buffer).length;
      }
      t.equal(size, LARGE.length, 'every byte arrived');
      t.equal(hash.digest('hex'), createHash('sha256').update(LARGE).digest('hex'), 'unchanged');
    });

    await t.test('an upstream that breaks off halfway: the client connection is cut, and the break counted', async (t) => {
      const permit = await h.permit({ id: 'broken' });
      const req = httpRequest(`${proxy.url}/echo/broken`, { method: 'POST', headers: { 'x-service-permit': permit.token, 'x-actor-id': 'demo-agent' } });
      req.end('{}');
      const [res] = (await once(req, 'response')) as [IncomingMessage];
      t.equal(res.statusCode, 200, 'the status line was already out');
      const ended = new Promise<string>((resolve) => {
        res.on('error', () => resolve('error'));
        res.on('aborted', () => resolve('aborted'));
        res.on('end', () => resolve('end'));
        res.resume();
      });
      t.not(await ended, 'end', 'the client sees the answer break off, not a complete one');
      const errors = await proxy.metrics.upstreamErrors.get();
      t.equal(errors.values.find((value) => value.labels.route === 'echo')?.value, 1, 'countersign_proxy_upstream_errors_total counts it');
      const execution = await eventually('the execution record', async () =>
        (await h.records()).find((record) => record.kind === 'execution.observed' && record.permit_id === permit.id),
      );
      t.equal(execution.upstream_status, '200', 'the upstream did answer 200');
    });

    await t.test('a client that leaves while the upstream works: the answer still comes in and is recorded', async (t) => {
      const permit = await h.permit({ id: 'later' });
      const req = httpRequest(`${proxy.url}/echo/later`, { method: 'POST', headers: { 'x-service-permit': permit.token, 'x-actor-id': 'demo-agent' } });
      req.on('error', () => undefined);
      req.end('{}');
      await eventually('the request to reach the upstream', async () => (upstream.arrived.includes('/echo/later') ? true : undefined));
      req.destroy();
      const waiting = later.shift();
      t.ok(waiting, 'the upstream still holds the request: the proxy did not abort it');
      waiting!.writeHead(202).end('done');
      const execution = await eventually('the execution record', async () =>
        (await h.records()).find((record) => record.kind === 'execution.observed' && record.permit_id === permit.id),
      );
      // Regression: the proxy used to abort the upstream request and record no status at all.
      t.match(execution, { upstream: 'answered', upstream_status: '202' }, "the upstream's answer, though nobody read it");
    });

  }),
);
