/**
 * `countersign policy test | replay`: policies in CI.
 *
 *   policy test FILE|DIR… [--junit FILE] [--format text|json]
 *       runs the cases of `*.tests.yaml` files offline; exit 0 all pass, 1 a case fails,
 *       2 a file is invalid or its policy does not compile.
 *   policy replay --policy FILE [--since 24h] [--org ORG] [--limit N] [--config FILE] [--format text|json]
 *       decides the evaluations recorded since then again under a candidate policy and reports
 *       every decision that would change; exit 0 none, 1 some, 2 a usage error. Reads only.
 *
 * @example
 *   const code = await runPolicyCommand(['test', 'config/policies/default.tests.yaml', '--junit', 'policy-tests.xml'], io);
 *   const code = await runPolicyCommand(['replay', '--policy', 'candidate.yaml', '--since', '7d'], io);
 */
import { existsSync } from 'node:fs';
import { mkdir, readdir, stat, writeFile } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import { parseArgs } from 'node:util';
import { loadAuthorityConfig } from '../config.js';
import { findOrganization, listOrganizations } from '../orgs/organizations.js';
import { parseSince, replayEvaluations } from '../policy/replay/replay.js';
import { readOnly } from '../policy/replay/recorded.js';
import { replayText } from '../policy/replay/report.js';
import { compilePolicyFile, jsonReport, junitReport, loadTestSuite, PolicyTestFileError, runSuites, textReport, type TestSuite } from '../policy/testing/index.js';
import type { CompiledPolicy } from '../policy/types.js';
import type { Db } from '../store/db.js';
import { openDb } from '../store/open.js';
import { UsageError } from '../../shared/usage-error.js';
import type { CliIo } from './admin-commands.js';

const DEFAULT_LIMIT = 10_000;
const TEST_FILE = /\.tests\.(ya?ml|json)$/;

function format(value: string | undefined): 'text' | 'json' {
  if (value === undefined || value === 'text' || value === 'json') return value ?? 'text';
  throw new UsageError(`--format must be text or json, not "${value}"`);
}

/** The tests files named, a directory standing for every *.tests.yaml under it. */
async function testFiles(paths: string[]): Promise<string[]> {
  const files: string[] = [];
  for (const path of paths) {
    const info = await stat(path).catch(() => null);
    if (!info) throw new UsageError(`no such file or directory: ${path}`);
    if (!info.isDirectory()) {
      files.push(path);
      continue;
    }
    const found = (await readdir(path, { recursive: true }))
      .filter((entry) => TEST_FILE.test(entry) && !entry.split(/[\\/]/).includes('node_modules'))
      .sort()
      .map((entry) => join(path, entry));
    if (found.length === 0) throw new UsageError(`no *.tests.yaml files under ${path}`);
    files.push(...found);
  }
  return files;
}

async function runTests(args: string[], io: CliIo): Promise<number> {
  const { values, positionals } = parseArgs({
    args,
    allowPositionals: true,
    options: { junit: { type: 'string' }, format: { type: 'string' } },
  });
  const output = format(values.format);
  if (positionals.length === 0) throw new UsageError('policy test needs at least one tests file (FILE.tests.yaml) or directory');
  const suites: TestSuite[] = [];
  const problems: string[] = [];
  for (const file of await testFiles(positionals)) {
    try {
      suites.push(await loadTestSuite(file));
    } catch (error) {
      if (!(error instanceof PolicyTestFileError)) throw error;
      problems.push(error.message);
    }
  }
  if (problems.length > 0) throw new UsageError(problems.join('\n'));
  const results = runSuites(suites);
  if (output === 'json') io.out(JSON.stringify(jsonReport(results), null, 2));
  else for (const line of textReport(results)) io.out(line);
  if (values.junit) {
    // CI names a report folder (reports/policy.xml) that a fresh checkout does not have yet.
    await mkdir(dirname(values.junit), { recursive: true });
    await writeFile(values.junit, junitReport(results));
  }
  return results.failed > 0 ? 1 : 0;
}

/** The configured database, opened without migrating: replay must not change it. */
async function openForReading(configFile: string | undefined, env: NodeJS.ProcessEnv): Promise<Db> {
  const config = await loadAuthorityConfig({ file: configFile, env });
  if (!config.database_url && !existsSync(join(config.data_dir, 'pglite'))) {
    throw new UsageError(
      `no embedded database in ${config.data_dir} and no DATABASE_URL: point COUNTERSIGN_DATA_DIR (or --config) at the authority's data directory, or set DATABASE_URL`,
    );
  }
  return openDb({ databaseUrl: config.database_url, dataDir: config.data_dir });
}

async function runReplay(args: string[], io: CliIo): Promise<number> {
  const { values, positionals } = parseArgs({
    args,
    allowPositionals: true,
    options: {
      policy: { type: 'string' },
      since: { type: 'string' },
      org: { type: 'string' },
      limit: { type: 'string' },
      config: { type: 'string' },
      format: { type: 'string' },
    },
  });
  if (positionals.length > 0) throw new UsageError(`unexpected argument "${positionals[0]}"; the candidate policy goes in --policy FILE`);
  if (!values.policy) throw new UsageError('--policy FILE (the candidate policy) is required');
  const output = format(values.format);
  const since = parseSince(values.since ?? '24h', new Date());
  if (!since) throw new UsageError(`--since must be a duration such as 30m, 24h or 7d, or an ISO timestamp, not "${values.since}"`);
  const limit = values.limit === undefined ? DEFAULT_LIMIT : Number(values.limit);
  if (!Number.isSafeInteger(limit) || limit <= 0) throw new UsageError(`--limit must be a positive integer, not "${values.limit}"`);

  let candidate: CompiledPolicy;
  try {
    candidate = await compilePolicyFile(values.policy);
  } catch (error) {
    if (error instanceof PolicyTestFileError) throw new UsageError(error.message);
    throw error;
  }

  const db = await openForReading(values.config, io.env);
  try {
    const orgs = await readOnly(db, async (tx) => {
      const [schema] = await tx.query<{ ready: boolean }>("SELECT to_regclass('audit_events') IS NOT NULL AS ready");
      if (!schema?.ready) throw new UsageError('the database has no Countersign schema yet: run countersign migrate (or start the authority) first');
      if (values.org === undefined) {
        // Each organization has its own policy: a candidate is for one of them.
        const all = await listOrganizations(tx);
        if (all.length > 1) throw new UsageError(`the database holds ${all.length} organizations, each with its own policy: name the one the candidate is for with --org (${all.map((org) => org.name).join(', ')})`);
        return all;
      }
      const org = await findOrganization(tx, values.org);
      if (!org) throw new UsageError(`no organization "${values.org}"`);
      return [org];
    });
    const report = await replayEvaluations(db, candidate, { since, orgs, limit });
    if (output === 'json') io.out(JSON.stringify(report, null, 2));
    else for (const line of replayText(report, values.policy)) io.out(line);
    return report.totals.changed > 0 ? 1 : 0;
  } finally {
    await db.close();
  }
}

/**
 * `args`: everything after `countersign policy`. Usage errors throw UsageError (exit 2); the
 * commands' help comes from the CLI catalogue (bin/catalogue.ts), which answers `--help` first.
 */
export async function runPolicyCommand(args: string[], io: CliIo): Promise<number> {
  const [verb, ...rest] = args;
  if (verb === 'test') return runTests(rest, io);
  if (verb === 'replay') return runReplay(rest, io);
  throw new UsageError(`unknown command: policy ${verb} (policy test | policy replay)`);
}
