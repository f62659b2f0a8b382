/**
 * Prints the proxy benchmark's figures: the closed- and open-loop tables, the ratios, the p99 each
 * server adds over the bare upstream at the same rate, the proxy's memory, the soak, the floor of
 * an enforced request (floor-bench.mjs), and the targets with PASS/MISS. Figures only: whether
 * the run failed is decided elsewhere.
 *
 * @example
 *   report(console.log, { rows, rss, soak, nginx: true, rate: 1000, probes, floor });
 */
import { availableParallelism } from 'node:os';
import { fmt, formatTable, percent } from './bench-common.mjs';
import { FLOOR_TARGET, floorLines } from './floor-bench.mjs';

export const TARGETS = {
  /** The enforced route's proxy CPU per request, at most this share of the naive gate's. */
  enforceCpuOfNaive: 0.8,
  /** …and at most this many times the floor (floor-bench.mjs). */
  enforceCpuOfFloor: FLOOR_TARGET,
  /** Closed-loop throughput of the enforced route, at least this many times the naive gate's. */
  enforceThroughputOfNaive: 1.25,
  /** The p99 the enforced route adds at the open-loop rate, at most this many times the naive gate's. */
  enforceAddedP99OfNaive: 1.5,
  passThroughOfNginx: 0.8,
  /** Pass-through throughput, at least this share of its bare engine's (undici `dispatch`, same upstream, same load). */
  passThroughOfEngine: 0.8,
  /** The p99 pass-through adds, at most its bare engine's added p99 plus this. */
  passAddedP99OverEngineMs: 0.3,
  /** The p99 pass-through adds, at most nginx's added p99 plus this. */
  passAddedP99OverNginxMs: 0.3,
  rssMaxBytes: 120 * 2 ** 20,
  /** RSS at the end of the soak over its first-minute value, at most this much higher. */
  soakGrowth: 0.1,
};

/** CPU (in % of one core) spent outside every process the bench knows of that means another workload. */
const OTHER_LOAD_WARNING = 25;

const mb = (bytes) => `${fmt(bytes / 2 ** 20, 1)} MB`;
const verdict = (pass) => (pass ? 'PASS' : 'MISS');

/** A process's CPU per request in µs (`process`: a key of the row's `cpu`), from its share of a core over the window. */
export const cpuPerRequest = (row, process) => (row.cpu[process] * 1e4) / row.perSecond;

/** The measured server's CPU per request in µs: steadier than throughput when the machine is shared. */
export const perRequest = (row) => cpuPerRequest(row, 'server');

export function table(rows) {
  const header = ['scenario', 'load', 'requests', 'per s', 'p50 ms', 'p99 ms', 'errors', 'server µs/req', 'server cpu', 'upstream cpu', 'authority cpu', 'redis+pg cpu', 'gen cpu', 'other cpu', 'machine busy'];
  const cells = rows.map((r) => [
    r.name, r.load, String(r.requests), fmt(r.perSecond, 0), fmt(r.p50, 2), fmt(r.p99, 2), String(r.errors),
    fmt(perRequest(r), 0), percent(r.cpu.server), percent(r.cpu.upstream), percent(r.cpu.authority), percent(r.cpu.stores), percent(r.cpu.generator), percent(r.cpu.other), percent(r.cpu.machine),
  ]);
  return formatTable(header, cells, 2);
}

/** "a / b = r" for two rows' throughput, or why it cannot be said. */
function ratio(a, b) {
  if (!a || !b) return 'not measured';
  return `${fmt(a.perSecond, 0)}/s ÷ ${fmt(b.perSecond, 0)}/s = ${fmt(a.perSecond / b.perSecond, 2)}`;
}

function addedP99(open, name) {
  const row = open[name];
  const direct = open['direct upstream'];
  return row && direct ? row.p99 - direct.p99 : Number.NaN;
}

function engineComparison(log, closed, open) {
  const engines = ['http-proxy-3', 'undici request', 'undici dispatch']
    .map((name) => ({ name, row: closed[`${name} pass-through`], openRow: open[`${name} pass-through`] }))
    .sort((a, b) => b.row.perSecond - a.row.perSecond);
  log('forwarding engines (bare pass-through, same upstream, same load; "undici dispatch" is what proxy/forward.ts does):');
  for (const { name, row, openRow } of engines) {
    log(`  ${name.padEnd(15)} ${fmt(row.perSecond, 0).padStart(6)}/s closed loop, ${fmt(perRequest(row), 0)} µs cpu/request, p99 ${fmt(row.p99, 2)} ms; at ${openRow?.load ?? '-'}: p99 ${fmt(openRow?.p99, 2)} ms`);
  }
  const [first, second] = engines;
  log(`  → ${first.name} is the fastest: ${fmt(first.row.perSecond / second.row.perSecond, 2)}× ${second.name}'s throughput (runs vary: compare a few before choosing)`);
}

function soakLines(log, soak) {
  log('');
  log(`soak: countersign enforce at ${soak.rate}/s for ${soak.seconds} s, fresh permits minted alongside (latency here is not comparable to the rows above):`);
  for (const { minute, seconds, rss, row } of soak.minutes) {
    log(`  minute ${minute}${seconds < 60 ? ` (${seconds} s)` : ''}: proxy RSS ${mb(rss)}; ${row.requests} requests, p50 ${fmt(row.p50, 2)} ms, p99 ${fmt(row.p99, 2)} ms, ${row.errors} errors`);
  }
  log(`  RSS sampled every second: start ${mb(soak.rss.start)}, max ${mb(soak.rss.max)}, end ${mb(soak.rss.end)}; waited ${fmt(soak.waitedMs / 1000, 1)} s in all for permits between segments`);
}

function targetLines(log, { closed, open, rss, soak, nginx, rate, floorSum }) {
  const pass = closed['countersign pass-through'];
  const enforce = closed['countersign enforce'];
  const naive = closed['naive gate'];
  log('');
  log('targets (ratios within this run):');
  const cpuOfNaive = perRequest(enforce) / perRequest(naive);
  log(`  enforce, proxy CPU per request <= ${TARGETS.enforceCpuOfNaive}× the naive gate's: ${fmt(perRequest(enforce), 0)} µs ÷ ${fmt(perRequest(naive), 0)} µs = ${fmt(cpuOfNaive, 2)}×  ${verdict(cpuOfNaive <= TARGETS.enforceCpuOfNaive)}`);
  if (floorSum !== undefined) {
    const cpuOfFloor = perRequest(enforce) / floorSum;
    log(`  enforce, proxy CPU per request <= ${TARGETS.enforceCpuOfFloor}× the floor: ${fmt(perRequest(enforce), 0)} µs ÷ ${fmt(floorSum, 0)} µs = ${fmt(cpuOfFloor, 2)}×  ${verdict(cpuOfFloor <= TARGETS.enforceCpuOfFloor)}`);
  }
  const overNaive = enforce.perSecond / naive.perSecond;
  log(`  enforce, closed-loop throughput >= ${TARGETS.enforceThroughputOfNaive}× the naive gate's: ${fmt(overNaive, 2)}×  ${verdict(overNaive >= TARGETS.enforceThroughputOfNaive)}`);
  const addedEnforce = addedP99(open, 'countersign enforce');
  const addedNaive = addedP99(open, 'naive gate');
  const enforceP99Pass = addedEnforce <= TARGETS.enforceAddedP99OfNaive * addedNaive;
  log(`  enforce, added p99 at ${rate}/s <= ${TARGETS.enforceAddedP99OfNaive}× the naive gate's (${fmt(addedNaive, 2)} ms): ${fmt(addedEnforce, 2)} ms  ${verdict(enforceP99Pass)}`);
  const addedPass = addedP99(open, 'countersign pass-through');
  if (nginx) {
    const share = pass.perSecond / closed.nginx.perSecond;
    log(`  pass-through throughput >= ${TARGETS.passThroughOfNginx * 100} % of nginx's: ${fmt(share * 100, 0)} %  ${verdict(share >= TARGETS.passThroughOfNginx)}`);
    const addedNginx = addedP99(open, 'nginx');
    log(`  pass-through, added p99 at ${rate}/s <= nginx's (${fmt(addedNginx, 2)} ms) + ${TARGETS.passAddedP99OverNginxMs} ms: ${fmt(addedPass, 2)} ms  ${verdict(addedPass <= addedNginx + TARGETS.passAddedP99OverNginxMs)}`);
  } else {
    log(`  pass-through against nginx (throughput >= ${TARGETS.passThroughOfNginx * 100} %, added p99 <= nginx's + ${TARGETS.passAddedP99OverNginxMs} ms): not measured (nginx not installed)`);
  }
  const engine = closed['undici dispatch pass-through'];
  if (engine) {
    const share = pass.perSecond / engine.perSecond;
    log(`  pass-through throughput >= ${TARGETS.passThroughOfEngine}× its bare engine's (undici dispatch): ${ratio(pass, engine)}  ${verdict(share >= TARGETS.passThroughOfEngine)}`);
    const addedEngine = addedP99(open, 'undici dispatch pass-through');
    log(`  pass-through, added p99 at ${rate}/s <= its engine's (${fmt(addedEngine, 2)} ms) + ${TARGETS.passAddedP99OverEngineMs} ms: ${fmt(addedPass, 2)} ms  ${verdict(addedPass <= addedEngine + TARGETS.passAddedP99OverEngineMs)}`);
  }
  const maxRss = Math.max(rss.max, soak?.rss.max ?? 0);
  log(`  proxy RSS <= ${mb(TARGETS.rssMaxBytes)}: max ${mb(maxRss)}  ${verdict(maxRss <= TARGETS.rssMaxBytes)}`);
  if (soak && soak.minutes.length >= 2) {
    const first = soak.minutes[0].rss;
    const growth = (soak.minutes.at(-1).rss - first) / first;
    const flat = growth <= TARGETS.soakGrowth;
    const bounded = soak.rss.max <= TARGETS.rssMaxBytes;
    log(`  RSS flat over the ${soak.seconds} s soak, within ${mb(TARGETS.rssMaxBytes)}: end ${growth >= 0 ? '+' : ''}${fmt(growth * 100, 1)} % against minute 1 ` +
      `(${flat ? 'flat' : `grew more than ${TARGETS.soakGrowth * 100} %`}), max ${mb(soak.rss.max)}  ${verdict(flat && bounded)}${soak.seconds < 300 ? ' (shorter than the 5 minutes of the target)' : ''}`);
  } else {
    log('  RSS flat over 5 minutes: not measured (BENCH_SOAK_SECONDS=300 runs the soak)');
  }
}

export function report(log, { rows, rss, soak, nginx, rate, probes, floor }) {
  const { closed, open } = rows;
  const ordered = (set) => Object.values(set);
  log('');
  log('closed loop (throughput):');
  log(table(ordered(closed)));
  log('');
  log(`open loop at ${rate}/s (latency from each request's scheduled send time):`);
  log(table(ordered(open)));
  log(`(server µs/req = the measured server's CPU per request; cpu in % of one core during the window: server = the process measured (nginx: master + worker), upstream, authority (it drains the proxy's verification records into the audit log), redis+pg = the Redis and Postgres servers, gen = the load generator, other = the rest of the machine (the kernel's share of loopback traffic, and other work); machine busy in % of all ${availableParallelism()} cores)`);
  const disturbed = [...ordered(closed), ...ordered(open)].filter((r) => r.cpu.other > OTHER_LOAD_WARNING);
  if (disturbed.length > 0) {
    log(`warning: something else used the machine during ${disturbed.map((r) => `"${r.name}, ${r.load}" (${fmt(r.cpu.other, 0)} %)`).join(', ')}: these figures are low; run again on a quiet machine`);
  }
  log('');
  log('ratios (throughput, closed loop):');
  log(`  countersign pass-through / nginx:                ${ratio(closed['countersign pass-through'], closed.nginx)}`);
  log(`  countersign enforce / naive gate:                ${ratio(closed['countersign enforce'], closed['naive gate'])}`);
  log(`  countersign pass-through / bare undici dispatch: ${ratio(closed['countersign pass-through'], closed['undici dispatch pass-through'])} (the proxy's own cost beyond its engine)`);
  log(`  countersign enforce / pass-through:              ${ratio(closed['countersign enforce'], closed['countersign pass-through'])} (what verifying and consuming a permit costs)`);
  log('');
  engineComparison(log, closed, open);
  log('');
  log(`added p99 at ${rate}/s (p99 − direct upstream p99 at the same rate):`);
  for (const name of Object.keys(open).filter((n) => n !== 'direct upstream')) log(`  ${name.padEnd(30)} ${fmt(addedP99(open, name), 2)} ms`);
  log('');
  log(`proxy memory (RSS): ${mb(rss.idle)} after start; over the gated runs start ${mb(rss.start)}, max ${mb(rss.max)}, end ${mb(rss.end)}`);
  if (soak) soakLines(log, soak);
  const floorSum = floor ? floorLines(log, { floor, dispatchUs: perRequest(closed['undici dispatch pass-through']), enforceUs: perRequest(closed['countersign enforce']), composedUs: closed['composed floor'] && perRequest(closed['composed floor']) }) : undefined;
  targetLines(log, { closed, open, rss, soak, nginx, rate, floorSum });
  for (const row of [...ordered(closed), ...ordered(open), ...probes, ...(soak?.minutes.map((m) => m.row) ?? [])]) {
    for (const { kind, count, example } of row.errorKinds) log(`errors in "${row.name}" (${row.load}): ${count} × ${kind}, e.g. ${example}`);
  }
}
