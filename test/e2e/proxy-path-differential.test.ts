/**
 * The gate cannot be walked around: real upstream routers behind the real proxy on
 * loopback, each with a protected handler that counts its calls. Path variants an upstream might
 * read as `/echo/<id>` (extra segments, `//`, dot segments, encodings, case, `;` parameters,
 * backslashes, other methods, method overrides) are sent WITHOUT a permit, as raw bytes so that no
 * client library normalizes them first; the assertion is on effects: the protected handlers ran 0
 * times, while a permitted request reaches each of them exactly once.
 *
 * Upstreams: fastify with its defaults; fastify with every lenient router option on (trailing and
 * duplicate slashes ignored, case-insensitive, `;` as a delimiter); node:http with the demo's
 * prefix router (`startsWith('/echo/')`); node:http with a prefix router that also decodes, turns
 * `\` into `/`, strips `;params`, resolves dot segments, collapses slashes, lower-cases and honours
 * method-override headers and `_method` (the most forgiving upstream we can think of).
 */
import fastify, { type FastifyInstance } from 'fastify';
import fc from 'fast-check';
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import { connect } from 'node:net';
import t, { type Test } from 'tap';
import { parseProxyConfig, type ProxyConfig, type ProxyConfigInput } from '../../proxy/config.js';
import { appBackends } from '../helpers/backends.js';
import { closeServer, listen } from '../helpers/loopback.js';
import { echoFacts, withHarness, type RunningProxy } from '../helpers/proxy-harness.js';

interface CountingUpstream {
  name: string;
  url: string;
  /** Calls of the protected (consequential) handler. */
  protectedCalls: string[];
}

const OVERRIDES = ['X-HTTP-Method-Override', 'X-HTTP-Method', 'X-Method-Override'];

async function startFastify(t: Test, name: string, routerOptions: Record<string, boolean>): Promise<CountingUpstream> {
  const upstream: CountingUpstream = { name, url: '', protectedCalls: [] };
  const app: FastifyInstance = fastify({ routerOptions });
  const guarded = async (request: { url: string }) => {
    upstream.protectedCalls.push(request.url);
    return { echoed: true };
  };
  app.post('/echo/:id', guarded);
  app.post('/echo/:id/*', guarded);
  app.get('/public', async () => ({ public: true }));
  upstream.url = (await app.listen({ host: '127.0.0.1', port: 0 })).replace('localhost', '127.0.0.1');
  t.teardown(() => app.close());
  return upstream;
}

async function startNodeRouter(t: Test, name: string, read: (req: IncomingMessage) => { method: string; path: string }): Promise<CountingUpstream> {
  const upstream: CountingUpstream = { name, url: '', protectedCalls: [] };
  const server = createServer((req: IncomingMessage, res: ServerResponse) => {
    req.resume();
    req.on('end', () => {
      const { method, path } = read(req);
      if (method === 'POST' && path.startsWith('/echo/')) {
        upstream.protectedCalls.push(req.url ?? '');
        res.writeHead(200, { 'content-type': 'application/json' }).end('{"echoed":true}');
      } else {
        res.writeHead(path === '/public' ? 200 : 404).end();
      }
    });
  });
  upstream.url = await listen(server);
  t.teardown(() => closeServer(server));
  return upstream;
}

/** The demo upstream's router: the raw target, by prefix. */
const prefixRouter = (req: IncomingMessage) => ({ method: req.method ?? '', path: req.url ?? '' });

/** Everything a forgiving framework or middleware stack might do to a path and a method. */
function forgivingRouter(req: IncomingMessage): { method: string; path: string } {
  const url = req.url ?? '/';
  const query = new URLSearchParams(url.includes('?') ? url.slice(url.indexOf('?') + 1) : '');
  let path = url.split(/[?#]/)[0]!.replace(/;[^/]*/g, '');
  try {
    path = decodeURIComponent(path);
  } catch {
    // left as is
  }
  path = path.replace(/\\/g, '/');
  path = new URL(path.replace(/\/+/g, '/'), 'http://upstream').pathname.replace(/\/+/g, '/').toLowerCase();
  const override = OVERRIDES.map((name) => req.headers[name.toLowerCase()]).find((value) => typeof value === 'string') as string | undefined;
  const method = (override ?? query.get('_method') ?? req.method ?? '').toUpperCase();
  return { method, path };
}

/** Sends exactly these bytes (no client normalization); resolves with the status code (0: no answer). */
function rawStatus(base: string, method: string, target: string, headers: Record<string, string> = {}): Promise<number> {
  const { port } = new URL(base);
  const lines = [`${method} ${target} HTTP/1.1`, 'Host: upstream.test', 'Content-Type: application/json', 'Content-Length: 2', 'Connection: close'];
  for (const [name, value] of Object.entries(headers)) lines.push(`${name}: ${value}`);
  return new Promise((resolve) => {
    const chunks: Buffer[] = [];
    const socket = connect(Number(port), '127.0.0.1', () => socket.write(`${lines.join('\r\n')}\r\n\r\n{}`));
    socket.on('data', (chunk: Buffer) => chunks.push(chunk));
    socket.on('error', () => undefined);
    socket.on('close', () => {
      const status = /^HTTP\/1\.1 (\d{3})/.exec(Buffer.concat(chunks).toString('latin1'));
      resolve(status ? Number(status[1]) : 0);
    });
  });
}

interface Variant {
  method: string;
  target: string;
  headers?: Record<string, string>;
}

const POST_PATHS = [
  '/echo/1/extra',
  '/echo/1/extra/more',
  '//echo/1',
  '/echo//1',
  '/echo/1//',
  '/./echo/1',
  '/x/../echo/1',
  '/x/%2e%2e/echo/1',
  '/x/%2E%2E/echo/1',
  '/x/.%2e/echo/1',
  '/echo/./1',
  '/echo/%2e/1',
  '/echo/1/..',
  '/echo/1/%2e%2e/2',
  '/%65cho/1',
  '/ech%6F/1',
  '/echo%2f1',
  '/echo%2F1',
  '/echo%5c1',
  '/echo\\1',
  '\\echo\\1',
  '/ECHO/1',
  '/Echo/1/Extra',
  '/echo/1;a=b',
  '/echo;a=b/1',
  '/echo/1?x',
  '/echo/1?_method=POST',
  '/echo/1#f',
  '/echo/1/',
  '/echo/',
  '/echo/1%00',
  '/echo/1%',
  '/echo/%zz',
  'http://upstream.test/echo/1/extra',
  'http://upstream.test/x/../echo/1',
  '*',
];

function variants(): Variant[] {
  const list: Variant[] = POST_PATHS.map((target) => ({ method: 'POST', target }));
  for (const method of ['GET', 'HEAD', 'OPTIONS', 'PUT', 'PATCH', 'DELETE', 'PROPFIND']) list.push({ method, target: '/echo/1' });
  for (const name of OVERRIDES) {
    for (const target of ['/public', '/echo/1', '/echo/1/extra']) list.push({ method: 'GET', target, headers: { [name]: 'POST' } });
    list.push({ method: 'POST', target: '/echo/1', headers: { [name]: 'POST' } });
  }
  list.push({ method: 'GET', target: '/echo/1?_method=POST' }, { method: 'GET', target: '/public?_method=post' }, { method: 'GET', target: '/public?%5Fmethod=POST' });
  return list;
}

function config(organization: string, upstream: string, echoPath: string, overrides: Partial<ProxyConfigInput>): ProxyConfig {
  return parseProxyConfig({
    upstream,
    authority: { url: 'http://127.0.0.1:7070', api_key: 'cs_test_unused' },
    organization,
    log_level: 'silent',
    routes: [{ name: 'echo', match: { method: 'POST', path: echoPath }, action_type: 'demo.echo', facts: echoFacts() }],
    ...overrides,
  });
}

for (const backend of appBackends().slice(0, 1)) {
  t.test(`no path variant reaches a protected handler without a permit (${backend.name})`, (t) =>
    withHarness(t, backend, async (h) => {
      const upstreams = [
        await startFastify(t, 'fastify (defaults)', {}),
        await startFastify(t, 'fastify (lenient router)', { ignoreTrailingSlash: true, ignoreDuplicateSlashes: true, caseSensitive: false, useSemicolonDelimiter: true }),
        await startNodeRouter(t, 'node:http prefix router (the demo upstream)', prefixRouter),
        await startNodeRouter(t, 'node:http forgiving prefix router', forgivingRouter),
      ];
      const org = h.authority.acme.id;
      // The configurations a deployment may run: the default (deny), and pass with a protected subtree.
      const configs = [
        { name: 'default (unmatched: deny)', echoPath: '/echo/:id', overrides: {} },
        { name: 'unmatched: pass, /echo/:id/**', echoPath: '/echo/:id/**', overrides: { unmatched: 'pass' as const } },
        { name: 'unmatched: deny, /echo/:id/**', echoPath: '/echo/:id/**', overrides: { unmatched: 'deny' as const } },
        {
          name: 'unmatched: deny with pass_through',
          echoPath: '/echo/:id/**',
          overrides: { unmatched: 'deny' as const, pass_through: [{ path: '/healthz' }, { methods: ['GET' as const], path: '/public/*' }] },
        },
      ];

      for (const upstream of upstreams) {
        await t.test(upstream.name, async (t) => {
          const proxy: RunningProxy = await h.startProxy({ upstream: upstream.url });
          for (const setup of configs) {
            proxy.setConfig(config(org, upstream.url, setup.echoPath, setup.overrides));
            const answers: string[] = [];
            for (const variant of variants()) {
              const status = await rawStatus(proxy.url, variant.method, variant.target, variant.headers);
              answers.push(`${variant.method} ${variant.target} ${JSON.stringify(variant.headers ?? {})} → ${status}`);
              t.notOk(status >= 200 && status < 300, `${setup.name}: ${variant.method} ${variant.target} ${JSON.stringify(variant.headers ?? {})} is refused (${status})`);
            }
            t.same(upstream.protectedCalls, [], `${setup.name}: the protected handler never ran without a permit`);
          }

          // Control: a permitted request does reach it, exactly once, in each configuration.
          for (const [index, setup] of configs.entries()) {
            proxy.setConfig(config(org, upstream.url, setup.echoPath, setup.overrides));
            const id = `p${index}-${upstream.name.replace(/[^a-z]/g, '')}`.slice(0, 60);
            const permit = await h.permit({ id });
            const status = await rawStatus(proxy.url, 'POST', `/echo/${id}`, { 'X-Service-Permit': permit.token, 'X-Actor-Id': 'demo-agent' });
            t.equal(status, 200, `${setup.name}: the permitted request is answered by the protected handler`);
            const replay = await rawStatus(proxy.url, 'POST', `/echo/${id}`, { 'X-Service-Permit': permit.token, 'X-Actor-Id': 'demo-agent' });
            t.equal(replay, 403, 'and its permit is spent');
          }
          t.equal(upstream.protectedCalls.length, configs.length, 'one protected call per permitted request, no more');
          t.ok(upstream.protectedCalls.every((url) => /^\/echo\/p\d-[a-z]+$/.test(url)), 'each forwarded exactly as sent');
        });
      }

      await t.test('property: random path variants never reach a protected handler without a permit', async (t) => {
        const pieces = ['echo', 'ECHO', '%65cho', 'ech%6f', '1', 'x', 'extra', '', '.', '..', '%2e', '%2E%2e', '%2f', '%5C', ';a=b', '\\', '%00', '%', '?', '#', '*', '**'];
        const methods = ['POST', 'GET', 'HEAD', 'PUT', 'DELETE', 'OPTIONS'];
        const proxies = await Promise.all(upstreams.map((upstream) => h.startProxy({ upstream: upstream.url })));
        proxies.forEach((proxy, i) => proxy.setConfig(config(org, upstreams[i]!.url, '/echo/:id/**', { unmatched: 'pass' })));
        await fc.assert(
          fc.asyncProperty(
            fc.constantFrom(...methods),
            fc.array(fc.constantFrom(...pieces), { minLength: 1, maxLength: 6 }),
            fc.option(fc.constantFrom(...OVERRIDES), { nil: undefined }),
            async (method, segments, override) => {
              const target = `/${segments.join('/')}`;
              for (const [i, proxy] of proxies.entries()) {
                await rawStatus(proxy.url, method, target, override === undefined ? {} : { [override]: 'POST' });
                if (upstreams[i]!.protectedCalls.length !== configs.length) return false;
              }
              return true;
            },
          ),
          { numRuns: 150 },
        );
        t.same(
          upstreams.map((upstream) => upstream.protectedCalls.length),
          upstreams.map(() => configs.length),
          'only the permitted requests ever reached a protected handler',
        );
      });
    }),
  );
}
