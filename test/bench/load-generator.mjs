#!/usr/bin/env node
/**
 * The proxy benchmark's load generator, run as its own process (`node test/bench/load-generator.mjs`)
 * so that its CPU and event loop are apart from every server it measures. It reads one JSON spec
 * on stdin and writes JSON lines on stdout: `{"event":"window-start"}` and `{"event":"window-end"}`
 * as the measured window opens and closes (the bench samples CPU and memory there), then
 * `{"event":"result", …}`.
 *
 * Spec:
 *   origin        http://127.0.0.1:<port>
 *   mode          "closed": `connections` clients, each sending its next request when the last
 *                 one answered; "open": `rate` requests per second on a fixed schedule, whatever
 *                 the answers, latency measured from each request's scheduled time, so a stall
 *                 counts against every request it delays (no coordinated omission)
 *   connections   keep-alive connections (closed: also the number of clients)
 *   rate          open loop only
 *   warmupMs, windowMs
 *   requests      pre-built [{method, path, headers, body?}] (body: a string, such as a JSON-RPC message)
 *   reuse         true: cycle over `requests`; false: each is sent once (a fresh permit per
 *                 request), and running out ends the measured window early (`exhausted`)
 *   expect        {status, body}: anything else is an error (without `body`, any body with that status)
 *
 * Result: requests (started in the window and answered as expected), perSecond, p50 and p99 in ms
 * (nearest rank), errors (warm-up included: there must be none) by kind with an example,
 * windowSeconds, exhausted, and the generator's own CPU during the window.
 */
import { once } from 'node:events';
import { performance } from 'node:perf_hooks';
import { Pool } from 'undici';
import { percentile } from './bench-common.mjs';

const REQUEST_TIMEOUT_MS = 10_000;
/** A scenario that keeps failing stops early rather than spinning for its whole window. */
const MAX_ERRORS = 1_000;

const emit = (message) => process.stdout.write(`${JSON.stringify(message)}\n`);

async function readSpec() {
  const chunks = [];
  for await (const chunk of process.stdin) chunks.push(chunk);
  return JSON.parse(Buffer.concat(chunks).toString('utf8'));
}

/** Latencies of requests that started in the window, and every error. */
function createRecorder(windowStart, windowEnd) {
  const recorder = { latencies: [], errors: 0, ok: 0, errorKinds: new Map(), windowStart, windowEnd, exhaustedAt: null };
  recorder.record = (startedAt, finishedAt, error) => {
    if (error) {
      recorder.errors += 1;
      const seen = recorder.errorKinds.get(error.kind);
      if (seen) seen.count += 1;
      else recorder.errorKinds.set(error.kind, { count: 1, example: error.example.slice(0, 300) });
      return;
    }
    recorder.ok += 1;
    if (startedAt >= windowStart && startedAt < recorder.windowEnd) recorder.latencies.push(finishedAt - startedAt);
  };
  return recorder;
}

/** One request; resolves null when the answer is the expected one, else what went wrong. */
function sender(pool, expect) {
  return async ({ method, path, headers, body }) => {
    try {
      const response = await pool.request({ method, path, headers, body, headersTimeout: REQUEST_TIMEOUT_MS, bodyTimeout: REQUEST_TIMEOUT_MS });
      const text = await response.body.text();
      if (response.statusCode === expect.status && (expect.body === undefined || text === expect.body)) return null;
      let code = '';
      try {
        code = JSON.parse(text).reason ?? JSON.parse(text).error ?? '';
      } catch {
        // not an error envelope: the example shows what it was
      }
      return { kind: `HTTP ${response.statusCode} ${code}`.trim(), example: text };
    } catch (error) {
      return { kind: `request failed ${error.code ?? error.name}`, example: String(error.message) };
    }
  };
}

/**
 * Hands out requests in order. Without reuse each is sent once, and running out marks the moment,
 * so the measured window ends there: a shorter window, never a request sent twice.
 */
function requestSource(spec, recorder) {
  let next = 0;
  return () => {
    if (next < spec.requests.length) return spec.requests[next++];
    if (spec.reuse) {
      next = 1;
      return spec.requests[0];
    }
    recorder.exhaustedAt ??= performance.now();
    recorder.windowEnd = Math.min(recorder.windowEnd, recorder.exhaustedAt);
    return null;
  };
}

/**
 * Tells the bench when the measured window opens and closes (it samples CPU and memory then) and
 * takes this process's CPU at the same moments. A window cut short by running out of requests
 * closes at the next tick after that.
 */
function windowEvents(recorder, stopped) {
  const cpu = {};
  let phase = 'before';
  const open = () => {
    cpu.start = process.cpuUsage();
    cpu.startAt = performance.now();
    phase = 'open';
    emit({ event: 'window-start' });
  };
  const close = () => {
    if (phase === 'before') open();
    if (phase !== 'open') return;
    cpu.end = process.cpuUsage();
    cpu.endAt = performance.now();
    phase = 'closed';
    emit({ event: 'window-end' });
  };
  void (async () => {
    while (phase !== 'closed' && !stopped()) {
      const now = performance.now();
      if (phase === 'before' && now >= recorder.windowStart) open();
      if (phase === 'open' && now >= recorder.windowEnd) close();
      const due = phase === 'before' ? recorder.windowStart : recorder.windowEnd;
      await sleep(Math.min(50, Math.max(1, due - now)));
    }
  })();
  return { cpu, close };
}

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

async function closedLoop(spec, send, recorder, stopped) {
  const take = requestSource(spec, recorder);
  const client = async () => {
    while (performance.now() < recorder.windowEnd && !stopped()) {
      const request = take();
      if (request === null) return;
      const startedAt = performance.now();
      const error = await send(request);
      recorder.record(startedAt, performance.now(), error);
    }
  };
  await Promise.all(Array.from({ length: spec.connections }, client));
}

/** Request i is due at start + i/rate; sent when the timer loop reaches it, timed from its due time. */
async function openLoop(spec, send, recorder, stopped, start) {
  const take = requestSource(spec, recorder);
  const interval = 1000 / spec.rate;
  const total = Math.floor(((spec.warmupMs + spec.windowMs) / 1000) * spec.rate);
  const inFlight = new Set();
  for (let i = 0; i < total && !stopped(); ) {
    const now = performance.now();
    for (; i < total && start + i * interval <= now; i += 1) {
      const request = take();
      if (request === null) {
        i = total;
        break;
      }
      const dueAt = start + i * interval;
      const pending = send(request).then((error) => recorder.record(dueAt, performance.now(), error));
      inFlight.add(pending);
      pending.finally(() => inFlight.delete(pending));
    }
    await sleep(1);
  }
  await Promise.all(inFlight);
}

async function main() {
  const spec = await readSpec();
  const expect = spec.expect;
  // Keep-alive, no pipelining: a request waits only for its own answer.
  const pool = new Pool(spec.origin, { connections: spec.connections, pipelining: 1, keepAliveTimeout: 60_000 });
  const start = performance.now();
  const recorder = createRecorder(start + spec.warmupMs, start + spec.warmupMs + spec.windowMs);
  let stop = false;
  const stopped = () => stop || recorder.errors >= MAX_ERRORS;
  process.once('SIGTERM', () => (stop = true));
  const events = windowEvents(recorder, stopped);
  const send = sender(pool, expect);
  if (spec.mode === 'open') await openLoop(spec, send, recorder, stopped, start);
  else await closedLoop(spec, send, recorder, stopped);
  events.close();
  await pool.close();

  const sorted = Float64Array.from(recorder.latencies).sort();
  const windowSeconds = Math.max(0, recorder.windowEnd - recorder.windowStart) / 1000;
  const { cpu } = events;
  const cpuMicros = cpu.end.user + cpu.end.system - cpu.start.user - cpu.start.system;
  const cpuSeconds = (cpu.endAt - cpu.startAt) / 1000;
  emit({
    event: 'result',
    requests: sorted.length,
    perSecond: windowSeconds > 0 ? sorted.length / windowSeconds : null,
    p50: percentile(sorted, 0.5),
    p99: percentile(sorted, 0.99),
    ok: recorder.ok,
    errors: recorder.errors,
    errorKinds: [...recorder.errorKinds].map(([kind, { count, example }]) => ({ kind, count, example })),
    windowSeconds,
    exhausted: recorder.exhaustedAt !== null,
    cpuPercent: cpuSeconds > 0 ? cpuMicros / 1e4 / cpuSeconds : null,
  });
}

// Flush stdout before exiting: the result line is the whole point.
main().then(
  async () => {
    if (process.stdout.writableLength > 0) await once(process.stdout, 'drain');
    process.exit(0);
  },
  (error) => {
    process.stderr.write(`load generator: ${error?.stack ?? error}\n`);
    process.exit(1);
  },
);
