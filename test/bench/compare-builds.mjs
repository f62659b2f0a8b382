/**
 * What proxy-compare.mjs and evaluate-compare.mjs share: their `LABEL=BUILD[@NODE_OPTIONS]`
 * arguments, their rounds (BENCH_ROUNDS, BENCH_SECONDS, BENCH_WARMUP_SECONDS, BENCH_PROCESS_WARMUP_SECONDS), the median they
 * report, the entries that run with tracing on (BENCH_TRACING) and what those export, and builds
 * of git revisions, each checked out into a temporary worktree and compiled there with this
 * checkout's node_modules.
 *
 * @example
 *   const entries = process.argv.slice(2).map(parseEntry); // [{ label, build, nodeOptions }]
 *   const builds = createBuilds({ log, onInterrupt: (code) => (interrupted ||= code) });
 *   for (const entry of entries) entry.cli = builds.cliOf(entry.build);
 *   …
 *   builds.cleanUp(); // removes the worktrees
 */
import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync, symlinkSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { request } from 'undici';
import { percentile, setting } from './bench-common.mjs';
import { CLI } from './proxy-processes.mjs';

const root = resolve(dirname(fileURLToPath(import.meta.url)), '..', '..');

/** Rounds of every build, and each run's measured window and warm-up in seconds, from the environment. */
export const ROUNDS = setting('BENCH_ROUNDS', 3, { min: 1, max: 50, integer: true });
export const SECONDS = setting('BENCH_SECONDS', 4, { min: 0.5, max: 60 });
export const WARMUP = setting('BENCH_WARMUP_SECONDS', 1, { min: 0, max: 30 });
/** Seconds of discarded load on each freshly started server before its first run (see test/bench/README.md). */
export const PROCESS_WARMUP = setting('BENCH_PROCESS_WARMUP_SECONDS', 10, { min: 0, max: 120 });

/**
 * The order of `entries` in round `round` (from 1): as given in odd rounds, reversed in even ones.
 * In two 4-round runs of the same pair of builds on the enforced route, whichever build went first
 * in every round came out 6–9 % ahead. Alternating keeps such an effect of the position from
 * favouring one entry: with an even number of rounds each runs in each position equally often.
 */
export const roundOrder = (entries, round) => (round % 2 === 1 ? entries : [...entries].reverse());

/** The nearest-rank median of the finite values (with an even count, the lower of the middle two). */
export const median = (values) => percentile(values.filter(Number.isFinite).sort((a, b) => a - b), 0.5);

/** `base=HEAD~1@--max-semi-space-size=4` → `{ label: 'base', build: 'HEAD~1', nodeOptions: '--max-semi-space-size=4' }`. */
export function parseEntry(arg) {
  const match = /^([\w.-]+)=([^@]+)(?:@(.*))?$/.exec(arg);
  if (!match) throw new Error(`not LABEL=BUILD[@NODE_OPTIONS]: ${arg}`);
  return { label: match[1], build: match[2], nodeOptions: match[3] };
}

// ── Tracing on and off (BENCH_TRACING) ────────────────────────────────────────────────────────

/**
 * The labels of BENCH_TRACING=LABEL[,LABEL]: the entries whose process runs with OpenTelemetry
 * tracing on. Null (after saying why) when it names a label no entry has.
 */
export function tracedLabels(entries, log = (line) => process.stdout.write(`${line}\n`)) {
  const labels = new Set((process.env.BENCH_TRACING ?? '').split(',').map((label) => label.trim()).filter(Boolean));
  const unknown = [...labels].filter((label) => !entries.some((entry) => entry.label === label));
  if (unknown.length === 0) return labels;
  log(`BENCH_TRACING names no entry: ${unknown.join(', ')}`);
  return null;
}

/**
 * The variables that turn a process's tracing on: spans to the OTLP sink (bench-servers.mjs
 * `otlp-sink`), everything else the SDK's defaults (OTLP/HTTP protobuf, batches of up to 512
 * spans every 5 s or sooner when full, a queue of 2048).
 */
export const tracingEnv = (sink, serviceName) => ({ OTEL_EXPORTER_OTLP_ENDPOINT: sink.url, OTEL_SERVICE_NAME: serviceName });

/** The sink's counters: `{exports, bytes}`. */
export async function sinkStats(sink) {
  const response = await request(`${sink.url}/__bench/stats`);
  return response.body.json();
}

/**
 * What one traced run sent, from the sink's counters before and after it, and the spans the SDK
 * dropped because its queue was full (it warns with the count, in the process's log).
 */
export function exportSummary(before, after, output) {
  const dropped = [...output.matchAll(/Dropped (\d+) spans because maxQueueSize reached/g)].reduce((sum, match) => sum + Number(match[1]), 0);
  const megabytes = ((after.bytes - before.bytes) / 2 ** 20).toFixed(1);
  return `${after.exports - before.exports} exports, ${megabytes} MB to the OTLP sink${dropped > 0 ? `; the SDK dropped ${dropped} spans (queue full)` : ''}`;
}

/**
 * `cliOf(build)`: dist/bin/countersign.js of `.` (this checkout's) or of a git revision, built in
 * a worktree; `cleanUp()` removes the worktrees. A Ctrl-C during a checkout or a build reaches
 * git or tsc too: it is reported through `onInterrupt(exitCode)` and thrown as an error.
 */
export function createBuilds({ log, onInterrupt = () => {} }) {
  const worktrees = [];
  const runSync = (command, args, options) => {
    try {
      execFileSync(command, args, options);
    } catch (error) {
      // The signal handler cannot run while this process waits here.
      if (!error.signal) throw error;
      onInterrupt(error.signal === 'SIGTERM' ? 143 : 130);
      throw new Error(`${command.split('/').pop()} was stopped by ${error.signal}`);
    }
  };
  return {
    cliOf(build) {
      if (build === '.') return CLI;
      const dir = mkdtempSync(join(tmpdir(), 'countersign-compare-'));
      rmSync(dir, { recursive: true });
      // Listed before it exists, so an interrupted checkout or build is removed too.
      worktrees.push(dir);
      runSync('git', ['worktree', 'add', '--detach', dir, build], { cwd: root, stdio: ['ignore', 'ignore', 'pipe'] });
      symlinkSync(join(root, 'node_modules'), join(dir, 'node_modules'));
      log(`building ${build} in ${dir}`);
      runSync(join(root, 'node_modules', '.bin', 'tsc'), ['-p', 'tsconfig.build.json'], { cwd: dir, stdio: 'inherit' });
      return join(dir, 'dist', 'bin', 'countersign.js');
    },
    cleanUp() {
      for (const dir of worktrees) {
        try {
          execFileSync('git', ['worktree', 'remove', '--force', dir], { cwd: root, stdio: 'ignore' });
        } catch {
          rmSync(dir, { recursive: true, force: true });
        }
      }
    },
  };
}
