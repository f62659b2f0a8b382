/**
 * The evaluate benchmark on real Postgres and Redis: end-to-end `POST /v1/evaluate` throughput,
 * latency and the CPU per evaluation of the authority and of Postgres, printed beside the bare
 * hash-chained insert rate (`appendAuditEvent`, one event per transaction) measured against the
 * same Postgres in the same run, so throughput is read as a ratio rather than as an absolute
 * number from an unknown machine.
 *
 * The authority runs as a child process (`dist/bin/countersign.js authority`), so the load
 * generator does not share its event loop; its CPU is its own accounting in /proc. The bench
 * process sets up organizations and keys through the compiled modules in dist/ and drives load
 * over loopback with undici.
 *
 * Scenarios, each a warm-up (discarded) then a measured window; every loop stops at its deadline:
 *   bare append, 1 org / 16 orgs   appendAuditEvent in its own transaction, closed loop
 *   evaluate, 1 org, first W s     the process warm-up: the closed loop below on the fresh authority,
 *                                  measured in full and shown, judged by no target
 *   evaluate, 1 org                closed loop of C clients, one organization
 *   evaluate, 16 orgs              closed loop, C/16 clients per organization
 *   evaluate, open loop R/s        one organization, sends on a fixed schedule; latency is measured
 *                                  from the scheduled send time, so a stall is not hidden by the
 *                                  generator waiting for it (coordinated omission)
 *
 * Settings come from run.mjs: seconds, warmupSeconds, processWarmupSeconds (W), concurrency (C), rate (R),
 * cpuProfileDir.
 * The loops, the CPU accounting, the report and the targets are in evaluate-report.mjs;
 * evaluate-compare.mjs runs the 1-org scenarios against several builds with the helpers exported here.
 *
 * It measures; it is not a test: missed targets print MISS and still resolve `{ ok: true }`.
 * `ok` is false only when a request failed or the stored records do not match the answers.
 *
 * @example
 *   const { ok } = await runEvaluateBench({ databaseUrl, redisUrl, seconds: 5, warmupSeconds: 1, processWarmupSeconds: 10, concurrency: 32, rate: 500, log: console.log, signal });
 */
import { randomBytes, randomUUID } from 'node:crypto';
import { existsSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { availableParallelism, tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Pool } from 'undici';
import { authorityYaml, createBenchDatabase, describeExit } from './bench-common.mjs';
import { evaluateFloorLines, measureEvaluateFloor } from './evaluate-floor.mjs';
import { checkStored, closedLoop, measureScenario, openLoop, report } from './evaluate-report.mjs';
import { startAuthority } from './proxy-processes.mjs';
import { localStorePids } from './proxy-setup.mjs';

const root = resolve(dirname(fileURLToPath(import.meta.url)), '..', '..');
const DIST = join(root, 'dist');

const ORGS = 16;
const REQUEST_TIMEOUT_MS = 10_000;
/**
 * The compiled product modules of a build (this checkout's dist/ unless given); imported lazily
 * so a missing build is one clear error.
 */
export async function loadProduct(dist = DIST) {
  if (!existsSync(join(dist, 'bin', 'countersign.js'))) throw new Error(`${dist} is missing: run \`npm run build\` (npm run bench does it first)`);
  const load = (path) => import(join(dist, path));
  const [pgStore, orgs, keys, versions, boot, chain, time, scopes] = await Promise.all([
    load('authority/store/pg.js'),
    load('authority/orgs/organizations.js'),
    load('authority/api-keys/keys.js'),
    load('authority/policy/versions.js'),
    load('authority/orgs/bootstrap.js'),
    load('authority/audit/chain.js'),
    load('authority/time.js'),
    load('shared/wire/scopes.js'),
  ]);
  return {
    PgDb: pgStore.PgDb,
    createOrganization: orgs.createOrganization,
    createApiKey: keys.createApiKey,
    PolicyVersions: versions.PolicyVersions,
    readBootstrapPolicy: boot.readBootstrapPolicy,
    appendAuditEvent: chain.appendAuditEvent,
    systemClock: time.systemClock,
    SCOPES: scopes.SCOPES,
  };
}

async function serverFacts(db) {
  const [row] = await db.query(
    `SELECT current_setting('server_version') AS version, current_setting('fsync') AS fsync,
            current_setting('synchronous_commit') AS synchronous_commit`,
  );
  return row;
}

/**
 * The secrets an authority runs with. One that restarts on the same database needs the same
 * ones: the secret key decrypts the signing keys it stored on its first start.
 */
export function authoritySecrets() {
  // The bootstrap key is given rather than generated, so the first start writes no key file.
  return { secretKey: randomBytes(32).toString('base64'), bootstrapKey: `ask_live_${randomBytes(24).toString('hex')}` };
}

/**
 * The authority the evaluate scenarios load (proxy-processes.mjs's startAuthority, with this
 * bench's configuration). `cli` and `nodeOptions` pick another build and its Node flags
 * (evaluate-compare.mjs). Stop it with `authority.stop()`.
 */
export function startEvaluateAuthority({ databaseUrl, redisUrl, dir, cpuProfileDir, cli, nodeOptions, secrets = authoritySecrets(), env }) {
  return startAuthority({ databaseUrl, redisUrl, dir, ...secrets, configYaml: authorityYaml('test/bench/evaluate-bench.mjs'), cli, nodeOptions, cpuProfileDir, env });
}

/** Aborts when the child exits, so the loops stop at once instead of collecting connection errors. */
export function abortOnExit(authority) {
  const controller = new AbortController();
  authority.exited.then(() => controller.abort());
  return controller.signal;
}

// ── Setup ─────────────────────────────────────────────────────────────────────────────────────

/** `count` organizations with an admin key and the example policy each, in one transaction. */
export async function createEvaluateOrgs(product, db, count) {
  const { source, format } = await product.readBootstrapPolicy(undefined);
  const versions = new product.PolicyVersions(db, product.systemClock);
  return db.transaction(async (tx) => {
    const orgs = [];
    for (let i = 1; i <= count; i += 1) {
      const org = await product.createOrganization(tx, { name: `bench-evaluate-${i}`, plan: 'enterprise' }, product.systemClock);
      const { secret } = await product.createApiKey(tx, { org, name: 'bench admin', scopes: product.SCOPES, createdBy: 'bench' }, product.systemClock);
      await versions.put(tx, { orgId: org.id, source, format, createdBy: 'bench', requestId: null });
      orgs.push({ id: org.id, name: org.name, key: secret });
    }
    return orgs;
  });
}

/** Organizations for the bare-append baseline only, so the evaluate chains hold only evaluate events. */
async function createAppendOrgs(product, db, count) {
  return db.transaction(async (tx) => {
    const orgs = [];
    for (let i = 1; i <= count; i += 1) {
      orgs.push(await product.createOrganization(tx, { name: `bench-append-${i}`, plan: 'enterprise' }, product.systemClock));
    }
    return orgs.map((org) => ({ id: org.id, name: org.name }));
  });
}

// ── Senders ───────────────────────────────────────────────────────────────────────────────────

function evaluateBody(targetId) {
  return JSON.stringify({
    action_type: 'demo.echo',
    actor_id: 'demo-agent',
    context: { environment: 'dev', target: { type: 'demo', id: targetId } },
  });
}

/** An error grouped by `kind` (status and code), with the first answer of that kind as its example. */
const failure = (kind, example) => ({ kind, example: example.slice(0, 300) });

function httpFailure(status, text) {
  let code = '';
  try {
    code = JSON.parse(text).error ?? '';
  } catch {
    // not an envelope: the example shows what it was
  }
  return failure(`HTTP ${status} ${code}`.trim(), text);
}

/**
 * Keep-alive and no pipelining, with a connection for every closed-loop client (and room for the
 * open loop's bursts), so a request waits only for its own answer.
 */
export function evaluatePool(api, concurrency) {
  return new Pool(api, { connections: Math.max(concurrency, 64), pipelining: 1, keepAliveTimeout: 30_000 });
}

const evaluateHeaders = (key) => ({ authorization: `Bearer ${key}`, 'content-type': 'application/json' });

/** Resolves null for an allow with a permit, else a failure saying what came back. */
export function evaluateSender(pool, key, tag) {
  const headers = evaluateHeaders(key);
  return async (n) => {
    try {
      const response = await pool.request({
        method: 'POST',
        path: '/v1/evaluate',
        headers,
        body: evaluateBody(`${tag}-${n}`),
        headersTimeout: REQUEST_TIMEOUT_MS,
        bodyTimeout: REQUEST_TIMEOUT_MS,
      });
      const text = await response.body.text();
      if (response.statusCode !== 200) return httpFailure(response.statusCode, text);
      const answer = JSON.parse(text);
      if (answer.decision !== 'allow' || typeof answer.permit_token !== 'string') return failure(`200 ${answer.decision} without a permit`, text);
      return null;
    } catch (error) {
      return failure(`request failed ${error.code ?? error.name}`, error.message);
    }
  };
}

/** The text of one real evaluate answer (an allow with its permit): what the floor's HTTP server answers. */
async function sampleAnswer(pool, key) {
  const response = await pool.request({ method: 'POST', path: '/v1/evaluate', headers: evaluateHeaders(key), body: evaluateBody('floor-sample') });
  const text = await response.body.text();
  if (response.statusCode !== 200) throw new Error(`the sample evaluation answered ${response.statusCode}: ${text.slice(0, 300)}`);
  return text;
}

/** An event shaped like evaluate's `evaluation.decided`, so the baseline hashes and stores as much. */
function appendEvent(orgId, targetId, now) {
  return {
    orgId,
    type: 'evaluation.decided',
    actorId: 'demo-agent',
    decision: 'allow',
    resourceType: 'evaluation',
    resourceId: randomUUID(),
    requestId: randomUUID(),
    credential: 'api_key:bench',
    occurredAt: now,
    details: {
      action_type: 'demo.echo',
      actor_id: 'demo-agent',
      context: { environment: 'dev', target: { type: 'demo', id: targetId } },
      mode: 'live',
      reason_codes: ['DEFAULT_ALLOW'],
      action_class: 'demo',
      matched_rules: [],
      risk_score: 0.05,
      binding_hash: randomBytes(32).toString('hex'),
      bound_facts: ['action_type', 'actor_id', 'environment', 'target'],
      approvals: [],
      permit_id: null,
    },
  };
}

function appendSender(product, db, orgId, tag) {
  return async (n) => {
    try {
      await db.transaction(async (tx) => {
        const now = new Date();
        await product.appendAuditEvent(tx, appendEvent(orgId, `${tag}-${n}`, now), now);
      });
      return null;
    } catch (error) {
      return failure(`append failed ${error.code ?? error.name}`, error.message);
    }
  };
}

/** `concurrency` senders spread evenly over `orgs`. */
export function spread(orgs, concurrency, makeSender) {
  return Array.from({ length: concurrency }, (_, i) => makeSender(orgs[i % orgs.length], i));
}

// ── Run ───────────────────────────────────────────────────────────────────────────────────────

async function runScenarios({ product, db, authority, orgs, appendOrgs, postgresPids, options }) {
  const { concurrency, rate, log } = options;
  const run = {
    authority,
    postgresPids,
    warmupMs: options.warmupSeconds * 1000,
    windowMs: options.seconds * 1000,
    signal: AbortSignal.any([options.signal, abortOnExit(authority)]),
  };
  const results = {};
  const step = async (key, name, loop) => {
    log(`running: ${name} (${options.warmupSeconds} s warm-up + ${options.seconds} s)`);
    results[key] = await measureScenario(name, loop, run);
  };
  const bare = (name, count, tag) => (window) =>
    closedLoop(name, spread(appendOrgs.slice(0, count), concurrency, (org, i) => appendSender(product, db, org.id, `${tag}-${i}`)), { window, signal: run.signal });
  await step('bare1', 'bare append, 1 org', bare('bare append, 1 org', 1, 'a1'));
  await step('bare16', 'bare append, 16 orgs', bare('bare append, 16 orgs', ORGS, 'a16'));
  const pool = evaluatePool(authority.url, concurrency);
  try {
    const closed = (name, count, tag) => (window) =>
      closedLoop(name, spread(orgs.slice(0, count), concurrency, (org, i) => evaluateSender(pool, org.key, `${tag}-${i}`)), { window, signal: run.signal });
    if (options.processWarmupSeconds > 0) {
      // Shown, not judged: what the same load costs while the fresh process is still compiling.
      const name = `evaluate, 1 org, first ${options.processWarmupSeconds} s`;
      log(`running: ${name} of a fresh authority (the process warm-up)`);
      results.fresh = await measureScenario(name, closed(name, 1, 'w1'), { ...run, warmupMs: 0, windowMs: options.processWarmupSeconds * 1000 });
    }
    await step('eval1', 'evaluate, 1 org', closed('evaluate, 1 org', 1, 'e1'));
    await step('eval16', 'evaluate, 16 orgs', closed('evaluate, 16 orgs', ORGS, 'e16'));
    await step('open', `evaluate, 1 org, open loop ${rate}/s`, (window) =>
      openLoop('evaluate, 1 org, open loop', evaluateSender(pool, orgs[0].key, 'open'), { rate, window, signal: run.signal }));
    const sample = await sampleAnswer(pool, orgs[0].key);
    return { results, sample };
  } finally {
    await pool.close();
  }
}

/**
 * The floor of an evaluation (evaluate-floor.mjs), measured after the scenarios while the
 * authority idles. Its HTTP server gets the same process warm-up and load as the authority.
 */
function measureFloor(options, answer) {
  const { concurrency } = options;
  const clients = (url) => {
    const pool = evaluatePool(url, concurrency);
    return { senders: spread([{ key: 'floor' }], concurrency, (org, i) => evaluateSender(pool, org.key, `floor-${i}`)), close: () => pool.close() };
  };
  options.log('running: the floor of an evaluation, part by part');
  return measureEvaluateFloor({
    answer, clients, databaseUrl: options.databaseUrl, redisUrl: options.redisUrl, concurrency, seconds: options.seconds,
    warmupMs: (options.processWarmupSeconds + options.warmupSeconds) * 1000, signal: options.signal,
  });
}

/**
 * Runs the whole benchmark on `databaseUrl` (a server where a database may be created) and
 * `redisUrl`; resolves `{ ok }`. Throws when it could not run at all.
 */
export async function runEvaluateBench(options) {
  const { log } = options;
  const product = await loadProduct();
  const database = await createBenchDatabase(options.databaseUrl, 'countersign_bench');
  const dir = await mkdtemp(join(tmpdir(), 'countersign-bench-'));
  let authority;
  let db;
  try {
    authority = await startEvaluateAuthority({ databaseUrl: database.url, redisUrl: options.redisUrl, dir, cpuProfileDir: options.cpuProfileDir });
    // The bench's own pool has pg's default size, like the authority's, so the baseline competes
    // for connections the same way evaluate does.
    db = new product.PgDb({ connectionString: database.url });
    const facts = await serverFacts(db);
    const evaluateOrgs = await createEvaluateOrgs(product, db, ORGS);
    const appendOrgs = await createAppendOrgs(product, db, ORGS);
    log(`machine: ${availableParallelism()} cores, node ${process.version}; postgres ${facts.version} ` +
      `(fsync=${facts.fsync}, synchronous_commit=${facts.synchronous_commit}); authority at ${authority.url} (child process); ` +
      `${options.concurrency} clients; ${options.processWarmupSeconds} s process warm-up, then ${options.warmupSeconds} s warm-up + ${options.seconds} s per scenario`);
    // Postgres's CPU per evaluation is shown when it runs on this machine (its postmaster's pid).
    const postgresPids = await localStorePids(undefined, options.databaseUrl);
    const { results, sample } = await runScenarios({ product, db, authority, orgs: evaluateOrgs, appendOrgs, postgresPids, options });
    const floor = await measureFloor(options, sample);
    report(log, results, options.rate);
    evaluateFloorLines(log, { floor, evaluateUs: results.eval1.authorityUs });
    const sampled = 1; // the answer the floor's HTTP server repeats was a real, stored evaluation
    const answered = (results.fresh?.ok ?? 0) + results.eval1.ok + results.eval16.ok + results.open.ok + sampled;
    const problems = await checkStored(db, answered);
    if (problems.length === 0) log(`stored: ${answered} evaluations and permits, as answered; every audit chain head matches its events`);
    for (const problem of problems) log(`stored records do not match the answers: ${problem}`);
    const errors = Object.values(results).reduce((sum, row) => sum + row.errors, 0) + floor.http.errors;
    return { ok: errors === 0 && problems.length === 0 };
  } finally {
    await db?.close().catch(() => undefined);
    if (authority) {
      // A crash was reported where it happened; here only a failed shutdown is news.
      const crashed = authority.exit !== null;
      const exit = await authority.stop();
      if (!crashed && exit.code !== 0) log(`the authority did not exit cleanly on SIGTERM (${describeExit(exit)}):\n${authority.output()}`);
      if (options.cpuProfileDir) log(`authority CPU profile (.cpuprofile, open in Chrome DevTools): ${resolve(options.cpuProfileDir)}`);
    }
    await database.drop().catch((error) => log(`could not drop the bench database: ${error.message}`));
    await rm(dir, { recursive: true, force: true });
  }
}
