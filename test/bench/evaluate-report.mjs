/**
 * How the evaluate benchmark measures and reports (evaluate-bench.mjs drives the scenarios,
 * evaluate-compare.mjs compares builds with the same loops): the closed and open loops, which
 * requests and how much CPU count in a measured window, the table, the ratios and the targets, and
 * the check of the stored records against the answers.
 *
 * A request counts in the window by its start (closed loop) or scheduled send time (open loop);
 * the CPU is read at the window's edges, the authority's from its own accounting in /proc, so CPU
 * per evaluation is that CPU ÷ the evaluations counted.
 *
 * @example
 *   const row = await measureScenario('evaluate, 1 org', (window) => closedLoop('evaluate, 1 org', senders, { window, signal }),
 *     { authority, warmupMs: 1000, windowMs: 5000, signal });
 *   log(`${row.perSecond}/s, ${row.authorityUs} µs of authority CPU per evaluation`);
 *   report(log, { bare1, bare16, eval1, eval16, open }, 500);
 */
import { availableParallelism } from 'node:os';
import { performance } from 'node:perf_hooks';
import { describeExit, fmt, formatTable, machineTimes, percent, percentile } from './bench-common.mjs';
import { cpuBetween, cpuTimes } from './proc-stats.mjs';

/** A scenario that keeps failing stops early rather than spinning for its whole window. */
const MAX_ERRORS_PER_SCENARIO = 1_000;

/**
 * Stated for the 2-core development machine. Throughput is a ratio to the bare chained append of
 * the same run, which moves with the machine as evaluate does; CPU per evaluation and the
 * open-loop p99 are absolute.
 */
const TARGETS = { cpuPerEvaluationUs: 250, oneOrgRatio: 2.5, sixteenOrgsRatio: 1.5, openLoopP99Ms: 10 };

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// ── Measuring ─────────────────────────────────────────────────────────────────────────────────

/** The times of a scenario that starts now, on performance.now()'s clock. */
export function scenarioWindow(warmupMs, windowMs) {
  const start = performance.now();
  return { start, windowStart: start + warmupMs, windowEnd: start + warmupMs + windowMs };
}

/**
 * Counts a request in the window by its start (closed loop) or scheduled (open loop) time, so
 * each request is counted once whatever its latency. Errors count in the warm-up too: there must
 * be none at all.
 */
function createRecorder({ windowStart, windowEnd }) {
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

/** `senders` closed-loop clients for warm-up + window (a `scenarioWindow`). */
export async function closedLoop(name, senders, { window, signal }) {
  const recorder = createRecorder(window);
  const stop = () => signal.aborted || recorder.errors >= MAX_ERRORS_PER_SCENARIO;
  await Promise.all(senders.map((send) => closedLoopClient(send, recorder, stop)));
  return summarize(name, senders.length, recorder);
}

/**
 * Sends at a fixed rate regardless of answers: request i is due at start + i/rate, sent when the
 * timer loop reaches it, and its latency runs from that due time.
 */
export async function openLoop(name, send, { rate, window, signal }) {
  const recorder = createRecorder(window);
  const interval = 1000 / rate;
  const total = Math.floor(((window.windowEnd - window.start) / 1000) * rate);
  const inFlight = new Set();
  for (let i = 0; i < total && !signal.aborted && recorder.errors < MAX_ERRORS_PER_SCENARIO; ) {
    const now = performance.now();
    for (; i < total && window.start + i * interval <= now; i += 1) {
      const dueAt = window.start + i * interval;
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

function cpuSnapshot(authorityPid, postgresPids) {
  return {
    at: performance.now(),
    authority: cpuTimes([authorityPid]),
    postgres: cpuTimes(postgresPids),
    generator: process.cpuUsage(),
    machine: machineTimes(),
  };
}

/**
 * Where the CPU went during a scenario's measured window: snapshots at the window's start and end,
 * the same edges that decide which requests are counted, so CPU ÷ requests is CPU per request.
 * The authority's is its own accounting in /proc (every thread; a /metrics scrape would add its
 * own cost), and so is Postgres's (its postmaster and every child: backends, WAL writer,
 * checkpointer; see cpuBetween for one that starts or ends inside the window). This process's (the
 * load generator, and for the bare appends the appender itself) comes from process.cpuUsage().
 * Call the result when the scenario is done; one cut short ends there.
 */
function cpuWindow(window, authorityPid, postgresPids) {
  // Taken by a timer at `time`, or by `now()` when the scenario ended before it.
  const snapshotAt = (time) => {
    let taken;
    const take = () => (taken ??= cpuSnapshot(authorityPid, postgresPids));
    const timer = setTimeout(take, Math.max(0, time - performance.now()));
    return () => (clearTimeout(timer), take());
  };
  const first = snapshotAt(window.windowStart);
  const last = snapshotAt(window.windowEnd);
  return async () => {
    const [start, end] = [first(), last()];
    const seconds = (end.at - start.at) / 1000;
    const generatorSeconds = (end.generator.user + end.generator.system - start.generator.user - start.generator.system) / 1e6;
    const authoritySeconds = cpuBetween(start.authority, end.authority);
    const postgresSeconds = cpuBetween(start.postgres, end.postgres);
    return {
      authoritySeconds,
      postgresSeconds,
      generatorSeconds,
      authority: (authoritySeconds / seconds) * 100,
      postgres: (postgresSeconds / seconds) * 100,
      generator: (generatorSeconds / seconds) * 100,
      machine: ((end.machine.busy - start.machine.busy) / (end.machine.total - start.machine.total)) * 100,
    };
  };
}

/**
 * Runs one scenario (`loop(window)`, a closed or open loop) against `authority` and adds its CPU:
 * `cpu` in % and, per request counted in the window, the authority's (`authorityUs`), Postgres's
 * (`postgresUs`, NaN without `postgresPids`: the server's postmaster, see proxy-setup.mjs's
 * localStorePids) and this process's (`benchUs`) CPU in µs. Throws when the authority died or the
 * run was interrupted, so a cut-short scenario's figures are never read as measurements.
 */
export async function measureScenario(label, loop, { authority, warmupMs, windowMs, signal, postgresPids = [] }) {
  const check = (when) => {
    if (authority.exit) throw new Error(`the authority exited (${describeExit(authority.exit)}) ${when} "${label}":\n${authority.output()}`);
    if (signal.aborted) throw new Error(`interrupted ${when} "${label}"`);
  };
  check('before');
  const window = scenarioWindow(warmupMs, windowMs);
  const cpu = cpuWindow(window, authority.child.pid, postgresPids);
  const result = await loop(window);
  result.cpu = await cpu();
  result.authorityUs = (1e6 * result.cpu.authoritySeconds) / result.requests;
  result.postgresUs = (1e6 * result.cpu.postgresSeconds) / result.requests;
  result.benchUs = (1e6 * result.cpu.generatorSeconds) / result.requests;
  check('during');
  return result;
}

// ── Consistency ───────────────────────────────────────────────────────────────────────────────

/** Problems found when the stored records are compared with what the authority answered. */
export async function checkStored(db, answeredAllow) {
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

/** The bare rows have no authority: their CPU per operation is the appender's, this process's. */
function table(rows) {
  const header = ['scenario', 'clients', 'requests', 'per s', 'p50 ms', 'p99 ms', 'errors', 'authority µs/eval', 'postgres µs/eval',
    'authority cpu', 'postgres cpu', 'bench cpu', 'machine busy'];
  const cells = rows.map(({ row, bare }) => [
    row.name, String(row.concurrency), String(row.requests), fmt(row.perSecond, 0), fmt(row.p50, 2), fmt(row.p99, 2), String(row.errors),
    bare ? `${fmt(row.benchUs, 0)} (bench)` : fmt(row.authorityUs, 0), fmt(row.postgresUs, 0),
    percent(row.cpu.authority), percent(row.cpu.postgres), percent(row.cpu.generator), percent(row.cpu.machine),
  ]);
  return formatTable(header, cells);
}

/** One target line: PASS or MISS, or MISS (not measured) when there is no figure to judge. */
function target(label, bound, value, shown, pass, note = '') {
  const verdict = !Number.isFinite(value) ? 'MISS (not measured)' : pass ? 'PASS' : 'MISS';
  return `  ${label.padEnd(42)} ${bound.padEnd(24)} ${shown.padStart(10)}  ${verdict}${note}`;
}

/** The table, the ratios to the bare append and the targets, from runEvaluateBench's rows. */
export function report(log, results, rate) {
  const { bare1, bare16, fresh, eval1, eval16, open } = results;
  log('');
  log(table([{ row: bare1, bare: true }, { row: bare16, bare: true }, ...(fresh ? [{ row: fresh }] : []), { row: eval1 }, { row: eval16 }, { row: open }]));
  if (fresh) log(`(${fresh.name}: the fresh authority's process warm-up, before the rows below; shown, not judged)`);
  log("(authority µs/eval: the authority process's CPU in the measured window, from /proc, ÷ the evaluations counted in it; " +
    "in the bare rows, marked (bench), the bench process's CPU per append; postgres µs/eval: the Postgres server's processes, the same way, per evaluation or append)");
  log(`(cpu: authority, postgres and bench process in % of one core, machine in % of all ${availableParallelism()} cores; bench = load generator, or the appender in the bare rows)`);
  log('');
  const oneOrg = eval1.perSecond / bare1.perSecond;
  const sixteenOrgs = eval16.perSecond / bare16.perSecond;
  log('ratios (evaluations/s ÷ bare appends/s at the same clients and organizations; each evaluation appends 2 events; concurrent evaluations share a transaction):');
  log(`  1 org:   ${fmt(eval1.perSecond, 0)} / ${fmt(bare1.perSecond, 0)} = ${fmt(oneOrg, 2)}`);
  log(`  16 orgs: ${fmt(eval16.perSecond, 0)} / ${fmt(bare16.perSecond, 0)} = ${fmt(sixteenOrgs, 2)}`);
  log('');
  log('targets (measured in this run):');
  log(target('evaluate, authority CPU per evaluation', `<= ${TARGETS.cpuPerEvaluationUs} µs`, eval1.authorityUs, `${fmt(eval1.authorityUs, 0)} µs`,
    eval1.authorityUs <= TARGETS.cpuPerEvaluationUs));
  log(target('evaluate, 1 organization', `>= ${TARGETS.oneOrgRatio} × bare append`, oneOrg, `${fmt(oneOrg, 2)} ×`, oneOrg >= TARGETS.oneOrgRatio));
  log(target('evaluate, 16 organizations', `>= ${TARGETS.sixteenOrgsRatio} × bare append`, sixteenOrgs, `${fmt(sixteenOrgs, 2)} ×`, sixteenOrgs >= TARGETS.sixteenOrgsRatio));
  log(target(`evaluate, p99 at ${rate}/s open loop`, `<= ${TARGETS.openLoopP99Ms} ms`, open.p99, `${fmt(open.p99, 2)} ms`,
    open.p99 <= TARGETS.openLoopP99Ms && open.errors === 0, open.errors > 0 ? ' (it had errors)' : ''));
  for (const row of Object.values(results)) {
    for (const [kind, { count, example }] of row.errorKinds) log(`errors in "${row.name}": ${count} × ${kind}, e.g. ${example}`);
  }
}
