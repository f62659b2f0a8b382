/**
 * The floor of an evaluation on the authority: what it cannot avoid doing for one, each part
 * measured alone in the same run as the evaluate rows, as CPU per evaluation. It is to evaluate's
 * `authority µs/eval` what floor-bench.mjs's parts are to the enforced route's CPU per request.
 *
 *   HTTP               fastify (the authority's server) receives the evaluate request (the bench's
 *                      own headers and body, from the same client) and answers a real evaluate
 *                      answer as a fixed text, closed loop: the server's CPU per request
 *   Ed25519 sign       one permit-sized signing input signed in a loop, with the engine the
 *                      authority uses (dist/shared/permits/ed25519.js: libsodium where it loads)
 *   Redis round trip   one `SET NX PX` per evaluation (an evaluation's rate-limit check is one
 *                      round trip), as many in flight as the bench has clients (floor-bench.mjs)
 *   Postgres write     the evaluation's share of one statement per batch of BATCH evaluations:
 *                      their rows (the evaluation with its stored answer, the permit, two audit
 *                      events) serialized as the authority sends them, three JSON parameters,
 *                      two statements in flight as in group commit; the client's CPU per
 *                      evaluation. The statement only measures the parameters' length, so
 *                      Postgres's side is not part of it (the bare append is its baseline).
 *
 * Sign and Postgres each run in a child process of their own (this file, run as a script, with
 * the database URL and the answer in its environment) that reads its own CPU from /proc; the HTTP
 * server's CPU is read from /proc by the bench, as the authority's is. Left out on purpose:
 * authentication, the policy decision, the binding and the audit events' canonical JSON and
 * hashes, the answer's validation, metrics and logs, which are the authority's own work above the
 * floor.
 *
 * @example
 *   const clients = (url) => ({ senders: [...], close: async () => {} });
 *   const floor = await measureEvaluateFloor({ answer, clients, databaseUrl, redisUrl, concurrency: 32, seconds: 5, warmupMs: 11_000, signal });
 *   evaluateFloorLines(log, { floor, evaluateUs: 260 });
 */
import { generateKeyPairSync, randomBytes, randomUUID } from 'node:crypto';
import { fileURLToPath } from 'node:url';
import { fmt } from './bench-common.mjs';
import { closedLoop, measureScenario } from './evaluate-report.mjs';
import { cpuPerStep, inChild, measureRedisRoundTrip, permitSigningInput, productEd25519 } from './floor-bench.mjs';
import { startBenchServer } from './proxy-processes.mjs';

const SCRIPT = fileURLToPath(import.meta.url);

/** Evaluations per group-commit batch: about what the evaluate bench's 1-organization row holds with two in flight. */
const BATCH = 6;
const IN_FLIGHT = 2;

/** Ed25519 signatures of a permit-sized input: the one every allowed evaluation pays. */
async function signPart(seconds) {
  const ed25519 = await productEd25519();
  const { privateKey } = generateKeyPairSync('ed25519');
  const input = permitSigningInput();
  const step = () => {
    if (ed25519.sign(input, privateKey).length !== 64) throw new Error('no 64-byte signature');
  };
  return Object.assign(await cpuPerStep(step, seconds), { engine: ed25519.engine });
}

/** An `evaluation.decided` payload's details for `answer`, as text: the same in every row. */
function eventDetails(answer) {
  const { reason_codes, action_class, matched_rules, binding_hash, bound_facts, approvals } = answer.decisionObject;
  return JSON.stringify({
    action_type: 'demo.echo', actor_id: 'demo-agent', context: { environment: 'dev', target: { type: 'demo', id: 'order-42' } }, mode: answer.mode,
    reason_codes, action_class, matched_rules, risk_score: answer.risk_score, binding_hash, bound_facts, approvals, permit_id: answer.permit_id ?? null,
  });
}

/** One evaluation's rows in the shape and size evaluate/store.ts sends them, `answer` its stored answer. */
function evaluationRows(answer, details, orgId) {
  const id = randomUUID();
  const now = new Date().toISOString();
  const requestId = randomUUID();
  const evaluation = {
    id, org_id: orgId, request_id: requestId, request_fingerprint: randomBytes(32).toString('hex'), action_type: 'demo.echo', actor_id: 'demo-agent',
    decision: 'allow', mode: 'live', risk_score: 0.05, binding_hash: answer.decisionObject.binding_hash, policy_version: 1,
    response: answer, credential: 'api_key:bench', created_at: now,
  };
  const permit = {
    id: randomBytes(16).toString('base64url'), org_id: orgId, evaluation_id: id, request_id: requestId, action_type: 'demo.echo', actor_id: 'demo-agent',
    binding_hash: evaluation.binding_hash, bound_facts: { action_type: 'demo.echo', actor_id: 'demo-agent', environment: 'dev', target: { type: 'demo', id: 'order-42' } },
    kid: 'k'.repeat(22), issued_at: now, expires_at: now,
  };
  // An audit event travels as its payload's canonical JSON, split where the sequence goes.
  const event = (type) => ({
    evaluation_id: id, id: randomUUID(), org_id: orgId, type, decision: 'allow', actor_id: 'demo-agent', resource_type: 'evaluation', resource_id: id,
    request_id: requestId, text_before: `{"credential":"api_key:bench","details":${details},"id":"${randomUUID()}","org_id":"${orgId}","sequence":`,
    text_after: `,"type":"${type}"}`, occurred_at: now,
  });
  return { evaluation, permit, events: [event('evaluation.decided'), event('permit.issued')] };
}

/** The client's side of writing evaluations: BATCH per statement, IN_FLIGHT statements at once. */
async function postgresPart(seconds, databaseUrl, answerText) {
  const { default: pg } = await import('pg');
  const pool = new pg.Pool({ connectionString: databaseUrl, max: IN_FLIGHT });
  const answer = JSON.parse(answerText);
  const details = eventDetails(answer);
  const orgId = randomUUID();
  try {
    const step = async () => {
      const batch = Array.from({ length: BATCH }, () => evaluationRows(answer, details, orgId));
      const { rows } = await pool.query('SELECT octet_length($1::text) + octet_length($2::text) + octet_length($3::text) AS bytes', [
        JSON.stringify(batch.map((rows) => rows.evaluation)),
        JSON.stringify(batch.map((rows) => rows.permit)),
        JSON.stringify(batch.flatMap((rows) => rows.events)),
      ]);
      if (!(rows[0].bytes > 0)) throw new Error('the statement did not see the batch');
    };
    const statements = await cpuPerStep(step, seconds, IN_FLIGHT);
    return { ops: statements.ops * BATCH, cpuUs: statements.cpuUs / BATCH };
  } finally {
    await pool.end();
  }
}

/**
 * fastify answering `answer` to the evaluate bench's own clients (`clients(url)`: `{ senders,
 * close }`), closed loop, after `warmupMs` of the same load (the authority gets its process
 * warm-up too).
 */
async function httpPart({ answer, clients, seconds, warmupMs, signal }) {
  const server = await startBenchServer('fastify-json', { path: '/v1/evaluate', answer });
  const { senders, close } = clients(server.url);
  try {
    const loop = (window) => closedLoop('the floor: HTTP', senders, { window, signal });
    const row = await measureScenario('the floor: HTTP', loop, { authority: server, warmupMs, windowMs: seconds * 1000, signal });
    return { ops: row.requests, cpuUs: row.authorityUs, perSecond: row.perSecond, errors: row.errors };
  } finally {
    await close();
    await server.stop();
  }
}

/**
 * The four parts, one after the other. `answer` is the text of a real evaluate answer (an allow
 * with its permit), `clients(url)` the bench's closed-loop clients for a server at `url`,
 * `warmupMs` the HTTP server's discarded load before its measured window.
 */
export async function measureEvaluateFloor({ answer, clients, databaseUrl, redisUrl, concurrency, seconds, warmupMs, signal }) {
  const http = await httpPart({ answer, clients, seconds, warmupMs, signal });
  const sign = await inChild(SCRIPT, 'sign', [seconds]);
  const redis = await measureRedisRoundTrip({ redisUrl, seconds, connections: concurrency });
  const postgres = await inChild(SCRIPT, 'postgres', [seconds], { FLOOR_DATABASE_URL: databaseUrl, FLOOR_ANSWER: answer });
  return { http, sign, redis, postgres };
}

/** Prints the parts, their sum, and evaluate's CPU per evaluation against it. */
export function evaluateFloorLines(log, { floor, evaluateUs }) {
  const { http, sign, redis, postgres } = floor;
  const sum = http.cpuUs + sign.cpuUs + redis.cpuUs + postgres.cpuUs;
  const line = (label, us, note = '') => log(`  ${label.padEnd(56)} ${fmt(us, 0).padStart(6)} µs  ${note}`.trimEnd());
  log('');
  log("the floor of an evaluation on the authority (CPU per evaluation, each part measured alone in this run):");
  line('HTTP: fastify receives the request, sends a fixed answer', http.cpuUs, `(${http.ops} requests at ${fmt(http.perSecond, 0)}/s)`);
  line(`Ed25519 sign (${sign.engine})`, sign.cpuUs, `(${sign.ops} signatures)`);
  line('Redis round trip (SET NX PX, ioredis)', redis.cpuUs, `(${redis.ops} commands)`);
  line(`Postgres write: its rows, ${BATCH} evaluations a statement (pg)`, postgres.cpuUs, `(${postgres.ops} evaluations' rows)`);
  line('sum', sum);
  if (http.errors > 0) log(`  (the floor's HTTP server: ${http.errors} requests failed or were answered otherwise than expected)`);
  if (Number.isFinite(evaluateUs)) log(`  countersign evaluate, authority CPU per evaluation (1 org)  ${fmt(evaluateUs, 0).padStart(6)} µs = ${fmt(evaluateUs / sum, 2)}× the floor`);
}

if (process.argv[1] === SCRIPT) {
  const [part, seconds] = process.argv.slice(2);
  const { FLOOR_DATABASE_URL, FLOOR_ANSWER } = process.env;
  const result = part === 'sign' ? await signPart(Number(seconds)) : part === 'postgres' ? await postgresPart(Number(seconds), FLOOR_DATABASE_URL, FLOOR_ANSWER) : null;
  if (!result) throw new Error(`unknown evaluate floor part: ${part}`);
  process.stdout.write(JSON.stringify(result));
}
