/**
 * The evaluate benchmark on real Postgres and Redis: end-to-end `POST /v1/evaluate` throughput
 * and latency, printed beside the bare hash-chained insert rate (`appendAuditEvent`, one event per
 * transaction) measured against the same Postgres in the same run, so the figures are read as
 * ratios rather than as absolute numbers from an unknown machine.
 *
 * The authority runs as a child process (`dist/bin/countersign.js authority`), so the load
 * generator does not share its event loop; the bench process sets up organizations and keys
 * through the compiled modules in dist/ and drives load over loopback with undici.
 *
 * Scenarios, each a warm-up (discarded) then a measured window; every loop stops at its deadline:
 *   bare append, 1 org / 16 orgs   appendAuditEvent in its own transaction, closed loop
 *   evaluate, 1 org                closed loop of C clients, one organization
 *   evaluate, 16 orgs              closed loop, C/16 clients per organization
 *   evaluate, open loop R/s        one organization, sends on a fixed schedule; latency is measured
 *                                  from the scheduled send time, so a stall is not hidden by the
 *                                  generator waiting for it (coordinated omission)
 *
 * It measures; it is not a test: missed targets print MISS and still resolve `{ ok: true }`.
 * `ok` is false only when a request failed or the stored records do not match the answers.
 *
 * @example
 *   const { ok } = await runEvaluateBench({ databaseUrl, redisUrl, seconds: 5, log: console.log, signal });
 */
import { spawn } from 'node:child_process';
import { randomBytes, randomUUID } from 'node:crypto';
import { once } from 'node:events';
import { existsSync } from 'node:fs';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { availableParallelism, tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { performance } from 'node:perf_hooks';
import { fileURLToPath } from 'node:url';
import { Pool, request } from 'undici';
import { freePort } from '../support/servers.mjs';
import {
  authorityYaml, createBenchDatabase, describeExit, fmt, formatTable, machineTimes, percent, percentile, READY_TIMEOUT_MS, STOP_TIMEOUT_MS,
} from './bench-common.mjs';

const root = resolve(dirname(fileURLToPath(import.meta.url)), '..', '..');
const dist = (path) => join(root, 'dist', path);
const CLI = dist('bin/countersign.js');

const ORGS = 16;
const REQUEST_TIMEOUT_MS = 10_000;
/** A scenario that keeps failing stops early rather than spinning for its whole window. */
const MAX_ERRORS_PER_SCENARIO = 1_000;
/** Child output kept for the report when it crashes. */
const CHILD_OUTPUT_LINES = 200;

const TARGETS = { oneOrgPerSecond: 1_500, sixteenOrgsPerSecond: 2_500, openLoopP99Ms: 20 };

/** The compiled product modules; imported lazily so a missing build is one clear error. */
async function loadProduct() {
  if (!existsSync(CLI)) throw new Error('dist/ is missing: run `npm run build` (npm run bench does it first)');
  const load = (path) => import(dist(path));
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

/** Keeps the child's last lines (warn and above only, at the log level the bench sets). */
function captureOutput(child) {
  const lines = [];
  const keep = (chunk) => {
    for (const line of String(chunk).split('\n')) {
      if (line.trim() === '') continue;
      lines.push(line);
      if (lines.length > CHILD_OUTPUT_LINES) lines.shift();
    }
  };
  child.stdout.on('data', keep);
  child.stderr.on('data', keep);
  return () => lines.join('\n');
}

async function isReady(api) {
  const response = await request(`${api}/readyz`, { headersTimeout: 2_000, bodyTimeout: 2_000 });
  await response.body.dump();
  return response.statusCode === 200;
}

/**
 * Starts `countersign authority` on two free loopback ports. At log level warn the "authority
 * ready" line is not written (info would also log every request, which the bench must not pay
 * for), so the ports are chosen here and readiness is polled on /readyz.
 */
async function startAuthorityChild({ databaseUrl, redisUrl, dir, cpuProfileDir }) {
  const configFile = join(dir, 'authority.yaml');
  await writeFile(configFile, authorityYaml('test/bench/evaluate-bench.mjs'));
  const [apiPort, adminPort] = [await freePort(), await freePort()];
  // Given rather than generated, so the first start writes no key file.
  const bootstrapKey = `ask_live_${randomBytes(24).toString('hex')}`;
  // A CPU profile of the authority under load, written when it exits, for whoever works on the figures.
  const profile = cpuProfileDir ? ['--cpu-prof', `--cpu-prof-dir=${resolve(cpuProfileDir)}`] : [];
  const child = spawn(process.execPath, [...profile, CLI, 'authority', '--config', configFile], {
    cwd: root,
    env: {
      PATH: process.env.PATH,
      DATABASE_URL: databaseUrl,
      REDIS_URL: redisUrl,
      COUNTERSIGN_SECRET_KEY: randomBytes(32).toString('base64'),
      COUNTERSIGN_BOOTSTRAP_KEY: bootstrapKey,
      COUNTERSIGN_DATA_DIR: join(dir, 'data'),
      COUNTERSIGN_AUTHORITY_LISTEN: `127.0.0.1:${apiPort}`,
      COUNTERSIGN_AUTHORITY_ADMIN_LISTEN: `127.0.0.1:${adminPort}`,
      COUNTERSIGN_LOG_LEVEL: 'warn',
    },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  const output = captureOutput(child);
  const authority = { child, output, api: `http://127.0.0.1:${apiPort}`, admin: `http://127.0.0.1:${adminPort}`, exit: null };
  authority.exited = once(child, 'exit').then(([code, signal]) => {
    authority.exit = { code, signal };
  });
  const deadline = Date.now() + READY_TIMEOUT_MS;
  while (Date.now() < deadline) {
    if (authority.exit) throw new Error(`the authority exited during start-up (${describeExit(authority.exit)}):\n${output()}`);
    if (await isReady(authority.api).catch(() => false)) return authority;
    await sleep(100);
  }
  throw new Error(`the authority was not ready within ${READY_TIMEOUT_MS / 1000} s:\n${output()}`);
}

/** SIGTERM (drain), SIGKILL when it does not stop; resolves how it ended. */
async function stopAuthorityChild(authority) {
  if (!authority.exit) {
    authority.child.kill('SIGTERM');
    const timer = setTimeout(() => authority.child.kill('SIGKILL'), STOP_TIMEOUT_MS);
    await authority.exited;
    clearTimeout(timer);
  }
  return authority.exit;
}

// ── Setup ─────────────────────────────────────────────────────────────────────────────────────

/** `count` organizations with an admin key and the example policy each, in one transaction. */
async function createEvaluateOrgs(product, db, count) {
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

// ── Measuring ─────────────────────────────────────────────────────────────────────────────────

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

/**
 * Counts a request in the window by its start (closed loop) or scheduled (open loop) time, so
 * each request is counted once whatever its latency. Errors count in the warm-up too: there must
 * be none at all.
 */
function createRecorder(windowStart, windowEnd) {
  const latencies = [];
  const errorKinds = new Map();
  const recorder = { latencies, errors: 0, ok: 0, errorKinds, windowStart, windowEnd };
  recorder.record = (startedAt, finishedAt, error) => {
    if (error) {
      recorder.errors += 1;
      const seen = errorKinds.get(error.kind);
      if (seen) seen.count += 1;
      else errorKinds.set(error.kind, { count: 1, example: error.example });
      return;
    }
    recorder.ok += 1;
    if (startedAt >= windowStart && startedAt < windowEnd) latencies.push(finishedAt - startedAt);
  };
  return recorder;
}

function summarize(name, concurrency, recorder) {
  const sorted = Float64Array.from(recorder.latencies).sort();
  const seconds = (recorder.windowEnd - recorder.windowStart) / 1000;
  return {
    name,
    concurrency,
    requests: sorted.length,
    perSecond: sorted.length / seconds,
    p50: percentile(sorted, 0.5),
    p99: percentile(sorted, 0.99),
    errors: recorder.errors,
    ok: recorder.ok,
    errorKinds: recorder.errorKinds,
  };
}

/** One closed-loop client: the next request starts when the previous one answered. */
async function closedLoopClient(send, recorder, stop) {
  for (let n = 0; performance.now() < recorder.windowEnd && !stop(); n += 1) {
    const startedAt = performance.now();
    const error = await send(n);
    recorder.record(startedAt, performance.now(), error);
  }
}

/** `senders` closed-loop clients for warm-up + window. */
async function closedLoop(name, senders, { warmupMs, windowMs, signal }) {
  const windowStart = performance.now() + warmupMs;
  const recorder = createRecorder(windowStart, windowStart + windowMs);
  const stop = () => signal.aborted || recorder.errors >= MAX_ERRORS_PER_SCENARIO;
  await Promise.all(senders.map((send) => closedLoopClient(send, recorder, stop)));
  return summarize(name, senders.length, recorder);
}

/**
 * Sends at a fixed rate regardless of answers: request i is due at start + i/rate, sent when the
 * timer loop reaches it, and its latency runs from that due time.
 */
async function openLoop(name, send, { rate, warmupMs, windowMs, signal }) {
  const start = performance.now();
  const recorder = createRecorder(start + warmupMs, start + warmupMs + windowMs);
  const interval = 1000 / rate;
  const total = Math.floor(((warmupMs + windowMs) / 1000) * rate);
  const inFlight = new Set();
  for (let i = 0; i < total && !signal.aborted && recorder.errors < MAX_ERRORS_PER_SCENARIO; ) {
    const now = performance.now();
    for (; i < total && start + i * interval <= now; i += 1) {
      const dueAt = start + i * interval;
      const pending = send(i).then((error) => recorder.record(dueAt, performance.now(), error));
      inFlight.add(pending);
      pending.finally(() => inFlight.delete(pending));
    }
    await sleep(1);
  }
  await Promise.all(inFlight);
  return summarize(name, `${rate}/s`, recorder);
}

// ── CPU ───────────────────────────────────────────────────────────────────────────────────────

/** The authority's process CPU seconds, from its own /metrics (prom-client's default metrics). */
async function authorityCpuSeconds(adminUrl) {
  const response = await request(`${adminUrl}/metrics`, { headersTimeout: 5_000, bodyTimeout: 5_000 });
  const text = await response.body.text();
  const match = /^process_cpu_seconds_total (\S+)$/m.exec(text);
  return match ? Number(match[1]) : Number.NaN;
}

async function cpuSnapshot(adminUrl) {
  return {
    at: performance.now(),
    authority: await authorityCpuSeconds(adminUrl).catch(() => Number.NaN),
    generator: process.cpuUsage(),
    machine: machineTimes(),
  };
}

/**
 * Where the CPU went during a scenario's measured window: the authority and this process (the
 * load generator, and for the bare appends the appender itself) in % of one core, the machine in
 * % of all its cores. What the machine spent beyond the two is mostly Postgres and Redis.
 */
function cpuWindow(adminUrl, warmupMs) {
  const first = sleep(warmupMs).then(() => cpuSnapshot(adminUrl));
  return async () => {
    const [start, end] = [await first, await cpuSnapshot(adminUrl)];
    const seconds = (end.at - start.at) / 1000;
    const generatorMicros = end.generator.user + end.generator.system - start.generator.user - start.generator.system;
    return {
      authority: ((end.authority - start.authority) / seconds) * 100,
      generator: (generatorMicros / 1e6 / seconds) * 100,
      machine: ((end.machine.busy - start.machine.busy) / (end.machine.total - start.machine.total)) * 100,
    };
  };
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

/** Resolves null for an allow with a permit, else a failure saying what came back. */
function evaluateSender(pool, key, tag) {
  const headers = { authorization: `Bearer ${key}`, 'content-type': 'application/json' };
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
function spread(orgs, concurrency, makeSender) {
  return Array.from({ length: concurrency }, (_, i) => makeSender(orgs[i % orgs.length], i));
}

// ── Consistency ───────────────────────────────────────────────────────────────────────────────

/** Problems found when the stored records are compared with what the authority answered. */
async function checkStored(db, answeredAllow) {
  const problems = [];
  const [{ evaluations, permits }] = await db.query(
    'SELECT (SELECT count(*) FROM evaluations) AS evaluations, (SELECT count(*) FROM permits) AS permits',
  );
  if (evaluations !== answeredAllow) problems.push(`${evaluations} evaluations stored, ${answeredAllow} answered allow`);
  if (permits !== answeredAllow) problems.push(`${permits} permits stored, ${answeredAllow} answered allow`);
  const heads = await db.query(
    `SELECT h.org_id, h.sequence, count(e.id) AS events, coalesce(max(e.sequence), 0) AS last
       FROM audit_chain_heads h LEFT JOIN audit_events e ON e.org_id = h.org_id
      GROUP BY h.org_id, h.sequence`,
  );
  for (const head of heads) {
    if (head.sequence !== head.events || head.sequence !== head.last) {
      problems.push(`organization ${head.org_id}: head at sequence ${head.sequence}, ${head.events} events, last sequence ${head.last}`);
    }
  }
  return problems;
}

// ── Report ────────────────────────────────────────────────────────────────────────────────────

function table(rows) {
  const header = ['scenario', 'clients', 'requests', 'per s', 'p50 ms', 'p99 ms', 'errors', 'authority cpu', 'bench cpu', 'machine busy'];
  const cells = rows.map((r) => [
    r.name, String(r.concurrency), String(r.requests), fmt(r.perSecond, 0), fmt(r.p50, 2), fmt(r.p99, 2), String(r.errors),
    percent(r.cpu.authority), percent(r.cpu.generator), percent(r.cpu.machine),
  ]);
  return formatTable(header, cells);
}

function verdict(pass) {
  return pass ? 'PASS' : 'MISS';
}

function report(log, results, rate) {
  const { bare1, bare16, eval1, eval16, open } = results;
  log('');
  log(table([bare1, bare16, eval1, eval16, open]));
  log(`(cpu: authority and bench process in % of one core, machine in % of all ${availableParallelism()} cores; bench = load generator, or the appender in the bare rows)`);
  log('');
  log('ratios (evaluations/s ÷ bare appends/s at the same clients and organizations; each evaluation appends 2 events; concurrent evaluations share a transaction):');
  log(`  1 org:   ${fmt(eval1.perSecond, 0)} / ${fmt(bare1.perSecond, 0)} = ${fmt(eval1.perSecond / bare1.perSecond, 2)}`);
  log(`  16 orgs: ${fmt(eval16.perSecond, 0)} / ${fmt(bare16.perSecond, 0)} = ${fmt(eval16.perSecond / bare16.perSecond, 2)}`);
  log('');
  log('targets (2-core machine):');
  log(`  evaluate, 1 org    >= ${TARGETS.oneOrgPerSecond}/s: ${fmt(eval1.perSecond, 0)}/s  ${verdict(eval1.perSecond >= TARGETS.oneOrgPerSecond)}`);
  log(`  evaluate, 16 orgs  >= ${TARGETS.sixteenOrgsPerSecond}/s: ${fmt(eval16.perSecond, 0)}/s  ${verdict(eval16.perSecond >= TARGETS.sixteenOrgsPerSecond)}`);
  const openPass = open.p99 <= TARGETS.openLoopP99Ms && open.errors === 0;
  log(`  p99 at ${rate}/s     <= ${TARGETS.openLoopP99Ms} ms: ${fmt(open.p99, 2)} ms  ${verdict(openPass)}${open.errors > 0 ? ' (it had errors)' : ''}`);
  for (const row of Object.values(results)) {
    for (const [kind, { count, example }] of row.errorKinds) log(`errors in "${row.name}": ${count} × ${kind}, e.g. ${example}`);
  }
}

// ── Run ───────────────────────────────────────────────────────────────────────────────────────

async function runScenarios({ product, db, authority, orgs, appendOrgs, options }) {
  const { concurrency, rate, log } = options;
  const timing = { warmupMs: options.warmupSeconds * 1000, windowMs: options.seconds * 1000 };
  // The child dying mid-run stops every loop at once instead of collecting connection errors.
  const signal = AbortSignal.any([options.signal, abortOnExit(authority)]);
  const run = { ...timing, signal };
  const results = {};
  const step = async (key, label, fn) => {
    if (options.signal.aborted) throw new Error('interrupted');
    log(`running: ${label} (${options.warmupSeconds} s warm-up + ${options.seconds} s)`);
    const cpu = cpuWindow(authority.admin, timing.warmupMs);
    results[key] = await fn();
    results[key].cpu = await cpu();
    if (authority.exit) throw new Error(`the authority exited (${describeExit(authority.exit)}) during "${label}":\n${authority.output()}`);
    // A cut-short scenario's figures would read as measurements; report none.
    if (options.signal.aborted) throw new Error(`interrupted during "${label}"`);
  };
  await step('bare1', 'bare append, 1 org', () =>
    closedLoop('bare append, 1 org', spread(appendOrgs.slice(0, 1), concurrency, (org, i) => appendSender(product, db, org.id, `a1-${i}`)), run));
  await step('bare16', 'bare append, 16 orgs', () =>
    closedLoop('bare append, 16 orgs', spread(appendOrgs, concurrency, (org, i) => appendSender(product, db, org.id, `a16-${i}`)), run));
  // Keep-alive and no pipelining, with a connection for every closed-loop client (and room for the
  // open loop's bursts), so a request waits only for its own answer.
  const pool = new Pool(authority.api, { connections: Math.max(concurrency, 64), pipelining: 1, keepAliveTimeout: 30_000 });
  try {
    await step('eval1', 'evaluate, 1 org', () =>
      closedLoop('evaluate, 1 org', spread(orgs.slice(0, 1), concurrency, (org, i) => evaluateSender(pool, org.key, `e1-${i}`)), run));
    await step('eval16', 'evaluate, 16 orgs', () =>
      closedLoop('evaluate, 16 orgs', spread(orgs, concurrency, (org, i) => evaluateSender(pool, org.key, `e16-${i}`)), run));
    await step('open', `evaluate, 1 org, open loop ${rate}/s`, () =>
      openLoop('evaluate, 1 org, open loop', evaluateSender(pool, orgs[0].key, 'open'), { ...run, rate }));
  } finally {
    await pool.close();
  }
  return results;
}

function abortOnExit(authority) {
  const controller = new AbortController();
  authority.exited.then(() => controller.abort());
  return controller.signal;
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
    authority = await startAuthorityChild({ databaseUrl: database.url, redisUrl: options.redisUrl, dir, cpuProfileDir: options.cpuProfileDir });
    // The bench's own pool has pg's default size, like the authority's, so the baseline competes
    // for connections the same way evaluate does.
    db = new product.PgDb({ connectionString: database.url });
    const facts = await serverFacts(db);
    const evaluateOrgs = await createEvaluateOrgs(product, db, ORGS);
    const appendOrgs = await createAppendOrgs(product, db, ORGS);
    log(`machine: ${availableParallelism()} cores, node ${process.version}; postgres ${facts.version} ` +
      `(fsync=${facts.fsync}, synchronous_commit=${facts.synchronous_commit}); authority at ${authority.api} (child process); ` +
      `${options.concurrency} clients; ${options.warmupSeconds} s warm-up + ${options.seconds} s per scenario`);
    const results = await runScenarios({ product, db, authority, orgs: evaluateOrgs, appendOrgs, options });
    report(log, results, options.rate);
    const answered = results.eval1.ok + results.eval16.ok + results.open.ok;
    const problems = await checkStored(db, answered);
    if (problems.length === 0) log(`stored: ${answered} evaluations and permits, as answered; every audit chain head matches its events`);
    for (const problem of problems) log(`stored records do not match the answers: ${problem}`);
    const errors = Object.values(results).reduce((sum, row) => sum + row.errors, 0);
    return { ok: errors === 0 && problems.length === 0 };
  } finally {
    await db?.close().catch(() => undefined);
    if (authority) {
      // A crash was reported where it happened; here only a failed shutdown is news.
      const crashed = authority.exit !== null;
      const exit = await stopAuthorityChild(authority);
      if (!crashed && exit.code !== 0) log(`the authority did not exit cleanly on SIGTERM (${describeExit(exit)}):\n${authority.output()}`);
      if (options.cpuProfileDir) log(`authority CPU profile (.cpuprofile, open in Chrome DevTools): ${resolve(options.cpuProfileDir)}`);
    }
    await database.drop().catch((error) => log(`could not drop the bench database: ${error.message}`));
    await rm(dir, { recursive: true, force: true });
  }
}
