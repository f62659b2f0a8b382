/**
 * The OpenAPI document lints clean with Redocly's `recommended-strict` rules (plus those in
 * test/openapi/redocly.yaml), run as a real `redocly lint` process, offline. A document with a
 * known defect fails the same lint, so a passing run means the rules ran.
 */
import { execFile } from 'node:child_process';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import t from 'tap';
import { openApiDocument } from '../../authority/openapi/document.js';
import { createTestAuthority } from '../helpers/authority.js';
import { appBackends } from '../helpers/backends.js';
import { repoPath } from '../helpers/repo.js';

const cli = join(dirname(createRequire(import.meta.url).resolve('@redocly/cli/package.json')), 'bin', 'cli.js');
const config = repoPath('test', 'openapi', 'redocly.yaml');

interface LintReport {
  totals: { errors: number; warnings: number };
  problems: Array<{ ruleId: string; message: string; location?: Array<{ pointer?: string }> }>;
}

/** Runs `redocly lint --format=json` on `document`; telemetry and update checks off, so nothing leaves the machine. */
async function lint(document: unknown, dir: string, name: string): Promise<LintReport> {
  const file = join(dir, name);
  await writeFile(file, JSON.stringify(document, null, 2));
  const env = { ...process.env, REDOCLY_TELEMETRY: 'off', REDOCLY_SUPPRESS_UPDATE_NOTICE: 'true', NO_COLOR: '1' };
  const stdout = await new Promise<string>((resolve, reject) => {
    // A lint with problems exits 1; its report is still on stdout.
    execFile(process.execPath, [cli, 'lint', file, '--config', config, '--format=json'], { env, maxBuffer: 16 * 1024 * 1024 }, (error, out, err) => {
      if (out.trim().startsWith('{')) resolve(out);
      else reject(new Error(`redocly lint produced no report: ${error?.message ?? ''}\n${err}`));
    });
  });
  return JSON.parse(stdout) as LintReport;
}

t.test('redocly lint passes the document and fails a broken one', async (t) => {
  const opened = await appBackends()[0]!.open();
  const authority = await createTestAuthority(opened);
  const dir = await mkdtemp(join(tmpdir(), 'countersign-openapi-'));
  t.teardown(async () => {
    await authority.close();
    await opened.cleanup();
    await rm(dir, { recursive: true, force: true });
  });
  const document = openApiDocument(authority.app) as Record<string, any>;

  const report = await lint(document, dir, 'openapi.json');
  const summary = report.problems.map((problem) => `${problem.ruleId}: ${problem.message} at ${problem.location?.[0]?.pointer ?? '?'}`);
  t.same(summary, [], 'no problems');
  t.same(report.totals, { ...report.totals, errors: 0, warnings: 0 }, 'no errors and no warnings');

  const broken = structuredClone(document);
  delete broken.paths['/v1/evaluate'].post.summary;
  broken.components.schemas.Unused = { type: 'string' };
  const refused = await lint(broken, dir, 'broken.json');
  const rules = new Set(refused.problems.map((problem) => problem.ruleId));
  t.ok(refused.totals.errors >= 2, 'a broken document has errors');
  t.ok(rules.has('operation-summary'), 'a missing summary is reported');
  t.ok(rules.has('no-unused-components'), 'an unused component is reported');
});
