/**
 * The proxy's memory over a long enforced run (`BENCH_SOAK_SECONDS`, e.g. 300 for the 5-minute
 * check): open loop at `BENCH_SOAK_RATE`, a fresh permit per request, in one-minute segments.
 * Permits live at most 300 s, so they cannot all be minted up front: each segment's are minted
 * while the one before it runs (which loads the machine: this run is about memory, not latency).
 * The proxy's resident memory is read every second and at the end of each segment.
 *
 * @example
 *   const soak = await runSoak({ proxy, measure, mint, options, log });
 *   soak.minutes; // [{ minute: 1, rss: 61_000_000, … }, …]
 */
import { rssBytes, rssSampler } from './proc-stats.mjs';
import { sleep } from './proxy-processes.mjs';

const SEGMENT_SECONDS = 60;

export async function runSoak({ proxy, measure, mint, options, log }) {
  const total = options.soakSeconds;
  const lengths = [];
  for (let left = total; left > 0; left -= SEGMENT_SECONDS) lengths.push(Math.min(SEGMENT_SECONDS, left));
  const batchFor = (seconds) => Math.ceil(seconds * options.soakRate) + 10;
  log(`running: soak, countersign enforce at ${options.soakRate}/s for ${total} s (${lengths.length} segments; each segment's permits are minted while the one before runs)`);

  // A mint that is not awaited yet must not become an unhandled rejection if a segment fails.
  const minting = (index) => {
    const pending = mint(`soak-${index + 1}`, batchFor(lengths[index]));
    pending.catch(() => undefined);
    return pending;
  };
  const sampler = rssSampler(proxy.pid, 1000);
  const minutes = [];
  let ok = 0;
  let errors = 0;
  let waitedMs = 0;
  let rss;
  try {
    let next = minting(0);
    for (let i = 0; i < lengths.length; i += 1) {
      const waitStarted = Date.now();
      const requests = await next;
      if (i > 0) waitedMs += Date.now() - waitStarted;
      if (i + 1 < lengths.length) next = minting(i + 1);
      const row = await measure({
        name: `soak ${i + 1}`, server: proxy, mode: 'open', rate: options.soakRate, requests, reuse: false,
        warmupMs: 0, windowMs: lengths[i] * 1000, settle: false,
      });
      ok += row.ok;
      errors += row.errors;
      minutes.push({ minute: i + 1, seconds: lengths[i], rss: rssBytes(proxy.pid), row });
      log(`  soak ${i + 1}/${lengths.length}: ${row.requests} requests, p99 ${row.p99?.toFixed(2)} ms, ${row.errors} errors, proxy RSS ${(minutes.at(-1).rss / 2 ** 20).toFixed(1)} MB`);
      // Let a segment's stragglers finish before the next generator opens its connections.
      await sleep(50);
    }
  } finally {
    rss = sampler.stop();
  }
  return { seconds: total, rate: options.soakRate, minutes, ok, errors, waitedMs, rss };
}
