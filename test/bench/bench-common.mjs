/**
 * What the evaluate and the proxy benchmarks share: the authority configuration that keeps rate
 * limits out of the way, a throwaway database per run, machine CPU times, settings from the
 * environment, nearest-rank percentiles and the plain-text tables they print, the URL of a
 * throwaway server, and a stop on Ctrl-C.
 *
 * @example
 *   const database = await createBenchDatabase(adminUrl, 'countersign_bench');
 *   await writeFile(file, authorityYaml('test/bench/evaluate-bench.mjs'));
 *   log(formatTable(['scenario', 'per s'], rows.map((r) => [r.name, fmt(r.perSecond, 0)])));
 *   await database.drop();
 */
import { randomBytes } from 'node:crypto';
import { cpus } from 'node:os';
import pg from 'pg';

/** How long a child process may take to answer its readiness check, and to exit when asked. */
export const READY_TIMEOUT_MS = 60_000;
export const STOP_TIMEOUT_MS = 15_000;

/** Far above any load the benchmarks generate, so no 429 gets in the way. */
export const RAISED_LIMIT = { per_minute: 10_000_000, burst: 10_000_000 };

/** An authority.yaml with every rate limit raised; `writer` names the benchmark in its comment. */
export function authorityYaml(writer) {
  const bucket = `{ per_minute: ${RAISED_LIMIT.per_minute}, burst: ${RAISED_LIMIT.burst} }`;
  return [
    `# Written by ${writer}: rate limits out of the way of the load.`,
    'rate_limits:',
    `  evaluate: ${bucket}`,
    '  plans:',
    ...['community', 'team', 'business', 'enterprise'].map((plan) => `    ${plan}: ${bucket}`),
    '',
  ].join('\n');
}

export async function withAdminClient(adminUrl, fn) {
  const client = new pg.Client({ connectionString: adminUrl, connectionTimeoutMillis: 10_000 });
  await client.connect();
  try {
    return await fn(client);
  } finally {
    await client.end().catch(() => undefined);
  }
}

/** A database of its own on the given server (the role needs CREATEDB), and how to drop it. */
export async function createBenchDatabase(adminUrl, prefix) {
  const name = `${prefix}_${process.pid}_${randomBytes(4).toString('hex')}`;
  await withAdminClient(adminUrl, (client) => client.query(`CREATE DATABASE "${name}"`));
  const url = new URL(adminUrl);
  url.pathname = `/${name}`;
  return {
    url: url.toString(),
    // FORCE: connections a crashed child may have left must not keep the database alive.
    drop: () => withAdminClient(adminUrl, (client) => client.query(`DROP DATABASE IF EXISTS "${name}" WITH (FORCE)`)),
  };
}

/** All cores' busy and total time so far (ms); the difference of two gives the machine's load. */
export function machineTimes() {
  let busy = 0;
  let total = 0;
  for (const { times } of cpus()) {
    const all = times.user + times.nice + times.sys + times.irq + times.idle;
    total += all;
    busy += all - times.idle;
  }
  return { busy, total };
}

/** A bounded number from the environment, or the default; anything else stops the run. */
export function setting(name, fallback, { min, max, integer = false }) {
  const raw = process.env[name];
  if (raw === undefined || raw === '') return fallback;
  const value = Number(raw);
  if (!Number.isFinite(value) || value < min || value > max || (integer && !Number.isInteger(value))) {
    throw new Error(`${name}=${raw}: expected ${integer ? 'an integer' : 'a number'} from ${min} to ${max}`);
  }
  return value;
}

/** Nearest-rank percentile of an ascending array; NaN when it is empty. */
export function percentile(sorted, p) {
  if (sorted.length === 0) return Number.NaN;
  return sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil(p * sorted.length) - 1))];
}

/** A number with `digits` decimals, or '-' for anything else (NaN, null from JSON). */
export const fmt = (value, digits = 1) => (typeof value === 'number' && Number.isFinite(value) ? value.toFixed(digits) : '-');
export const percent = (value) => `${fmt(value, 0)} %`;

/** Aligned columns: the first `textColumns` left-aligned, the figures right-aligned. */
export function formatTable(header, cells, textColumns = 1) {
  const widths = header.map((h, i) => Math.max(h.length, ...cells.map((c) => c[i].length)));
  const line = (c) => c.map((v, i) => (i < textColumns ? v.padEnd(widths[i]) : v.padStart(widths[i]))).join('  ');
  return [line(header), widths.map((w) => '-'.repeat(w)).join('  '), ...cells.map(line)].join('\n');
}

/** How a child process ended, for error messages. */
export function describeExit({ code, signal, error }) {
  if (error) return error.message;
  return signal ? `signal ${signal}` : `exit code ${code}`;
}

/** The URL of a server test/support/servers.mjs started, or throws with why there is none. */
export function serverUrl(name, outcome) {
  if (outcome.ok) return outcome.url;
  const why = outcome.failed ? `the server could not be started: ${outcome.reason}\n${outcome.logTail}` : outcome.reason;
  throw new Error(`the bench cannot run: ${name}: ${why}`);
}

/**
 * SIGINT and SIGTERM abort `signal`, so the run can stop its children and remove what it made; a
 * second one exits at once. `interrupted()` is the exit code to end with (130 or 143), else 0;
 * `interruptedBy(code)` records an interruption seen elsewhere (a child that got the Ctrl-C).
 */
export function stopOnSignals(log) {
  const controller = new AbortController();
  let code = 0;
  for (const [name, exitCode] of [['SIGINT', 130], ['SIGTERM', 143]]) {
    process.on(name, () => {
      if (code !== 0) process.exit(exitCode);
      code = exitCode;
      log(`\ninterrupted by ${name}; stopping`);
      controller.abort();
    });
  }
  return { signal: controller.signal, interrupted: () => code, interruptedBy: (exitCode) => (code ||= exitCode) };
}
