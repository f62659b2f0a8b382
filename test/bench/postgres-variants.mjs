#!/usr/bin/env node
/**
 * Where Postgres's CPU per evaluation goes, by taking parts of the schema away: the evaluate
 * closed loop against the schema as migrated and against variants of it, alternating them round by
 * round, with the CPU per evaluation of Postgres and of the authority from /proc. A diagnostic, not
 * a proposal: every variant removes something the product relies on (the foreign keys' integrity,
 * the audit log's list filters), and says what that part costs.
 *
 *   node test/bench/postgres-variants.mjs [VARIANT ...]   (default: every variant)
 *
 * Variants (each applied right after the authority migrated a fresh database):
 *   as-migrated        nothing changed: the reference of each round
 *   pglz               the stored response and audit payload compressed with pglz (migration 0013 sets lz4)
 *   no-foreign-keys    the foreign-key triggers of evaluations, permits and audit_events disabled
 *   no-audit-indexes   the five list indexes of audit_events dropped (the primary key and UNIQUE stay)
 *   no-list-indexes    the list indexes of evaluations and permits dropped
 *   none-of-these      all of the above at once
 *
 * Every run is a fresh database (one organization, the example policy) and a fresh authority from
 * this checkout's dist/ (run `npm run build` first), its process warm-up, then the closed loop of the
 * evaluate bench's `evaluate, 1 org`. Environment as evaluate-compare.mjs: BENCH_ROUNDS (3),
 * BENCH_SECONDS (4), BENCH_WARMUP_SECONDS (1), BENCH_PROCESS_WARMUP_SECONDS (10), BENCH_CONCURRENCY
 * (32), DATABASE_URL / REDIS_URL (else throwaway servers). Disabling foreign-key triggers needs a
 * superuser, which the throwaway server's user is.
 *
 * @example
 *   npm run build
 *   node test/bench/postgres-variants.mjs as-migrated no-audit-indexes
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { startPostgres, startRedis, stopServers } from '../support/servers.mjs';
import { createBenchDatabase, fmt, formatTable, serverUrl, setting, stopOnSignals } from './bench-common.mjs';
import { median, PROCESS_WARMUP, ROUNDS, roundOrder, SECONDS, WARMUP } from './compare-builds.mjs';
import {
  abortOnExit, createEvaluateOrgs, evaluatePool, evaluateSender, loadProduct, spread, startEvaluateAuthority,
} from './evaluate-bench.mjs';
import { closedLoop, measureScenario } from './evaluate-report.mjs';
import { localStorePids } from './proxy-setup.mjs';

const log = (line) => process.stdout.write(`${line}\n`);
const CONCURRENCY = setting('BENCH_CONCURRENCY', 32, { min: 1, max: 512, integer: true });

const PGLZ = ['evaluations ALTER COLUMN response', 'audit_events ALTER COLUMN payload'].map((column) => `ALTER TABLE ${column} SET COMPRESSION pglz`);
const NO_FOREIGN_KEYS = ['evaluations', 'permits', 'audit_events'].map((table) => `ALTER TABLE ${table} DISABLE TRIGGER ALL`);
const NO_AUDIT_INDEXES = ['type', 'actor', 'request', 'resource', 'time'].map((by) => `DROP INDEX audit_events_by_${by}`);
const NO_LIST_INDEXES = ['evaluations_by_org_time', 'permits_by_org_time', 'permits_by_org_actor'].map((index) => `DROP INDEX ${index}`);

const VARIANTS = {
  'as-migrated': [],
  pglz: PGLZ,
  'no-foreign-keys': NO_FOREIGN_KEYS,
  'no-audit-indexes': NO_AUDIT_INDEXES,
  'no-list-indexes': NO_LIST_INDEXES,
  'none-of-these': [...PGLZ, ...NO_FOREIGN_KEYS, ...NO_AUDIT_INDEXES, ...NO_LIST_INDEXES],
};
const REFERENCE = 'as-migrated';

const asked = process.argv.slice(2);
const unknown = asked.filter((name) => !(name in VARIANTS));
if (unknown.length > 0) {
  log(`unknown variant ${unknown.join(', ')}; the variants: ${Object.keys(VARIANTS).join(', ')}`);
  process.exit(2);
}
// The reference runs in every round, so each variant is read as a ratio to it.
const names = [REFERENCE, ...(asked.length > 0 ? asked : Object.keys(VARIANTS)).filter((name) => name !== REFERENCE)];
const stop = stopOnSignals(log);

/** One run: a fresh database with the variant applied, a fresh authority, its warm-up, the closed loop. */
async function measure(product, variant, { adminUrl, redisUrl, postgresPids }) {
  const database = await createBenchDatabase(adminUrl, 'countersign_variants');
  const dir = await mkdtemp(join(tmpdir(), 'countersign-variants-'));
  const authority = await startEvaluateAuthority({ databaseUrl: database.url, redisUrl, dir });
  const db = new product.PgDb({ connectionString: database.url });
  const pool = evaluatePool(authority.url, CONCURRENCY);
  try {
    const [org] = await createEvaluateOrgs(product, db, 1);
    for (const statement of VARIANTS[variant]) await db.query(statement);
    const signal = AbortSignal.any([stop.signal, abortOnExit(authority)]);
    const run = { authority, warmupMs: WARMUP * 1000, windowMs: SECONDS * 1000, signal, postgresPids };
    const loop = (tag) => (window) =>
      closedLoop(tag, spread([org], CONCURRENCY, (own, i) => evaluateSender(pool, own.key, `${tag}-${i}`)), { window, signal });
    if (PROCESS_WARMUP > 0) await measureScenario('process warm-up', loop('w'), { ...run, warmupMs: 0, windowMs: PROCESS_WARMUP * 1000 });
    const row = await measureScenario('closed loop', loop('c'), run);
    return { perSecond: row.perSecond, authorityUs: row.authorityUs, postgresUs: row.postgresUs, errors: row.errors };
  } finally {
    await pool.close();
    await db.close().catch(() => undefined);
    await authority.stop();
    await database.drop().catch((error) => log(`could not drop a variants database: ${error.message}`));
    await rm(dir, { recursive: true, force: true });
  }
}

function summary(results) {
  const reference = results.get(REFERENCE);
  const rows = names.map((name) => {
    const own = results.get(name);
    const column = (of, digits) => {
      const ratios = own.map((result, i) => of(result) / of(reference[i]));
      return [fmt(median(own.map(of)), digits), fmt(median(ratios), 2)];
    };
    return [name, ...column((r) => r.perSecond, 0), ...column((r) => r.postgresUs, 0), ...column((r) => r.authorityUs, 0)];
  });
  const versus = `÷ ${REFERENCE}`;
  return [
    formatTable(['variant', 'median /s', versus, 'postgres µs/eval', versus, 'authority µs/eval', versus], rows),
    `(${versus}: the median over rounds of the ratio to ${REFERENCE}'s figure in the same round)`,
  ].join('\n');
}

async function main() {
  const product = await loadProduct();
  const adminUrl = serverUrl('postgres', await startPostgres({ log }));
  const redisUrl = serverUrl('redis', await startRedis({ log }));
  const postgresPids = await localStorePids(undefined, adminUrl);
  if (postgresPids.length === 0) log('Postgres runs elsewhere or its pid cannot be read: its CPU column stays blank');
  log(`\n== evaluate, 1 org, closed loop of ${CONCURRENCY} clients; ${ROUNDS} rounds of ${WARMUP} s + ${SECONDS} s, ` +
    `each on a fresh database and authority after ${PROCESS_WARMUP} s of process warm-up ==`);
  const results = new Map(names.map((name) => [name, []]));
  for (let round = 1; round <= ROUNDS; round += 1) {
    for (const name of roundOrder(names, round)) {
      const result = await measure(product, name, { adminUrl, redisUrl, postgresPids });
      results.get(name).push(result);
      log(`round ${round} ${name}: ${fmt(result.perSecond, 0)}/s, ${fmt(result.postgresUs, 0)} µs Postgres and ` +
        `${fmt(result.authorityUs, 0)} µs authority CPU/eval, ${result.errors} errors`);
    }
  }
  log(`\n${summary(results)}`);
  return [...results.values()].flat().every((result) => result.errors === 0) ? 0 : 1;
}

let exitCode = 1;
try {
  exitCode = await main();
} catch (error) {
  log(stop.interrupted() ? `postgres-variants stopped: ${error?.message ?? error}` : `postgres-variants failed: ${error?.stack ?? error}`);
} finally {
  await stopServers();
}
process.exit(stop.interrupted() || exitCode);
