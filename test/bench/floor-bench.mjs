/**
 * The floor of an enforced request: what the proxy cannot avoid doing for it, each part measured
 * alone in the same run as the rows it is compared with, as CPU per operation.
 *
 *   Ed25519 verify     one permit-sized JWS signing input verified in a loop, with the engine the
 *                      proxy uses (dist/shared/permits/ed25519.js: libsodium where it loads,
 *                      else node:crypto)
 *   Redis round trip   one `SET key 1 PX 60000 NX` per operation from an ioredis client with
 *                      as many commands in flight as the bench has connections (consuming a
 *                      permit is one round trip)
 *   undici dispatch    a bare forwarder on undici's `dispatch` (what proxy/forward.ts uses) in
 *                      front of the bench upstream, driven closed loop: its CPU per request
 *
 * The first two run in a child process of their own (this file, run as a script), which reads its
 * own CPU from /proc over the measured window, so neither the bench process nor the other servers
 * count. The forwarder's CPU is read from /proc by the bench, as for every other row.
 *
 * `BENCH_ONLY=floor npm run bench` runs the three parts alone (runFloorBench); the full proxy
 * bench measures the first two with measureFloorParts and takes the third from its own
 * "undici dispatch pass-through" row.
 *
 * @example
 *   const floor = await measureFloorParts({ redisUrl, seconds: 5, connections: 32 });
 *   floorLines(log, { floor, dispatchUs: 110, enforceUs: 300 });
 */
import { generateKeyPairSync, sign } from 'node:crypto';
import { dirname, join, resolve as resolvePath } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { runToEnd } from '../support/servers.mjs';
import { fmt } from './bench-common.mjs';
import { cpuBetween, cpuSeconds, cpuTimes } from './proc-stats.mjs';
import { runGenerator, startBenchServer, stopAll } from './proxy-processes.mjs';

const SCRIPT = fileURLToPath(import.meta.url);
const ED25519_MODULE = join(resolvePath(dirname(SCRIPT), '..', '..'), 'dist', 'shared', 'permits', 'ed25519.js');

/** The floor's parts against the enforced route: at most this many times their sum. */
export const FLOOR_TARGET = 1.5;

/** Runs `step` (which answers a promise, or nothing) until `ms` have passed; resolves the count. */
async function loopFor(ms, step, inFlight) {
  const deadline = Date.now() + ms;
  let count = 0;
  const worker = async () => {
    while (Date.now() < deadline) {
      await step();
      count += 1;
    }
  };
  await Promise.all(Array.from({ length: inFlight }, worker));
  return count;
}

/**
 * `step` in a loop, `inFlight` at a time: 0.5 s of warm-up, then `seconds` measured. Resolves the
 * operations counted and this process's CPU per operation in µs, from /proc.
 */
export async function cpuPerStep(step, seconds, inFlight = 1) {
  await loopFor(500, step, inFlight);
  const cpu = cpuSeconds(process.pid);
  const ops = await loopFor(seconds * 1000, step, inFlight);
  return { ops, cpuUs: ((cpuSeconds(process.pid) - cpu) * 1e6) / ops };
}

/** A JWS signing input of a permit's size: a header and claims like the authority's. */
export function permitSigningInput() {
  const header = Buffer.from(JSON.stringify({ alg: 'EdDSA', typ: 'JWT', kid: 'k'.repeat(22) })).toString('base64url');
  const claims = {
    iss: 'countersign', aud: 'countersign:gate', sub: 'demo-agent', jti: 'p'.repeat(22), iat: 1_800_000_000, exp: 1_800_000_300,
    org: '00000000-0000-4000-8000-000000000000', act: 'demo.echo', bnd: 'b'.repeat(43), env: 'dev', tgt: { type: 'demo', id: 'order-42' },
  };
  return Buffer.from(`${header}.${Buffer.from(JSON.stringify(claims)).toString('base64url')}`);
}

/** The Ed25519 engine the product uses in this process (libsodium where it loads), from dist/. */
export async function productEd25519() {
  const { processEd25519 } = await import(pathToFileURL(ED25519_MODULE).href);
  return processEd25519();
}

/** Ed25519 verifies of a permit-sized signing input: the check every enforced request pays. */
async function verifyPart(seconds) {
  const ed25519 = await productEd25519();
  const { publicKey, privateKey } = generateKeyPairSync('ed25519');
  const input = permitSigningInput();
  const signature = sign(null, input, privateKey);
  const step = () => {
    if (!ed25519.verify(input, publicKey, signature)) throw new Error('the signature did not verify');
  };
  return Object.assign(await cpuPerStep(step, seconds), { engine: ed25519.engine });
}

/** Redis round trips with `connections` in flight, as the proxy's consumes are under load. */
async function redisPart(seconds, redisUrl, connections) {
  const { Redis } = await import('ioredis');
  const client = new Redis(redisUrl, { lazyConnect: true, maxRetriesPerRequest: 0 });
  await client.connect();
  try {
    let n = 0;
    const prefix = `floor:${process.pid}:`;
    const step = () => client.set(`${prefix}${n++}`, '1', 'PX', 60_000, 'NX');
    return await cpuPerStep(step, seconds, connections);
  } finally {
    client.disconnect();
  }
}

/**
 * Runs one part in a child process (`script part ...args`, `env` added to its environment) and
 * resolves the JSON it printed. What must not show in `ps` goes in `env`.
 */
export async function inChild(script, part, args, env = {}) {
  const run = await runToEnd(process.execPath, [script, part, ...args.map(String)], { env: { ...process.env, ...env } });
  if (run.status !== 0) throw new Error(`floor part "${part}" failed (exit ${run.status}): ${(run.error?.message ?? run.stderr).trim()}`);
  return JSON.parse(run.stdout);
}

/** The Redis round trip alone in its own process: `{ ops, cpuUs }` (an evaluation's floor has one too). */
export function measureRedisRoundTrip({ redisUrl, seconds, connections }) {
  return inChild(SCRIPT, 'redis', [seconds, redisUrl, connections]);
}

/** The Ed25519 verify and the Redis round trip, each alone in its own process, one after the other. */
export async function measureFloorParts({ redisUrl, seconds, connections }) {
  const verifyResult = await inChild(SCRIPT, 'verify', [seconds]);
  const redisResult = await measureRedisRoundTrip({ redisUrl, seconds, connections });
  return { verify: verifyResult, redis: redisResult };
}

/**
 * Prints the floor's parts, their sum, and the enforced route's CPU per request against it.
 * `dispatchUs` is the bare undici dispatch forwarder's CPU per request in the same run;
 * `composedUs`, when given, the "composed floor" server's (the three parts in one process).
 */
export function floorLines(log, { floor, dispatchUs, enforceUs, composedUs }) {
  const sum = floor.verify.cpuUs + floor.redis.cpuUs + dispatchUs;
  log('');
  log('the floor of an enforced request (CPU per operation, each part measured alone in this run):');
  log(`  Ed25519 verify (${floor.verify.engine})`.padEnd(44) + `${fmt(floor.verify.cpuUs, 0).padStart(6)} µs  (${floor.verify.ops} verifies)`);
  log(`  Redis round trip (SET NX PX, ioredis)     ${fmt(floor.redis.cpuUs, 0).padStart(6)} µs  (${floor.redis.ops} commands)`);
  log(`  forward with undici dispatch (bare)       ${fmt(dispatchUs, 0).padStart(6)} µs  (the "undici dispatch pass-through" row)`);
  log(`  sum                                       ${fmt(sum, 0).padStart(6)} µs`);
  if (enforceUs !== undefined) {
    const ratio = enforceUs / sum;
    log(`  countersign enforce, proxy CPU per request ${fmt(enforceUs, 0).padStart(5)} µs = ${fmt(ratio, 2)}× the floor`);
  }
  if (composedUs !== undefined) {
    log(`  the three parts composed in one server  ${fmt(composedUs, 0).padStart(5)} µs = ${fmt(composedUs / sum, 2)}× the floor (the "composed floor" row: no gate checks, records, metrics or logs)`);
  }
  return sum;
}

const UPSTREAM_BODY = '{"ok":true,"service":"bench-upstream"}';

/** The bare undici dispatch forwarder's CPU per request, closed loop, in front of the bench upstream. */
async function dispatchPart({ seconds, warmupSeconds, connections }) {
  const upstream = await startBenchServer('upstream', { body: UPSTREAM_BODY });
  const forwarder = await startBenchServer('undici-dispatch', { upstream: upstream.url });
  let before;
  let after;
  const result = await runGenerator(
    {
      origin: forwarder.url, mode: 'closed', connections, rate: 1, warmupMs: warmupSeconds * 1000, windowMs: seconds * 1000,
      requests: [{ method: 'GET', path: '/pass/item?page=1', headers: { accept: 'application/json' } }], reuse: true, expect: { status: 200, body: UPSTREAM_BODY },
    },
    { onWindowStart: () => (before = cpuTimes([forwarder.pid])), onWindowEnd: () => (after = cpuTimes([forwarder.pid])) },
  );
  return { cpuUs: (1e6 * cpuBetween(before, after)) / result.requests, perSecond: result.perSecond, errors: result.errors };
}

/** `BENCH_ONLY=floor`: the three parts alone, one after the other; resolves `{ ok }`. */
export async function runFloorBench({ redisUrl, seconds, warmupSeconds, connections, log }) {
  try {
    log(`the floor's parts, each alone: ${seconds} s per part, ${connections} in flight for Redis and the forwarder`);
    const dispatch = await dispatchPart({ seconds, warmupSeconds, connections });
    const floor = await measureFloorParts({ redisUrl, seconds, connections });
    floorLines(log, { floor, dispatchUs: dispatch.cpuUs });
    log(`  (the forwarder ran at ${fmt(dispatch.perSecond, 0)}/s; \`npm run bench\` prints the enforced route against this sum)`);
    return { ok: dispatch.errors === 0 };
  } finally {
    await stopAll();
  }
}

if (process.argv[1] === SCRIPT) {
  const [part, seconds, ...rest] = process.argv.slice(2);
  const result = part === 'verify' ? await verifyPart(Number(seconds)) : part === 'redis' ? await redisPart(Number(seconds), rest[0], Number(rest[1])) : null;
  if (!result) throw new Error(`unknown floor part: ${part}`);
  process.stdout.write(JSON.stringify(result));
}
