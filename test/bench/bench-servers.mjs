#!/usr/bin/env node
/**
 * The small servers of the proxy benchmark, each run as its own child process so that none shares
 * an event loop with the load generator, the upstream or another proxy:
 *
 *   node test/bench/bench-servers.mjs upstream      the protected system: 200 with the given body;
 *                                                   counts what reaches it (GET /__bench/stats); at
 *                                                   /mcp the demo MCP server of `countersign start`
 *                                                   (dist/bin/demo-mcp.js)
 *   node test/bench/bench-servers.mjs http-proxy-3  pass-through with http-proxy-3, keep-alive agent
 *   node test/bench/bench-servers.mjs undici        pass-through on undici's Agent, agent.request,
 *                                                   the answer streamed with stream.pipeline
 *   node test/bench/bench-servers.mjs undici-dispatch  the same on agent.dispatch, no stream in between
 *                                                   (the engine of proxy/forward.ts)
 *   node test/bench/bench-servers.mjs naive         the naive gate: jose jwtVerify, Redis SET NX, then
 *                                                   forward with the classic http-proxy
 *   node test/bench/bench-servers.mjs composed-floor  the floor's parts alone: the proxy's Ed25519 verify,
 *                                                   Redis SET NX, the undici-dispatch forward
 *   node test/bench/bench-servers.mjs fastify-json  the HTTP part of an evaluation's floor: fastify (the
 *                                                   authority's server) parsing a POST's JSON body and
 *                                                   answering a fixed JSON text, nothing else
 *   node test/bench/bench-servers.mjs otlp-sink     an OTLP/HTTP endpoint that accepts every export and
 *                                                   discards it, counting (GET /__bench/stats)
 *
 * The configuration comes as one JSON line on stdin (it may hold an API key, which must not show
 * in `ps`); the child listens on a free loopback port and answers one JSON line on stdout,
 * `{"url": "http://127.0.0.1:<port>"}`. It exits on SIGTERM or SIGINT, and when stdin closes, so a
 * bench process that dies without cleaning up does not leave it running.
 */
import { Agent as HttpAgent, createServer } from 'node:http';
import { createInterface } from 'node:readline';
import { pipeline } from 'node:stream/promises';

/** Hop-by-hop fields (RFC 9110 §7.6.1) and host, which the forwarders must not copy. */
const HOP_BY_HOP = new Set(['connection', 'keep-alive', 'te', 'trailer', 'transfer-encoding', 'upgrade', 'expect', 'host', 'proxy-connection']);

/**
 * Long enough that no keep-alive connection is closed by the upstream between two scenarios: a
 * POST on a connection the server is just closing would fail instead of being retried.
 */
const KEEP_ALIVE_MS = 120_000;

function listen(server) {
  server.keepAliveTimeout = KEEP_ALIVE_MS;
  server.headersTimeout = KEEP_ALIVE_MS + 1_000;
  return new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => resolve(`http://127.0.0.1:${server.address().port}`));
  });
}

function sendJson(res, status, body) {
  const text = JSON.stringify(body);
  res.writeHead(status, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(text) });
  res.end(text);
}

// ── The upstream ──────────────────────────────────────────────────────────────────────────────

/**
 * Counts every request, and the ids of `/echo/<id>` requests (the gated route) separately: each
 * gated request carries a fresh permit for its own id, so a distinct count below the total would
 * mean one permit opened the upstream twice. `/mcp` is served by the demo MCP server; the calls the
 * gate let through carry the permit's id (X-Countersign-Permit-Id), counted likewise.
 */
async function upstream({ body: text }) {
  const { DEMO_MCP_PATH, serveDemoMcp } = await import(new URL('../../dist/bin/demo-mcp.js', import.meta.url).href);
  const stats = { requests: 0, echo: 0, mcp: 0, mcpPermitted: 0 };
  const echoIds = new Set();
  const mcpPermits = new Set();
  // The load generator checks every answer against this body, so it knows the upstream wrote it.
  const body = Buffer.from(text);
  return createServer((req, res) => {
    if (req.url === '/__bench/stats') return sendJson(res, 200, { ...stats, echoDistinct: echoIds.size, mcpPermittedDistinct: mcpPermits.size });
    stats.requests += 1;
    if (req.url === DEMO_MCP_PATH) {
      stats.mcp += 1;
      const permitId = req.headers['x-countersign-permit-id'];
      if (permitId !== undefined) {
        stats.mcpPermitted += 1;
        mcpPermits.add(permitId);
      }
      return serveDemoMcp(req, res);
    }
    if (req.url.startsWith('/echo/')) {
      stats.echo += 1;
      echoIds.add(req.url);
    }
    // Drain the request body (there is none in the bench) before answering, as a real server would.
    req.resume();
    req.on('end', () => {
      res.writeHead(200, { 'content-type': 'application/json', 'content-length': body.length });
      res.end(body);
    });
  });
}

// ── Pass-through forwarders, the engine comparison ───────────────────────────────────────────

async function httpProxy3({ upstream: target }) {
  const { createProxyServer } = await import('http-proxy-3');
  const proxy = createProxyServer({ target, agent: new HttpAgent({ keepAlive: true }), xfwd: true });
  proxy.on('error', (_error, _req, res) => failed(res));
  return createServer((req, res) => proxy.web(req, res));
}

/** undici's `request` API with the answer piped: the engine proxy/server.ts used before proxy/forward.ts. */
async function undiciForwarder({ upstream: target }) {
  const { Agent } = await import('undici');
  const agent = new Agent({ keepAliveTimeout: 30_000 });
  const origin = new URL(target).origin;
  return createServer(async (req, res) => {
    try {
      const answer = await agent.request({
        origin,
        path: req.url,
        method: req.method,
        headers: forwardHeaders(req),
        body: hasBody(req) ? req : null,
      });
      res.writeHead(answer.statusCode, responseHeaders(answer.headers));
      await pipeline(answer.body, res);
    } catch {
      failed(res);
    }
  });
}

/**
 * The same forwarder on undici's lowest level, `dispatch`: the answer is written straight into the
 * response, with no Readable in between, no `stream.pipeline` and no AbortController per request
 * (the controller undici hands over cancels the request when the client leaves).
 */
async function undiciDispatch({ upstream: target }) {
  const { Agent } = await import('undici');
  const agent = new Agent({ keepAliveTimeout: 30_000 });
  const origin = new URL(target).origin;
  return createServer((req, res) => {
    let upstream = null;
    res.once('close', () => {
      if (!res.writableFinished) upstream?.abort(new Error('the client went away'));
    });
    res.on('drain', () => upstream?.resume());
    agent.dispatch(
      { origin, path: req.url, method: req.method, headers: forwardHeaders(req), body: hasBody(req) ? req : null },
      {
        onRequestStart(controller) {
          upstream = controller;
        },
        onResponseStart(_controller, statusCode, headers) {
          res.writeHead(statusCode, responseHeaders(headers));
        },
        onResponseData(controller, chunk) {
          // Backpressure: undici waits for resume() (on 'drain') before the next chunk.
          if (!res.write(chunk)) controller.pause();
        },
        onResponseEnd() {
          res.end();
        },
        onResponseError() {
          failed(res);
        },
      },
    );
  });
}

function forwardHeaders(req) {
  const out = [];
  const raw = req.rawHeaders;
  for (let i = 0; i < raw.length; i += 2) {
    if (!HOP_BY_HOP.has(raw[i].toLowerCase())) out.push(raw[i], raw[i + 1]);
  }
  out.push('x-forwarded-for', req.socket.remoteAddress ?? '');
  return out;
}

function responseHeaders(headers) {
  const out = {};
  for (const [name, value] of Object.entries(headers)) if (!HOP_BY_HOP.has(name)) out[name] = value;
  return out;
}

function hasBody(req) {
  return req.headers['transfer-encoding'] !== undefined || (req.headers['content-length'] ?? '0') !== '0';
}

function failed(res) {
  if (res.headersSent) res.destroy();
  else sendJson(res, 502, { error: 'upstream_unavailable' });
}

// ── The naive gate ────────────────────────────────────────────────────────────────────────────

/**
 * The gate as one would first write it: the permit checked with jose's jwtVerify against the
 * authority's JWKS (fetched once), consumed with one `SET NX PX` in Redis, then forwarded with the
 * classic http-proxy. It checks less than the real proxy (no binding hash, no revocation, no
 * verification records): it is the floor of what a gate must spend, not a rival product.
 */
async function naive({ upstream: target, authority, apiKey, redisUrl, issuer, audience, permitHeader }) {
  const [{ importJWK, jwtVerify }, { Redis }, httpProxy, { request }] = await Promise.all([
    import('jose'),
    import('ioredis'),
    import('http-proxy').then((module) => module.default),
    import('undici'),
  ]);
  const answer = await request(`${authority}/v1/permit-keys`, { headers: { authorization: `Bearer ${apiKey}` } });
  if (answer.statusCode !== 200) throw new Error(`GET /v1/permit-keys answered ${answer.statusCode}`);
  const keys = new Map();
  for (const jwk of (await answer.body.json()).keys) keys.set(jwk.kid, await importJWK(jwk, 'EdDSA'));
  const redis = new Redis(redisUrl, { enableOfflineQueue: false, maxRetriesPerRequest: 0 });
  const proxy = httpProxy.createProxyServer({ target, agent: new HttpAgent({ keepAlive: true }), xfwd: true });
  proxy.on('error', (_error, _req, res) => failed(res));
  const header = permitHeader.toLowerCase();
  const options = { issuer, audience, algorithms: ['EdDSA'], typ: 'permit+jwt' };
  const keyFor = (protectedHeader) => keys.get(protectedHeader.kid) ?? Promise.reject(new Error('unknown kid'));

  return createServer(async (req, res) => {
    const token = req.headers[header];
    if (typeof token !== 'string') return sendJson(res, 403, { error: 'permit_required' });
    let claims;
    try {
      ({ payload: claims } = await jwtVerify(token, keyFor, options));
    } catch {
      return sendJson(res, 403, { error: 'permit_rejected' });
    }
    try {
      const ttlMs = Math.max(1, claims.exp * 1000 + 5_000 - Date.now());
      const first = await redis.set(`bench-naive:permit:${claims.jti}`, '1', 'PX', ttlMs, 'NX');
      if (first !== 'OK') return sendJson(res, 403, { error: 'permit_rejected', reason: 'PERMIT_ALREADY_USED' });
    } catch {
      return sendJson(res, 503, { error: 'gate_unavailable' });
    }
    delete req.headers[header];
    proxy.web(req, res);
  });
}

// ── The floor's parts composed ────────────────────────────────────────────────────────────────

/**
 * The floor's three parts and nothing else, in one process: the permit's signature checked with
 * the engine the proxy uses (dist/shared/permits/ed25519.js), the permit consumed with one
 * `SET NX PX`, the request forwarded with undici `dispatch` as in the `undici-dispatch` row. No
 * binding, claims schema, revocation, epoch fence, records, metrics or logs: what composing the
 * floor costs before any of the gate's checks.
 */
async function composedFloor({ upstream: target, authority, apiKey, redisUrl, permitHeader }) {
  const [{ Redis }, { request }, { processEd25519 }, { createPublicKey }] = await Promise.all([
    import('ioredis'),
    import('undici'),
    import(new URL('../../dist/shared/permits/ed25519.js', import.meta.url).href),
    import('node:crypto'),
  ]);
  const answer = await request(`${authority}/v1/permit-keys`, { headers: { authorization: `Bearer ${apiKey}` } });
  if (answer.statusCode !== 200) throw new Error(`GET /v1/permit-keys answered ${answer.statusCode}`);
  const keys = new Map();
  for (const jwk of (await answer.body.json()).keys) keys.set(jwk.kid, createPublicKey({ key: jwk, format: 'jwk' }));
  const ed25519 = processEd25519();
  const redis = new Redis(redisUrl, { enableOfflineQueue: false, maxRetriesPerRequest: 0 });
  const forward = (await undiciDispatch({ upstream: target })).listeners('request')[0];
  const header = permitHeader.toLowerCase();

  const claimsOf = (token) => {
    const [head, body, signature] = token.split('.');
    const kid = JSON.parse(Buffer.from(head, 'base64url').toString()).kid;
    const key = keys.get(kid);
    if (key === undefined || signature === undefined) return null;
    const input = Buffer.from(`${head}.${body}`);
    return ed25519.verify(input, key, Buffer.from(signature, 'base64url')) ? JSON.parse(Buffer.from(body, 'base64url').toString()) : null;
  };

  return createServer(async (req, res) => {
    const token = req.headers[header];
    const claims = typeof token === 'string' ? claimsOf(token) : null;
    if (claims === null) return sendJson(res, 403, { error: 'permit_rejected' });
    try {
      const ttlMs = Math.max(1, claims.exp * 1000 + 5_000 - Date.now());
      const first = await redis.set(`bench-floor:permit:${claims.jti}`, '1', 'PX', ttlMs, 'NX');
      if (first !== 'OK') return sendJson(res, 403, { error: 'permit_rejected', reason: 'PERMIT_ALREADY_USED' });
    } catch {
      return sendJson(res, 503, { error: 'gate_unavailable' });
    }
    delete req.headers[header];
    forward(req, res);
  });
}

// ── The HTTP part of an evaluation's floor ───────────────────────────────────────────────────

/**
 * fastify, the authority's server, with its defaults and no logger, and one POST route at `path`
 * that parses the JSON body and answers `answer` (a JSON text: a real evaluate answer, so the
 * bytes on the wire are evaluate's): what receiving and answering an evaluation costs before the
 * authority does any of its own work. fastify listens through its `server`, which routes once the
 * instance is ready.
 */
async function fastifyJson({ path, answer }) {
  const { default: Fastify } = await import('fastify');
  const app = Fastify({ logger: false });
  app.post(path, async (_request, reply) => reply.type('application/json').send(answer));
  await app.ready();
  return app.server;
}

// ── The OTLP sink ─────────────────────────────────────────────────────────────────────────────

/**
 * Where a traced proxy exports (tracing-on runs of proxy-compare.mjs): a collector's OTLP/HTTP
 * endpoint that reads each export whole, answers 200 and keeps nothing but counts
 * (GET /__bench/stats: export requests and bytes), so the proxy pays the export as it would to a
 * real collector, and the sink costs the machine as little as a receiver can.
 */
function otlpSink() {
  const stats = { exports: 0, bytes: 0 };
  return createServer((req, res) => {
    if (req.url === '/__bench/stats') return sendJson(res, 200, stats);
    req.on('data', (chunk) => (stats.bytes += chunk.length));
    req.on('end', () => {
      stats.exports += 1;
      res.writeHead(200, { 'content-type': req.headers['content-type'] ?? 'application/x-protobuf', 'content-length': 0 });
      res.end();
    });
  });
}

// ── Entry ─────────────────────────────────────────────────────────────────────────────────────

const KINDS = {
  upstream,
  'http-proxy-3': httpProxy3,
  undici: undiciForwarder,
  'undici-dispatch': undiciDispatch,
  naive,
  'composed-floor': composedFloor,
  'fastify-json': fastifyJson,
  'otlp-sink': otlpSink,
};

async function main() {
  const kind = process.argv[2];
  if (!Object.hasOwn(KINDS, kind)) throw new Error(`usage: bench-servers.mjs ${Object.keys(KINDS).join('|')}`);
  const lines = createInterface({ input: process.stdin });
  const [first] = await Promise.race([
    new Promise((resolve) => lines.once('line', (line) => resolve([line]))),
    new Promise((resolve) => lines.once('close', () => resolve([undefined]))),
  ]);
  if (first === undefined) return process.exit(0);
  const server = await KINDS[kind](JSON.parse(first));
  const url = await listen(server);
  process.stdout.write(`${JSON.stringify({ url })}\n`);
  const stop = () => process.exit(0);
  // stdin closing means the bench process is gone: nobody is left to stop this child.
  lines.once('close', stop);
  process.once('SIGTERM', stop);
  process.once('SIGINT', stop);
}

main().catch((error) => {
  process.stderr.write(`bench-servers ${process.argv[2]}: ${error?.stack ?? error}\n`);
  process.exit(1);
});
