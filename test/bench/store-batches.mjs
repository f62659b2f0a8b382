#!/usr/bin/env node
/**
 * What a group-commit batch of evaluations costs Postgres, statement by statement, and what a
 * rewritten `countersign_store_evaluations` would save, measured on real batches.
 *
 *   node test/bench/store-batches.mjs [VARIANT.sql ...]
 *
 * 1. Capture: a fresh database and authority (this checkout's dist/; run `npm run build` first),
 *    BENCH_ORGS organizations (16), and the evaluate closed loop of BENCH_CONCURRENCY clients (32)
 *    for BENCH_SECONDS (4), with the function wrapped so that every call's arguments are kept.
 * 2. Replay: up to 400 of those batches, each run again in a transaction that is rolled back, so
 *    that every run meets the same tables (emptied after the capture).
 *    - Per statement: `pg_stat_statements` (`track = all`) over one pass with the function as
 *      migrated; a statement's time includes the statements it runs (its foreign keys' lookups).
 *    - Each VARIANT.sql creates a function with the same parameters, named after its file
 *      (`cs_v2.sql` creates `cs_v2`). Every batch is run by the migrated function and by each
 *      variant, their order alternating from batch to batch, for BENCH_ROUNDS passes (3), and each
 *      run's CPU is the backend's own (/proc/<pid>/schedstat): the ratios hold to a percent where
 *      whole closed loops swing by tens of percent.
 *
 * Needs a Postgres that preloads pg_stat_statements, as the throwaway server started here does
 * (with DATABASE_URL, its server must), its superuser (the audit log's insert-only triggers are
 * switched off to empty it), and this machine's /proc.
 *
 * @example
 *   npm run build
 *   node test/bench/store-batches.mjs
 *   BENCH_ROUNDS=6 node test/bench/store-batches.mjs /tmp/cs_v2.sql
 */
import { readFileSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { basename, join } from 'node:path';
import pg from 'pg';
import { startPostgres, startRedis, stopServers } from '../support/servers.mjs';
import { createBenchDatabase, fmt, formatTable, serverUrl, setting } from './bench-common.mjs';
import { median, ROUNDS, roundOrder, SECONDS } from './compare-builds.mjs';
import { createEvaluateOrgs, evaluatePool, evaluateSender, loadProduct, spread, startEvaluateAuthority } from './evaluate-bench.mjs';
import { closedLoop, scenarioWindow } from './evaluate-report.mjs';

const log = (line) => process.stdout.write(`${line}\n`);
const ORGS = setting('BENCH_ORGS', 16, { min: 1, max: 64, integer: true });
const CONCURRENCY = setting('BENCH_CONCURRENCY', 32, { min: 1, max: 512, integer: true });
const REPLAYED = 400;
const MIGRATED = 'countersign_store_evaluations';
const SIGNATURE = '(jsonb, jsonb, jsonb, timestamptz, text)';

const variants = process.argv.slice(2).map((file) => ({ name: basename(file, '.sql'), sql: readFileSync(file, 'utf8') }));
if (variants.some(({ name }) => !/^[a-z_][a-z0-9_]*$/.test(name) || name === MIGRATED)) {
  log('usage: node test/bench/store-batches.mjs [VARIANT.sql ...]  (each file creates the function its name names, in lower case)');
  process.exit(2);
}

/** Runs the evaluate closed loop with every call of the function kept in `captured_batches`. */
async function capture(db, { authority, orgs }) {
  await db.exec(`
    CREATE TABLE captured_batches (n serial PRIMARY KEY, evaluations jsonb, permits jsonb, events jsonb, recorded_at timestamptz, genesis text);
    ALTER FUNCTION ${MIGRATED}${SIGNATURE} RENAME TO migrated_store_evaluations;
    CREATE FUNCTION ${MIGRATED}(a jsonb, b jsonb, c jsonb, d timestamptz, e text) RETURNS SETOF uuid LANGUAGE plpgsql AS $$
    BEGIN
      INSERT INTO captured_batches (evaluations, permits, events, recorded_at, genesis) VALUES (a, b, c, d, e);
      RETURN QUERY SELECT migrated_store_evaluations(a, b, c, d, e);
    END $$;`);
  const pool = evaluatePool(authority.url, CONCURRENCY);
  const window = scenarioWindow(0, SECONDS * 1000);
  const senders = spread(orgs, CONCURRENCY, (own, i) => evaluateSender(pool, own.key, `capture-${i}`));
  const result = await closedLoop('capture', senders, { window, signal: AbortSignal.timeout(SECONDS * 1000 + 60_000) });
  await pool.close();
  if (result.errors > 0) throw new Error(`the capture's closed loop had ${result.errors} errors`);
  // Its background work (the webhook worker, the records' drain) would otherwise run beside the replays.
  await authority.stop();
  // Back as migrated, and the tables as they were before the loop, for every replay to meet.
  await db.exec(`
    DROP FUNCTION ${MIGRATED}${SIGNATURE};
    ALTER FUNCTION migrated_store_evaluations${SIGNATURE} RENAME TO ${MIGRATED};
    SET session_replication_role = replica;
    TRUNCATE evaluations, permits, audit_events, webhook_deliveries CASCADE;
    SET session_replication_role = origin;
    UPDATE audit_chain_heads SET sequence = 0, head_hash = (SELECT genesis FROM captured_batches LIMIT 1);`);
  const [stats] = await db.query(
    `SELECT count(*)::int AS batches, avg(jsonb_array_length(evaluations))::float AS evaluations, avg(jsonb_array_length(events))::float AS events FROM captured_batches`,
  );
  log(`captured ${stats.batches} batches of ${fmt(stats.evaluations)} evaluations and ${fmt(stats.events)} audit events on average (${ORGS} organizations, ${CONCURRENCY} clients)`);
}

/** Runs `fn` with a connection of its own, whose backend's CPU time /proc shows. */
async function onOneConnection(url, fn) {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  try {
    const { rows: [{ pid }] } = await client.query('SELECT pg_backend_pid() AS pid');
    const cpuMs = () => Number(readFileSync(`/proc/${pid}/schedstat`, 'utf8').split(' ')[0]) / 1e6;
    return await fn({ query: async (sql, params) => (await client.query(sql, params)).rows }, cpuMs);
  } finally {
    await client.end();
  }
}

/** One batch through `name`, in a transaction rolled back; the backend's CPU ms it took. */
async function replay(tx, cpuMs, name, batch) {
  await tx.query('BEGIN');
  const before = cpuMs();
  await tx.query(`SELECT ${name}($1::jsonb, $2::jsonb, $3::jsonb, $4, $5)`, [batch.evaluations, batch.permits, batch.events, batch.recorded_at, batch.genesis]);
  const used = cpuMs() - before;
  await tx.query('ROLLBACK');
  return used;
}

async function perStatement(tx, cpuMs, batches) {
  await tx.query('CREATE EXTENSION IF NOT EXISTS pg_stat_statements');
  for (const batch of batches) await replay(tx, cpuMs, MIGRATED, batch);
  await tx.query('SELECT pg_stat_statements_reset()');
  for (const batch of batches) await replay(tx, cpuMs, MIGRATED, batch);
  const rows = await tx.query(
    `SELECT calls::int, total_exec_time AS ms, left(regexp_replace(query, '\\s+', ' ', 'g'), 100) AS statement FROM pg_stat_statements
     WHERE calls >= $1 AND query NOT IN ('BEGIN', 'ROLLBACK') ORDER BY total_exec_time DESC LIMIT 20`,
    [batches.length],
  );
  const whole = rows.find((row) => row.statement.includes(`${MIGRATED}(`))?.ms ?? Number.NaN;
  log(`\n== per statement, over ${batches.length} batches (µs per batch; % of the function's call) ==`);
  log(formatTable(['statement', 'µs/batch', '%', 'calls/batch'], rows.map((row) => [
    row.statement, fmt((1000 * row.ms) / batches.length, 0), fmt((100 * row.ms) / whole, 0), fmt(row.calls / batches.length, 1),
  ])));
}

async function compareVariants(tx, cpuMs, batches) {
  for (const variant of variants) await tx.query(variant.sql);
  const names = [MIGRATED, ...variants.map(({ name }) => name)];
  const perRound = new Map(names.map((name) => [name, []]));
  log(`\n== backend CPU per batch, every batch through each function in alternating order; ${ROUNDS} rounds ==`);
  for (let round = 1; round <= ROUNDS; round += 1) {
    const used = new Map(names.map((name) => [name, 0]));
    for (const [i, batch] of batches.entries()) {
      for (const name of roundOrder(names, i + round)) used.set(name, used.get(name) + (await replay(tx, cpuMs, name, batch)));
    }
    for (const name of names) perRound.get(name).push((1000 * used.get(name)) / batches.length);
    log(`round ${round}: ${names.map((name) => `${name} ${fmt(perRound.get(name).at(-1), 0)} µs`).join(', ')}`);
  }
  const reference = perRound.get(MIGRATED);
  log(`\n${formatTable(['function', 'median µs/batch', `÷ ${MIGRATED} (each round)`], names.map((name) => [
    name, fmt(median(perRound.get(name)), 0), perRound.get(name).map((value, i) => fmt(value / reference[i], 3)).join(' '),
  ]))}`);
}

async function main() {
  const product = await loadProduct();
  const adminUrl = serverUrl('postgres', await startPostgres({ log, settings: ['shared_preload_libraries=pg_stat_statements', 'pg_stat_statements.track=all'] }));
  const redisUrl = serverUrl('redis', await startRedis({ log }));
  const database = await createBenchDatabase(adminUrl, 'countersign_batches');
  const dir = await mkdtemp(join(tmpdir(), 'countersign-batches-'));
  const db = new product.PgDb({ connectionString: database.url });
  const authority = await startEvaluateAuthority({ databaseUrl: database.url, redisUrl, dir });
  try {
    const orgs = await createEvaluateOrgs(product, db, ORGS);
    await capture(db, { authority, orgs });
    const batches = await db.query(`SELECT evaluations::text, permits::text, events::text, recorded_at, genesis FROM captured_batches ORDER BY n LIMIT ${REPLAYED}`);
    await onOneConnection(database.url, async (tx, cpuMs) => {
      await perStatement(tx, cpuMs, batches);
      if (variants.length > 0) await compareVariants(tx, cpuMs, batches);
    });
  } finally {
    await authority.stop();
    await db.close().catch(() => undefined);
    await database.drop().catch((error) => log(`could not drop the database: ${error.message}`));
    await rm(dir, { recursive: true, force: true });
    await stopServers();
  }
}

main().catch((error) => {
  log(`store-batches failed: ${error?.stack ?? error}`);
  process.exitCode = 1;
});
