/**
 * The tap side of the generated bad input (bad-input-requests.ts): runs one share of the routes
 * in a process of its own and asserts on its report. That process runs without tap's coverage
 * and async-hook tracking, which about doubled the CPU of each of its tens of thousands of
 * requests; what it exercises is covered by the suites that assert on each answer.
 *
 * @example
 *   // test/property/bad-input-2.test.ts
 *   badBodies(2, BAD_INPUT_SHARES);
 */
import { extname } from 'node:path';
import { fileURLToPath } from 'node:url';
import t from 'tap';
import { runToEnd } from '../support/servers.mjs';
import type { ShareReport } from './bad-input-requests.js';

export { BAD_INPUT_SHARES, shareOf } from './bad-input-requests.js';

// Tens of thousands of requests per share: longer than .taprc's two minutes per file on a busy machine.
t.setTimeout(15 * 60_000);

/** The share's process: the same node and loader as this test (compiled .js, or .ts under a loader). */
function runShare(shard: number, shards: number) {
  const script = fileURLToPath(new URL(`./bad-input-requests${extname(fileURLToPath(import.meta.url))}`, import.meta.url));
  // '0': tap's process tracking (@tapjs/processinfo) takes no coverage in this process.
  return runToEnd(process.execPath, [...process.execArgv, script, String(shard), String(shards)], { env: { ...process.env, _TAPJS_PROCESSINFO_COVERAGE_: '0' } });
}

export function badBodies(shard: number, shards: number): void {
  t.test(`random bodies to every endpoint, share ${shard} of ${shards}: never a 5xx, always the envelope`, async (t) => {
    const run = await runShare(shard, shards);
    t.equal(run.status, 0, 'the share ran to its end', { stderr: run.stderr.slice(-4000), error: run.error?.message });
    if (run.status !== 0) return;
    const report = JSON.parse(run.stdout) as ShareReport;
    t.ok(report.routes.length > 0, `${report.routes.length} routes in this share`);
    for (const route of report.routes) {
      const what = route.method === 'GET' ? 'query strings' : 'bodies';
      t.equal(route.failure, null, `${route.method} ${route.url}: no 5xx, envelopes only`);
      t.equal(route.answered, route.runs, `${route.method} ${route.url}: ${route.runs} generated ${what} answered`, { statuses: route.statuses });
      // The rate limits are lifted for the share: a 429 would mean the bodies never reached validation.
      t.notOk(route.statuses['429'], `${route.method} ${route.url}: no request stopped at the rate limiter`);
    }
    t.equal(report.exportStatus, 200, 'the organization still exports');
    t.same(report.exportProblems, [], `the export of everything accepted verifies (${report.exportedEvents} events)`);
    t.same(report.openApiProblems, [], 'every answer to the generated input is one the OpenAPI document describes');
  });
}
