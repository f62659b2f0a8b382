/**
 * Bad input, generated: random and hostile JSON (numbers past Infinity, lone surrogates, NUL, deep
 * nesting), random bytes, random content types and random query strings and cursors against every
 * endpoint: 10,000 bodies per POST or PUT endpoint and 2,000 query strings per GET endpoint, about
 * 310,000 requests in all, with `npm run test:fuzz` (BAD_INPUT_FULL=1); `npm test` sends a tenth
 * of each, so that the whole suite stays quick. The routes are dealt out to several shares, one
 * per test file (bad-input.test.ts and bad-input-2 … -4.test.ts), which tap runs in parallel.
 *
 * A share runs in a process of its own, started by bad-input.ts without tap's coverage and
 * async-hook tracking, which about doubled the CPU each request took; it prints a ShareReport as
 * JSON and the test file asserts on it.
 *
 * @example
 *   node dist/test/property/bad-input-requests.js 2 4   # share 2 of 4; prints the ShareReport
 */
import fc from 'fast-check';
import { fileURLToPath } from 'node:url';
import { SCOPES } from '../../shared/wire/scopes.js';
import { ErrorEnvelope } from '../../shared/wire/envelope.js';
import { verifyAuditBundle } from '../../authority/audit/verify-bundle.js';
import { createTestAuthority, GENEROUS_LIMITS } from '../helpers/authority.js';
import { appBackends } from '../helpers/backends.js';

/** The share of the full count that runs: all of it with BAD_INPUT_FULL=1, else a tenth. */
const SCALE = process.env.BAD_INPUT_FULL === '1' ? 1 : 0.1;
/** Generated bodies per POST or PUT endpoint, and generated query strings per GET endpoint. */
const BODY_RUNS = 10_000 * SCALE;
const QUERY_RUNS = 2_000 * SCALE;

/** How many test files share the routes: bad-input.test.ts and bad-input-2 … -4.test.ts. */
export const BAD_INPUT_SHARES = 4;

const CONTENT_TYPES = [undefined, 'application/json', 'application/json; charset=utf-8', 'text/plain', 'application/octet-stream', 'multipart/form-data; boundary=x', 'application/x-www-form-urlencoded'];

/**
 * JSON text JSON.stringify cannot write: numbers that overflow, lone surrogates and NUL escaped,
 * nesting past the depth limit (the bounded input), spliced into otherwise plausible bodies.
 */
const hostileJson = fc.oneof(
  fc.constantFrom('1e999', '-1e999', '"\\ud800"', '"x\\udfffy"', '"a\\u0000b"', '{"\\u0000":1}'),
  fc.integer({ min: 30, max: 3000 }).map((depth) => `${'{"n":'.repeat(depth)}1${'}'.repeat(depth)}`),
  fc.integer({ min: 30, max: 3000 }).map((depth) => `${'['.repeat(depth)}${']'.repeat(depth)}`),
);
const hostileBody = fc.oneof(
  hostileJson.map((value) => `{"action_type":"demo.echo","actor_id":"demo-agent","context":{"environment":"dev","x":${value}}}`),
  hostileJson.map((value) => `{"name":${value},"scopes":["audit:read"]}`),
  hostileJson.map((value) => `{"permit_id":"p","summary":${value},"details":${value}}`),
  hostileJson.map((value) => `{"action":"create","name":"w","url":"https://example.com/","event_types":[${value}]}`),
  hostileJson,
);

/** Query strings a client could send: known parameter names with hostile values, and noise. */
const queryValue = fc.oneof(
  fc.constantFrom('%00', '%ED%A0%80', '%F0%9F%98%80', '1e999', '-1', '0', '99999999999999999999', 'NaN', '', '%', '%zz', 'a%00b'),
  fc.string({ maxLength: 40 }).map((text) => encodeURIComponent(text)),
  fc.base64String({ maxLength: 60 }),
  fc.date({ min: new Date(-8.64e15), max: new Date(8.64e15), noInvalidDate: true }).map((at) =>
    Buffer.from(`${at.toISOString()}|${['00000000-0000-4000-8000-000000000000', 'AAAAAAAAAAAAAAAAAAAAAA', 'x'][at.getTime() % 3 === 0 ? 0 : 1]}`).toString('base64url'),
  ),
);
const queryName = fc.oneof(
  fc.constantFrom('cursor', 'limit', 'status', 'actor_id', 'action_type', 'type', 'types', 'from_sequence', 'to_sequence', 'subscription_id', 'before', 'after'),
  fc.string({ maxLength: 12 }).map((text) => encodeURIComponent(text)),
);
const queryString = fc.array(fc.tuple(queryName, queryValue), { maxLength: 4 }).map((pairs) => pairs.map(([name, value]) => `${name}=${value}`).join('&'));

const body = fc.oneof(
  hostileBody,
  fc.jsonValue().map((value) => JSON.stringify(value)),
  fc.record({ name: fc.jsonValue(), scopes: fc.array(fc.oneof(fc.constantFrom(...SCOPES), fc.string(), fc.jsonValue())), allowed_cidrs: fc.jsonValue(), allowed_actors: fc.oneof(fc.array(fc.string()), fc.jsonValue()), expires_at: fc.oneof(fc.string(), fc.date({ noInvalidDate: true }).map((d) => d.toISOString())) }, { requiredKeys: [] }).map((value) => JSON.stringify(value)),
  fc
    .record(
      {
        action_type: fc.oneof(fc.constantFrom('demo.echo', 'payments.wire', 'agent.tool.invoke'), fc.string()),
        actor_id: fc.oneof(fc.constantFrom('demo-agent', 'finance-bot'), fc.string()),
        context: fc.oneof(fc.object(), fc.record({ environment: fc.jsonValue(), target: fc.jsonValue(), amount_usd: fc.oneof(fc.double(), fc.jsonValue()), approvals: fc.jsonValue() }, { requiredKeys: [] })),
        permit_token: fc.string(),
        request_id: fc.string(),
        source: fc.string(),
        document: fc.jsonValue(),
        permit_id: fc.string(),
        status: fc.string(),
      },
      { requiredKeys: [] },
    )
    .map((value) => JSON.stringify(value)),
  fc
    .record(
      {
        agentId: fc.oneof(fc.constantFrom('deploy-bot'), fc.string(), fc.jsonValue()),
        escalationReason: fc.oneof(fc.constantFrom('schema change'), fc.string(), fc.jsonValue()),
        proposedAction: fc.jsonValue(),
        riskScore: fc.oneof(fc.double(), fc.jsonValue()),
        quorumConfig: fc.oneof(
          fc.jsonValue(),
          fc.record(
            {
              quorumRequired: fc.oneof(fc.constantFrom('single_approver', 'simple_majority', 'two_thirds', 'unanimous'), fc.string()),
              approverPoolSize: fc.oneof(fc.integer(), fc.double(), fc.jsonValue()),
              minApprovers: fc.oneof(fc.integer(), fc.jsonValue()),
              fallbackDecision: fc.oneof(fc.constantFrom('approve', 'reject'), fc.string()),
            },
            { requiredKeys: [] },
          ),
        ),
        timeoutMs: fc.oneof(fc.integer(), fc.double(), fc.jsonValue()),
        escalationChain: fc.oneof(fc.jsonValue(), fc.array(fc.record({ quorumRequired: fc.string(), approverPoolSize: fc.jsonValue(), timeoutMs: fc.jsonValue() }, { requiredKeys: [] }))),
        metadata: fc.oneof(fc.object(), fc.jsonValue()),
        decision: fc.oneof(fc.constantFrom('approve', 'reject'), fc.string(), fc.jsonValue()),
        note: fc.oneof(fc.string(), fc.jsonValue()),
      },
      { requiredKeys: [] },
    )
    .map((value) => JSON.stringify(value)),
  fc
    .record(
      {
        action: fc.oneof(fc.constantFrom('create', 'list', 'update', 'delete', 'rotate_secret', 'test', 'list_deliveries', 'replay'), fc.string(), fc.jsonValue()),
        name: fc.oneof(fc.string({ unit: 'binary' }), fc.jsonValue()),
        url: fc.oneof(fc.webUrl(), fc.constantFrom('http://127.0.0.1/', 'ftp://x/', 'http://[::1]/'), fc.string({ unit: 'binary' }), fc.jsonValue()),
        event_types: fc.oneof(fc.constant(null), fc.array(fc.oneof(fc.constantFrom('policy.updated', 'webhook.test'), fc.string())), fc.jsonValue()),
        max_attempts: fc.oneof(fc.integer(), fc.double(), fc.jsonValue()),
        timeout_seconds: fc.oneof(fc.integer(), fc.double(), fc.jsonValue()),
        is_active: fc.oneof(fc.boolean(), fc.jsonValue()),
        id: fc.oneof(fc.uuid(), fc.string(), fc.jsonValue()),
        delivery_id: fc.oneof(fc.uuid(), fc.string(), fc.jsonValue()),
        subscription_id: fc.oneof(fc.uuid(), fc.string(), fc.jsonValue()),
        patch: fc.oneof(fc.record({ name: fc.string({ unit: 'binary' }), url: fc.oneof(fc.webUrl(), fc.string()), event_types: fc.jsonValue(), is_active: fc.jsonValue() }, { requiredKeys: [] }), fc.jsonValue()),
        cursor: fc.oneof(fc.string({ unit: 'binary' }), fc.base64String()),
        limit: fc.oneof(fc.integer(), fc.jsonValue()),
        status: fc.oneof(fc.constantFrom('failed', 'dead_lettered'), fc.string()),
      },
      { requiredKeys: [] },
    )
    .map((value) => JSON.stringify(value)),
  // AuthZEN access evaluations: entities, defaults and options, each well-formed or not.
  fc
    .record(
      {
        subject: fc.oneof(fc.record({ type: fc.oneof(fc.constant('service'), fc.string()), id: fc.oneof(fc.constantFrom('finance-bot', 'demo-agent'), fc.string()), properties: fc.jsonValue() }, { requiredKeys: [] }), fc.jsonValue()),
        action: fc.oneof(fc.record({ name: fc.oneof(fc.constantFrom('payments.wire', 'demo.echo'), fc.string()), properties: fc.jsonValue() }, { requiredKeys: [] }), fc.jsonValue()),
        resource: fc.oneof(fc.record({ type: fc.oneof(fc.constant('payee'), fc.string()), id: fc.string(), properties: fc.jsonValue() }, { requiredKeys: [] }), fc.jsonValue()),
        context: fc.oneof(fc.object(), fc.record({ environment: fc.jsonValue(), amount_usd: fc.oneof(fc.double(), fc.jsonValue()), approvals: fc.jsonValue(), target: fc.jsonValue(), subject: fc.jsonValue() }, { requiredKeys: [] })),
        evaluations: fc.oneof(fc.array(fc.record({ subject: fc.jsonValue(), action: fc.record({ name: fc.string() }), resource: fc.jsonValue(), context: fc.jsonValue() }, { requiredKeys: [] }), { maxLength: 24 }), fc.jsonValue()),
        options: fc.oneof(fc.record({ evaluations_semantic: fc.oneof(fc.constantFrom('execute_all', 'deny_on_first_deny', 'permit_on_first_permit'), fc.string()) }, { requiredKeys: [] }), fc.jsonValue()),
      },
      { requiredKeys: [] },
    )
    .map((value) => JSON.stringify(value)),
  fc.uint8Array({ maxLength: 4096 }).map((bytes) => Buffer.from(bytes)),
  fc.string({ maxLength: 512 }),
);

const runsFor = (method: string): number => (method === 'GET' ? QUERY_RUNS : BODY_RUNS);

/**
 * The routes of share `shard` (1-based) of `shards`: the list, in its fixed order, dealt out by
 * runs (largest first, each to the share with the fewest so far), so that the shares take about
 * as long and together cover every route exactly once.
 */
export function shareOf<R extends readonly [string, string]>(routes: readonly R[], shard: number, shards: number): R[] {
  const totals = new Array<number>(shards).fill(0);
  const owner = new Array<number>(routes.length);
  const byRuns = routes.map((route, index) => ({ index, runs: runsFor(route[0]) })).sort((a, b) => b.runs - a.runs || a.index - b.index);
  for (const { index, runs } of byRuns) {
    const least = totals.indexOf(Math.min(...totals));
    owner[index] = least;
    totals[least] = (totals[least] as number) + runs;
  }
  return routes.filter((_, index) => owner[index] === shard - 1);
}

/** What one route got: how many requests were answered, with which statuses, and the first failure. */
export interface RouteReport {
  method: string;
  url: string;
  runs: number;
  answered: number;
  statuses: Record<string, number>;
  /** fast-check's report of the first request that answered 5xx or a body off the envelope. */
  failure: string | null;
}

/** A share's outcome, printed as JSON by the share's process. */
export interface ShareReport {
  routes: RouteReport[];
  /** The export of the organization after the requests, and its offline verification. */
  exportStatus: number;
  exportedEvents: number;
  exportProblems: unknown[];
  /** Answers the OpenAPI document does not describe (test/helpers/openapi-responses.ts). */
  openApiProblems: string[];
}

/** Sends share `shard` of `shards` of the generated requests to a fresh authority. */
export async function runBadInputShare(shard: number, shards: number): Promise<ShareReport> {
  const opened = await appBackends()[0]!.open();
  // Logging at warn: two log lines per request would be most of the work of these requests.
  const authority = await createTestAuthority(opened, { logLevel: 'warn', config: GENEROUS_LIMITS });
  try {
    const json = { ...authority.bearer(authority.acmeAdmin), 'content-type': 'application/json' };
    const victim = await authority.app.inject({ method: 'POST', url: '/v1/api-keys', headers: json, payload: { name: 'victim', scopes: ['audit:read'] } });
    const decision = await authority.app.inject({
      method: 'POST',
      url: '/v1/evaluate',
      headers: json,
      payload: { action_type: 'demo.echo', actor_id: 'demo-agent', context: { environment: 'dev', target: { type: 'demo', id: 'p' } } },
    });
    const permitId = decision.json().permit_id as string;
    // Opened by another key, so the admin key below may vote; a pool this large stays open.
    const escalation = await authority.app.inject({
      method: 'POST',
      url: '/v1/escalations',
      headers: { ...authority.bearer(await authority.key(['evaluate:write'])), 'content-type': 'application/json' },
      payload: { agentId: 'property-agent', escalationReason: 'bad input', quorumConfig: { quorumRequired: 'unanimous', approverPoolSize: 1000 } },
    });
    const escalationId = escalation.json().id as string;
    const held = await authority.app.inject({
      method: 'POST',
      url: '/v1/evaluate',
      headers: json,
      payload: { action_type: 'payments.wire', actor_id: 'finance-bot', context: { environment: 'production', amount_usd: 50000, account_code: 'OPS-001' } },
    });
    const approvalId = held.json().approval_request_id as string;
    // Every route the app serves (the authentication matrix checks that list is complete), plus
    // unknown paths and methods. The exports come first: an accepted export signs the whole chain,
    // so later in the run each would cost in proportion to everything accepted before it.
    const everyRoute = [
      ['POST', '/v1/audit/exports'],
      ['POST', '/v1-audit/exports'],
      ['POST', '/v1/api-keys'],
      ['POST', `/v1/api-keys/${victim.json().api_key.id}/revoke`],
      ['POST', '/v1/api-keys/not-an-id/revoke'],
      ['GET', '/v1/api-keys'],
      ['GET', '/v1/session'],
      ['GET', '/v1/api-key-self'],
      ['GET', '/v1-api-key-self'],
      ['GET', '/openapi.json'],
      ['GET', '/healthz'],
      ['GET', '/readyz'],
      ['POST', '/v1/evaluate'],
      ['POST', '/v1-evaluate'],
      ['POST', '/functions/v1/v1-evaluate'],
      ['POST', '/access/v1/evaluation'],
      ['POST', '/access/v1/evaluations'],
      ['GET', '/.well-known/authzen-configuration'],
      ['POST', '/v1/verify-permit'],
      ['POST', '/v1-verify-permit'],
      ['POST', '/functions/v1/v1-verify-permit'],
      ['GET', '/v1/permit-keys'],
      ['GET', '/v1/permits'],
      ['GET', `/v1/permits/${permitId}`],
      ['POST', `/v1/permits/${permitId}/revoke`],
      ['GET', `/v1/permits/${permitId}/proof`],
      ['POST', '/v1/effects'],
      ['GET', '/v1/policies'],
      ['PUT', '/v1/policies'],
      ['POST', '/v1/policies/validate'],
      ['GET', '/v1/audit/events'],
      ['GET', '/v1-audit/events'],
      ['GET', '/v1/audit/keys'],
      ['GET', '/v1/approvals'],
      ['GET', '/v1/approvals?status=bogus&cursor=%00'],
      ['GET', `/v1/approvals/${approvalId}`],
      ['GET', '/v1/approvals/not-an-id'],
      ['POST', `/v1/approvals/${approvalId}/resolve`],
      ['POST', '/v1/escalations'],
      ['GET', '/v1/escalations'],
      ['GET', '/v1/escalations?status=bogus&limit=-1'],
      ['GET', `/v1/escalations/${escalationId}`],
      ['GET', '/v1/escalations/not-an-id'],
      ['POST', `/v1/escalations/${escalationId}/respond`],
      ['POST', '/v1/escalations/00000000-0000-4000-8000-000000000000/respond'],
      ['POST', '/v1/webhooks'],
      ['POST', '/v1-webhooks'],
      ['POST', '/functions/v1/v1-webhooks'],
      ['POST', '/v1/evaluate-nothing-here'],
      ['PUT', '/v1/api-keys'],
    ] as const;

    const routes: RouteReport[] = [];
    for (const [method, url] of shareOf(everyRoute, shard, shards)) {
      const route: RouteReport = { method, url, runs: runsFor(method), answered: 0, statuses: {}, failure: null };
      routes.push(route);
      const check = async (request: { url: string; payload?: string | Buffer; contentType?: string | undefined }) => {
        route.answered += 1;
        const response = await authority.app.inject({
          method,
          url: request.url,
          headers: { ...authority.bearer(authority.acmeAdmin), ...(request.contentType ? { 'content-type': request.contentType } : {}) },
          ...(request.payload !== undefined ? { payload: request.payload } : {}),
        });
        route.statuses[response.statusCode] = (route.statuses[response.statusCode] ?? 0) + 1;
        if (response.statusCode >= 500) throw new Error(`${method} ${request.url} answered ${response.statusCode}: ${response.body}`);
        if (response.statusCode >= 400) ErrorEnvelope.parse(response.json());
      };
      const property =
        method === 'GET'
          ? fc.asyncProperty(queryString, async (query) => check({ url: `${url}${url.includes('?') ? '&' : '?'}${query}` }))
          : fc.asyncProperty(body, fc.constantFrom(...CONTENT_TYPES), async (payload, contentType) => check({ url, payload, contentType }));
      const details = await fc.check(property as fc.IAsyncProperty<unknown[]>, { numRuns: route.runs });
      if (details.failed) route.failure = (await fc.asyncDefaultReportMessage(details)) ?? `failed after ${details.numRuns} runs`;
    }

    // Whatever was accepted is on the record in a form that exports and verifies offline.
    const exported = await authority.app.inject({ method: 'POST', url: '/v1/audit/exports', headers: authority.bearer(authority.acmeAdmin) });
    const pem = (await authority.app.inject({ method: 'GET', url: '/v1/audit/keys', headers: authority.bearer(authority.acmeAdmin) })).json().keys[0].public_key_pem as string;
    const bundle = exported.json();
    return {
      routes,
      exportStatus: exported.statusCode,
      exportedEvents: bundle.event_count as number,
      exportProblems: verifyAuditBundle(bundle, pem).problems,
      openApiProblems: authority.openApiProblems,
    };
  } finally {
    await authority.close();
    await opened.cleanup();
  }
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const [shard, shards] = process.argv.slice(2).map(Number);
  const report = await runBadInputShare(shard as number, shards as number);
  process.stdout.write(`${JSON.stringify(report)}\n`);
}
