/**
 * CPU time and resident memory of the bench's processes, read from /proc (Linux). Elsewhere the
 * functions answer NaN or nothing, and the bench prints those figures blank.
 *
 * @example
 *   const before = cpuTimes([pid]);
 *   …
 *   const seconds = cpuBetween(before, cpuTimes([pid]));
 */
import { spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { performance } from 'node:perf_hooks';

let ticksPerSecond;
function clockTicks() {
  if (ticksPerSecond === undefined) {
    const { stdout } = spawnSync('getconf', ['CLK_TCK'], { encoding: 'utf8' });
    ticksPerSecond = Number(stdout) > 0 ? Number(stdout) : 100;
  }
  return ticksPerSecond;
}

/** A process and its direct children (nginx's master and its worker). */
export function withChildren(pid) {
  try {
    const children = readFileSync(`/proc/${pid}/task/${pid}/children`, 'utf8').trim().split(/\s+/).filter(Boolean).map(Number);
    return [pid, ...children];
  } catch {
    return [pid];
  }
}

/** CPU seconds (user + system) of one process, NaN when it is gone or /proc is not there. */
function processCpuSeconds(pid) {
  try {
    // The command name may hold spaces: the fields after it start past the closing parenthesis.
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    return (Number(fields[11]) + Number(fields[12])) / clockTicks();
  } catch {
    return Number.NaN;
  }
}

/**
 * CPU seconds of each of `pids` and their children (nginx's worker, Postgres's backends), by pid,
 * for `cpuBetween`. Empty where /proc is not there.
 */
export function cpuTimes(pids) {
  const times = new Map();
  for (const pid of pids.flatMap(withChildren)) {
    const seconds = processCpuSeconds(pid);
    if (Number.isFinite(seconds)) times.set(pid, seconds);
  }
  return times;
}

/**
 * CPU seconds spent between two `cpuTimes`. A process in `after` only started in between (a
 * Postgres backend opening a connection), so all of its CPU counts; one in `before` only ended in
 * between, and what it spent since `before` is lost with it. NaN when `after` holds no process.
 */
export function cpuBetween(before, after) {
  let seconds = 0;
  for (const [pid, end] of after) seconds += end - (before.get(pid) ?? 0);
  return after.size > 0 ? seconds : Number.NaN;
}

/**
 * CPU seconds the whole machine has spent busy since it started (every process and the kernel;
 * idle and I/O wait left out), NaN where /proc/stat is not there. Two readings apart tell whether
 * a window used every core, which closed-loop throughput on a shared machine depends on.
 */
export function machineBusySeconds() {
  try {
    const [, ...fields] = readFileSync('/proc/stat', 'utf8').split('\n', 1)[0].trim().split(/\s+/);
    // user nice system idle iowait irq softirq steal; guest time is already counted in user and nice.
    const ticks = fields.slice(0, 8).map(Number);
    const total = ticks.reduce((sum, value) => sum + value, 0);
    return (total - ticks[3] - ticks[4]) / clockTicks();
  } catch {
    return Number.NaN;
  }
}

/** CPU seconds of a process and its children (for a quick look; `cpuTimes` for a window). */
export function cpuSeconds(pid) {
  const times = cpuTimes([pid]);
  return times.size === 0 ? Number.NaN : [...times.values()].reduce((a, b) => a + b, 0);
}

/** Resident memory in bytes (VmRSS), NaN where /proc is not there. */
export function rssBytes(pid) {
  try {
    const match = /^VmRSS:\s+(\d+) kB$/m.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
    return match ? Number(match[1]) * 1024 : Number.NaN;
  } catch {
    return Number.NaN;
  }
}

/** Samples a process's resident memory until stopped: start, max and end, in bytes. */
export function rssSampler(pid, everyMs = 250) {
  const samples = [];
  const take = () => {
    const rss = rssBytes(pid);
    if (Number.isFinite(rss)) samples.push({ at: performance.now(), rss });
  };
  take();
  const timer = setInterval(take, everyMs);
  return {
    samples,
    stop() {
      clearInterval(timer);
      take();
      return { start: samples[0]?.rss ?? Number.NaN, max: Math.max(...samples.map((s) => s.rss)), end: samples.at(-1)?.rss ?? Number.NaN };
    },
  };
}
