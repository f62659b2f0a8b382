/**
 * What the proxy benchmark needs before it measures (its database and the authority's
 * configuration come from bench-common.mjs): the proxy's configuration file, the organization's
 * policy and API keys (through the authority's HTTP API with the bootstrap key, so the bench
 * depends on no internal module), and fresh permits minted in bulk with `POST /v1/evaluate`.
 *
 * @example
 *   const org = await setUpOrganization(authority.url, bootstrapKey, join(dir, 'proxy.key'), join(dir, 'mcp-inline.key'));
 *   const requests = await mintPermitRequests(authority.url, bootstrapKey, 'enforce', 20_000, signal);
 *   const calls = await mintRequests(authority.url, bootstrapKey, 1_000, signal, (i) => ({ evaluation, request: (token) => … }));
 */
import { readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { Redis } from 'ioredis';
import { Pool, request } from 'undici';
import { withAdminClient } from './bench-common.mjs';

/** Concurrent evaluations while minting: enough for the authority's group commit to fill up. */
const MINT_CONCURRENCY = 64;
const REQUEST_TIMEOUT_MS = 30_000;

export const PERMIT_HEADER = 'X-Service-Permit';
export const ACTOR = 'demo-agent';
/** The request every pass-through row sends: a read on a path no route matches (`unmatched: pass`). */
export const PASS_REQUEST = { method: 'GET', path: '/pass/item?page=1', headers: { accept: 'application/json' } };

/**
 * Permit lifetime is set per action class in the policy (`permit.lifetime_seconds`, at most 300),
 * not in authority.yaml, whose `permits` holds only issuer and audience. The bench asks for the
 * maximum and mints each batch just before the runs that spend it.
 */
export const PERMIT_LIFETIME_SECONDS = 300;

const isLoopback = (url) => ['127.0.0.1', 'localhost', '[::1]'].includes(new URL(url).hostname);

/**
 * The process ids of Redis and of the Postgres server (its postmaster: the backends are its
 * children) when they run on this machine, so the bench can say how much CPU they used; an empty
 * list when they are elsewhere or cannot be found (only the figure is then missing). Without
 * `redisUrl`, Postgres's only; without `adminUrl`, Redis's only.
 */
export async function localStorePids(redisUrl, adminUrl) {
  const pids = [];
  if (redisUrl && isLoopback(redisUrl)) {
    const redis = new Redis(redisUrl, { lazyConnect: true, maxRetriesPerRequest: 0 });
    try {
      await redis.connect();
      const pid = /^process_id:(\d+)/m.exec(await redis.info('server'))?.[1];
      if (pid) pids.push(Number(pid));
    } catch {
      // no figure for Redis
    } finally {
      redis.disconnect();
    }
  }
  if (adminUrl && isLoopback(adminUrl)) {
    try {
      const [{ data_directory: dir }] = (await withAdminClient(adminUrl, (client) => client.query('SHOW data_directory'))).rows;
      const pid = Number((await readFile(join(dir, 'postmaster.pid'), 'utf8')).split('\n', 1)[0]);
      if (pid > 0) pids.push(pid);
    } catch {
      // no figure for Postgres (its data directory may not be readable by this user)
    }
  }
  return pids;
}

// ── Configuration ─────────────────────────────────────────────────────────────────────────────

/** The example policy's demo class, with permits that live as long as a policy allows. */
const POLICY = `# Written by test/bench/proxy-bench.mjs.
version: 1
name: bench-proxy
defaults:
  decision: deny
  permit:
    required: true
    lifetime_seconds: ${PERMIT_LIFETIME_SECONDS}
action_classes:
  - id: demo
    match:
      action_type: demo.*
    actors: [${ACTOR}]
    default: allow
  - id: agent.tool
    match:
      action_type: agent.tool.invoke
    actors: [${ACTOR}]
    bind: [arguments_digest]
    default: allow
`;

/**
 * The MCP route of the proxy bench's MCP rows (mcp-bench.mjs): the upstream's demo MCP server at
 * `/mcp`, its tools decided by permit (targets `bench/<tool>`, the arguments' digest bound); a
 * call without a permit is decided inline, for the agent its `x-agent-id` header names, with the
 * key in `inlineKeyFile`.
 */
const mcpRoute = (inlineKeyFile) => `  - name: mcp
    match: { path: /mcp }
    mcp:
      server: bench
      inline:
        api_key_file: ${inlineKeyFile}
        actor: { header: x-agent-id }
      tools:
        - name: "*"
`;

/** The route of `bodyRoute`: an HTTP route bound to its body, as an MCP tool call is to its arguments. */
const BODY_ROUTE = `  - name: order
    match: { method: POST, path: /order/:id }
    action_type: demo.order
    facts:
      actor_id: { permit: true }
      target:
        type: { const: order }
        id: { path: id }
      amount_usd: { body: /amount_usd }
      currency: { body: /currency }
`;

/** A request of the `order` route (BODY_ROUTE): its body, and the facts a permit for it binds. */
export function bodyRouteRequest(id) {
  const body = { amount_usd: 40, currency: 'USD' };
  return {
    facts: { action_type: 'demo.order', actor_id: ACTOR, target: { type: 'order', id }, ...body },
    request: (token) => ({ method: 'POST', path: `/order/${id}`, headers: { [PERMIT_HEADER]: token, 'content-type': 'application/json' }, body: JSON.stringify(body) }),
  };
}

/**
 * The proxy in front of the upstream: everything but `POST /echo/:id` passes through; that route
 * is enforced with facts from the path, a header and constants (config/proxy.yaml's route), so
 * no body is read. With `mcpInlineKeyFile`, also the MCP route at `/mcp` (left out otherwise, so
 * that builds from before MCP routes take the configuration). With `bodyRoute`, also `POST
 * /order/:id` (BODY_ROUTE_REQUEST), whose facts come from a JSON body and whose actor from the
 * permit, as an MCP tool call's do. Log level and Redis come from the environment the bench gives
 * the child.
 */
export function proxyYaml({ upstream, authority, keyFile, organization, mcpInlineKeyFile, bodyRoute = false }) {
  return ({ listen, adminListen }) => `# Written by test/bench/proxy-bench.mjs.
listen: ${listen}
admin_listen: ${adminListen}
upstream: ${upstream}
authority:
  url: ${authority}
  api_key_file: ${keyFile}
organization: ${organization}
mode: enforce
permit_header: ${PERMIT_HEADER}
unmatched: pass
routes:
  - name: echo
    match: { method: POST, path: /echo/:id }
    action_type: demo.echo
    facts:
      actor_id: { header: X-Actor-Id }
      environment: { const: dev }
      target:
        type: { const: demo }
        id: { path: id }
${mcpInlineKeyFile ? mcpRoute(mcpInlineKeyFile) : ''}${bodyRoute ? BODY_ROUTE : ''}`;
}

// ── The authority's API ───────────────────────────────────────────────────────────────────────

async function api(base, key, method, path, body) {
  const response = await request(`${base}${path}`, {
    method,
    headers: { authorization: `Bearer ${key}`, ...(body === undefined ? {} : { 'content-type': 'application/json' }) },
    body: body === undefined ? undefined : JSON.stringify(body),
    headersTimeout: REQUEST_TIMEOUT_MS,
    bodyTimeout: REQUEST_TIMEOUT_MS,
  });
  const text = await response.body.text();
  if (response.statusCode >= 300) throw new Error(`${method} ${path} answered ${response.statusCode}: ${text.slice(0, 300)}`);
  return JSON.parse(text);
}

/**
 * The bootstrap organization with the bench policy, the proxy's own key (scope verify:execute) in
 * `keyFile` and the MCP route's inline key (evaluate:write, for the bench's agent only) in
 * `mcpInlineKeyFile` (both 0600), as an operator would set a gate up. The naive baseline uses the
 * proxy's key to fetch the JWKS.
 */
export async function setUpOrganization(authority, bootstrapKey, keyFile, mcpInlineKeyFile) {
  const self = await api(authority, bootstrapKey, 'GET', '/v1-api-key-self');
  await api(authority, bootstrapKey, 'PUT', '/v1/policies', { source: POLICY, format: 'yaml' });
  const created = await api(authority, bootstrapKey, 'POST', '/v1/api-keys', { name: 'bench proxy', scopes: ['verify:execute'] });
  await writeFile(keyFile, `${created.secret}\n`, { mode: 0o600 });
  const inline = await api(authority, bootstrapKey, 'POST', '/v1/api-keys', { name: 'bench MCP gate', scopes: ['evaluate:write'], allowed_actors: [ACTOR] });
  await writeFile(mcpInlineKeyFile, `${inline.secret}\n`, { mode: 0o600 });
  return { id: self.organization_id, proxyKey: created.secret };
}

/**
 * `count` gated requests, each with a fresh permit of its own for `POST /echo/<tag>-<i>` (a
 * distinct target id each), minted concurrently.
 */
export function mintPermitRequests(authority, key, tag, count, signal) {
  return mintRequests(authority, key, count, signal, (i) => {
    const id = `${tag}-${i}`;
    return {
      evaluation: { action_type: 'demo.echo', actor_id: ACTOR, context: { environment: 'dev', target: { type: 'demo', id } } },
      request: (token) => ({ method: 'POST', path: `/echo/${id}`, headers: { [PERMIT_HEADER.toLowerCase()]: token, 'x-actor-id': ACTOR } }),
    };
  });
}

/**
 * `count` requests, each with a fresh permit: `planOf(i)` gives request i's evaluation and how
 * its permit goes into the request. Minted concurrently; any answer but an allow with a permit
 * stops the bench: it could not measure what it claims to.
 */
export async function mintRequests(authority, key, count, signal, planOf) {
  const pool = new Pool(authority, { connections: MINT_CONCURRENCY, pipelining: 1 });
  const headers = { authorization: `Bearer ${key}`, 'content-type': 'application/json' };
  const requests = new Array(count);
  let next = 0;
  const worker = async () => {
    while (next < count) {
      if (signal.aborted) throw new Error('interrupted while minting permits');
      const i = next++;
      const plan = planOf(i);
      const response = await pool.request({
        method: 'POST',
        path: '/v1/evaluate',
        headers,
        body: JSON.stringify(plan.evaluation),
        headersTimeout: REQUEST_TIMEOUT_MS,
        bodyTimeout: REQUEST_TIMEOUT_MS,
      });
      const text = await response.body.text();
      const answer = response.statusCode === 200 ? JSON.parse(text) : null;
      if (answer?.decision !== 'allow' || typeof answer.permit_token !== 'string') {
        throw new Error(`minting a permit: POST /v1/evaluate answered ${response.statusCode}: ${text.slice(0, 300)}`);
      }
      requests[i] = plan.request(answer.permit_token);
    }
  };
  try {
    await Promise.all(Array.from({ length: MINT_CONCURRENCY }, worker));
  } finally {
    await pool.close();
  }
  return requests;
}
