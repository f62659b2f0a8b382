/**
 * The replay store's guarantees under faults (single use survives the store's faults):
 * the epoch fence after a loss of state, the consume deadline under a stalled Redis, and the
 * durability modes. The contract part runs on both stores; the faults run on a Redis server of
 * the test's own (test/helpers/redis-process.ts), killed, flushed and paused for real. Every test
 * counts what is in the store (markers, records), never how long anything took.
 */
import t from 'tap';
import type { Test } from 'tap';
import { MemoryStore } from '../../shared/store/memory.js';
import { RedisStore } from '../../shared/store/redis.js';
import type { RedisStoreOptions } from '../../shared/store/redis.js';
import type { SharedStore } from '../../shared/store/types.js';
import { permitStoreKey, replayEpochKey, verificationStream } from '../../shared/permits/store-keys.js';
import { REDIS_NOT_RUN_REASON, TEST_COMMAND_TIMEOUT_MS, deleteKeys, redisUrl, uniquePrefix } from '../helpers/redis.js';
import { startRedisProcess } from '../helpers/redis-process.js';
import { Redis } from 'ioredis';
import { Registry } from 'prom-client';
import { createStoreMetrics } from '../../shared/metrics.js';
import { DEFAULT_STORE_SETTINGS } from '../../shared/store/config.js';
import type { StoreSettings } from '../../shared/store/config.js';
import { openCheckedStore } from '../../shared/store/open.js';
import { CONSUME_SCRIPT } from '../../shared/store/redis-scripts.js';

const ORG = 'org_faults';
const EPOCH_KEY = replayEpochKey(ORG);
const STREAM = verificationStream(ORG);
const TTL_MS = 60_000;
const key = (jti: string) => permitStoreKey(ORG, jti);
const record = (jti: string) => ({ stream: STREAM, fields: { kind: 'permit.verified', permit_id: jti } });
/**
 * The command time-out of the tests that wait out an acknowledgement that never comes (a replica
 * gone or stalled): long enough for a busy machine, short enough not to wait ten seconds.
 */
const ACK_WAIT_MS = 2_000;
const fenced = (issuedAtMs: number, timeoutMs?: number) => ({
  fence: { epochKey: EPOCH_KEY, issuedAtMs },
  ...(timeoutMs !== undefined ? { timeoutMs } : {}),
});

/**
 * A store closed with the test. Its command time-out is the tests' generous one unless the test
 * sets its own: a first consume on a busy 2-core machine (the clock, the durability plan, the
 * script loaded) can take longer than the product's default second, and fail closed where the
 * test counts consumes and records.
 */
function redisStore(t: Test, options: RedisStoreOptions): RedisStore {
  const store = new RedisStore({ commandTimeoutMs: TEST_COMMAND_TIMEOUT_MS, ...options });
  t.teardown(() => store.close());
  return store;
}

/** The fence's contract, the same on both stores. */
function fenceSuite(t: Test, open: (t: Test) => SharedStore): void {
  t.test('a permit issued before the epoch is refused as state_reset: nothing marked, nothing recorded', async (t) => {
    const store = open(t);
    const epoch = await store.ensureEpoch(EPOCH_KEY);
    t.equal(await store.ensureEpoch(EPOCH_KEY), epoch, 'the epoch stays until the state is lost');
    t.equal(await store.consumePermit(key('before'), TTL_MS, record('before'), fenced(epoch - 1)), 'state_reset');
    t.equal(await store.countRecords(STREAM), 0, 'no record of a refused permit');
    t.equal(await store.consumePermit(key('after'), TTL_MS, record('after'), fenced(epoch)), 'consumed', 'issued at the epoch: usable');
    t.equal(await store.consumePermit(key('after'), TTL_MS, record('after'), fenced(epoch)), 'already_used');
    t.equal(await store.countRecords(STREAM), 1, 'one record: the one use');
    // Revocation is checked after the fence: a revoked permit from before the epoch is still refused.
    await store.revoke(key('revoked'), TTL_MS);
    t.equal(await store.consumePermit(key('revoked'), TTL_MS, undefined, fenced(epoch)), 'revoked');
  });
}

t.test('MemoryStore: its epoch is its creation, so a restart fences every earlier permit', async (t) => {
  let now = 1_700_000_000_000;
  fenceSuite(t, (t) => {
    const store = new MemoryStore({ now: () => now, maxMarkers: 1000, maxRevocations: 100 });
    t.teardown(() => store.close());
    return store;
  });
  t.test('a restart (a new store) refuses what the old one consumed', async (t) => {
    const before = new MemoryStore({ now: () => now, maxMarkers: 1000, maxRevocations: 100 });
    const issuedAtMs = now;
    t.equal(await before.consumePermit(key('p'), TTL_MS, undefined, fenced(issuedAtMs)), 'consumed');
    await before.close();
    now += 1;
    const after = new MemoryStore({ now: () => now, maxMarkers: 1000, maxRevocations: 100 });
    t.teardown(() => after.close());
    t.equal(await after.consumePermit(key('p'), TTL_MS, undefined, fenced(issuedAtMs)), 'state_reset');
    t.equal((await after.checkDurability()).durability, 'none');
  });
});

const url = redisUrl();
if (!url) {
  t.comment(`RedisStore fence suite not run: ${REDIS_NOT_RUN_REASON}`);
} else {
  t.test('RedisStore (shared test server): the fence', async (t) => {
    fenceSuite(t, (t) => {
      const keyPrefix = uniquePrefix();
      t.teardown(() => deleteKeys(url, keyPrefix));
      return redisStore(t, { url, keyPrefix });
    });
  });
}

t.test('Redis killed with SIGKILL and restarted without persistence: consumed and revoked permits are fenced', async (t) => {
  const redis = await startRedisProcess(t, { persistence: 'none' });
  if (!redis) return;
  const store = redisStore(t, { url: redis.url });
  const epoch = await store.ensureEpoch(EPOCH_KEY);
  t.equal(await store.consumePermit(key('used'), TTL_MS, record('used'), fenced(epoch)), 'consumed');
  await store.revoke(key('revoked'), TTL_MS);
  await redis.crash();
  await redis.start();
  t.equal(await store.countRecords(STREAM), 0, 'without persistence the record is gone: durability none promises nothing');
  t.equal(await store.consumePermit(key('used'), TTL_MS, record('used'), fenced(epoch)), 'state_reset', 'the replay is refused');
  t.equal(await store.consumePermit(key('revoked'), TTL_MS, record('revoked'), fenced(epoch)), 'state_reset', 'the revoked permit is refused');
  t.equal(await store.countRecords(STREAM), 0, 'and nothing was recorded as a use');
  const newEpoch = await store.ensureEpoch(EPOCH_KEY);
  t.ok(newEpoch > epoch, 'a new epoch began');
  t.equal(await store.consumePermit(key('new'), TTL_MS, record('new'), fenced(newEpoch)), 'consumed', 'permits issued since are usable');
});

t.test('the same consume delivered twice (a client sending it again after a failover) is answered as itself, even past its deadline', async (t) => {
  const redis = await startRedisProcess(t, { persistence: 'none' });
  if (!redis) return;
  const client = new Redis(redis.url);
  t.teardown(() => client.quit());
  const keys = ['m:{o}', 'r:{o}', 'e:{o}', 's:{o}'];
  const consume = (nonce: string, deadlineMs: number) =>
    client.eval(CONSUME_SCRIPT, keys.length, ...keys, '60000', '', String(deadlineMs), nonce, JSON.stringify(['permit_id', 'p1'])) as Promise<[number, string]>;
  const first = await consume('n1', Date.now() + 60_000);
  t.equal(first[0], 1, 'the first delivery consumes');
  t.same(await consume('n1', Date.now() + 60_000), first, 'the second delivery of the same consume: the same answer, no second record');
  t.same(await consume('n1', 0), first, 'past its deadline too, so that a caller that gave up undoes it');
  t.same(await consume('n2', Date.now() + 60_000), [0, ''], 'another consume of the permit: already used');
  t.equal(await client.xlen('s:{o}'), 1, 'one record');
});

t.test('FLUSHALL: consumed permits are fenced', async (t) => {
  const redis = await startRedisProcess(t, { persistence: 'none' });
  if (!redis) return;
  const store = redisStore(t, { url: redis.url });
  const epoch = await store.ensureEpoch(EPOCH_KEY);
  t.equal(await store.consumePermit(key('used'), TTL_MS, undefined, fenced(epoch)), 'consumed');
  t.equal(await redis.command('FLUSHALL'), '+OK');
  t.equal(await store.consumePermit(key('used'), TTL_MS, undefined, fenced(epoch)), 'state_reset');
});

t.test('Redis paused past the timeout: the refused consume changes nothing once Redis resumes', async (t) => {
  const redis = await startRedisProcess(t, { persistence: 'none' });
  if (!redis) return;
  const store = redisStore(t, { url: redis.url, commandTimeoutMs: 300 });
  const epoch = await store.ensureEpoch(EPOCH_KEY);
  redis.pause();
  const stalled = await Promise.allSettled(
    ['a', 'b', 'c'].map((jti) => store.consumePermit(key(jti), TTL_MS, record(jti), fenced(epoch, 300))),
  );
  t.same(stalled.map((s) => s.status === 'rejected' && (s.reason as { code?: string }).code), ['STORE_UNAVAILABLE', 'STORE_UNAVAILABLE', 'STORE_UNAVAILABLE']);
  redis.resume();
  // The stalled scripts run now, in order, before anything sent after them on the connection.
  await store.ping();
  t.equal(await redis.command('EXISTS', `countersign:once:${key('a')}`), ':0', 'no marker from the late consume');
  t.equal(await store.countRecords(STREAM), 0, 'no record from the late consume');
  for (const jti of ['a', 'b', 'c']) {
    t.equal(await store.consumePermit(key(jti), TTL_MS, record(jti), fenced(epoch)), 'consumed', `${jti}: still usable`);
  }
  t.equal(await store.countRecords(STREAM), 3, 'one record per real use');
});

t.test('Redis paused, the caller aborts (or its deadline passes): the consume is undone or never made once Redis resumes', async (t) => {
  const redis = await startRedisProcess(t, { persistence: 'none' });
  if (!redis) return;
  // The store's own timeout outlasts the stall: only the caller's signal and deadline stop the consumes.
  const store = redisStore(t, { url: redis.url, commandTimeoutMs: 5_000 });
  const epoch = await store.ensureEpoch(EPOCH_KEY);
  // One consume first, so the clock offset is known and the next scripts go out at once.
  t.equal(await store.consumePermit(key('warm'), TTL_MS, record('warm'), fenced(epoch)), 'consumed');
  redis.pause();
  const caller = new AbortController();
  const aborted = store.consumePermit(key('aborted'), TTL_MS, record('aborted'), { ...fenced(epoch), signal: caller.signal });
  const late = store.consumePermit(key('late'), TTL_MS, record('late'), { ...fenced(epoch), deadlineMs: Date.now() + 200 });
  // Both are on the wire to the stopped server; the script of the first still has seconds to run.
  await new Promise((resolve) => setTimeout(resolve, 50));
  caller.abort();
  await t.rejects(aborted, { code: 'STORE_ABANDONED' }, 'the aborted caller is answered at once, Redis still stopped');
  await t.rejects(late, { code: 'STORE_UNAVAILABLE' }, 'the caller past its deadline is answered, Redis still stopped');
  redis.resume();
  // The stalled consume runs now and is undone as soon as its answer arrives.
  for (let i = 0; i < 200 && (await redis.command('EXISTS', `countersign:once:${key('aborted')}`)) !== ':0'; i++) await store.ping();
  t.equal(await redis.command('EXISTS', `countersign:once:${key('aborted')}`), ':0', 'no marker from the abandoned consume');
  t.equal(await redis.command('EXISTS', `countersign:once:${key('late')}`), ':0', 'no marker from the late consume');
  t.equal(await store.countRecords(STREAM), 1, 'no record of either: only the first consume has one');
  for (const jti of ['aborted', 'late']) {
    t.equal(await store.consumePermit(key(jti), TTL_MS, record(jti), fenced(epoch)), 'consumed', `${jti}: still usable`);
  }
});

t.test('durability aof (appendfsync always): a consume and its record survive SIGKILL', async (t) => {
  const redis = await startRedisProcess(t, { persistence: 'aof' });
  if (!redis) return;
  const store = redisStore(t, { url: redis.url, durability: 'aof' });
  const check = await store.checkDurability();
  t.ok(check.ok, `the store can keep aof: ${check.detail}`);
  const epoch = await store.ensureEpoch(EPOCH_KEY);
  for (const jti of ['a', 'b', 'c']) t.equal(await store.consumePermit(key(jti), TTL_MS, record(jti), fenced(epoch)), 'consumed');
  await redis.crash();
  await redis.start();
  t.equal(await store.countRecords(STREAM), 3, 'every record survived');
  t.equal(await store.ensureEpoch(EPOCH_KEY), epoch, 'the epoch survived: nothing was lost');
  t.equal(await store.consumePermit(key('a'), TTL_MS, record('a'), fenced(epoch)), 'already_used', 'the replay is refused as a replay');
});

t.test('durability replica: the consume and its acknowledgement go in one pipeline; after SCRIPT FLUSH the script is loaded again', async (t) => {
  const servers = await primaryWithReplica(t);
  if (!servers) return;
  const { primary, calls } = servers;
  const store = redisStore(t, { url: primary.url, durability: 'replica' });
  t.ok((await store.checkDurability()).ok, 'the store can keep replica');
  const epoch = await store.ensureEpoch(EPOCH_KEY);
  t.equal(await store.consumePermit(key('first'), TTL_MS, record('first'), fenced(epoch)), 'consumed', 'the first consume on a new server: the script is unknown there, so it is loaded');

  const before = await calls();
  for (const jti of ['a', 'b', 'c']) t.equal(await store.consumePermit(key(jti), TTL_MS, record(jti), fenced(epoch)), 'consumed');
  const pipelined = await calls();
  t.equal(pipelined('wait') - before('wait'), 3, 'one acknowledgement per consume');
  t.equal(pipelined('evalsha') - before('evalsha'), 3, 'the script by its SHA-1, in the acknowledgement\'s pipeline');
  // The script's own revocation check is an EXISTS; the two-step way sent one more per consume,
  // ahead of the acknowledgement, to route it to the key's server.
  t.equal(pipelined('exists') - before('exists'), 3, 'no EXISTS besides the script\'s: the acknowledgement rode with the script');

  t.equal(await primary.command('SCRIPT', 'FLUSH'), '+OK');
  t.equal(await store.consumePermit(key('d'), TTL_MS, record('d'), fenced(epoch)), 'consumed', 'consumed after the flush');
  const reloaded = await calls();
  t.equal(reloaded('eval') - pipelined('eval'), 1, 'the script was sent in full once');
  t.ok(reloaded('wait') - pipelined('wait') >= 1, 'the loaded script\'s write was acknowledged');
  t.equal(await store.countRecords(STREAM), 5, 'one record per use');
  t.equal(await store.consumePermit(key('d'), TTL_MS, record('d'), fenced(epoch)), 'already_used', 'the replay is refused');
});

t.test('durability replica: records are read only from a primary that has its replicas (a switchover\'s old primary holds consumes that never counted)', async (t) => {
  const servers = await primaryWithReplica(t);
  if (!servers) return;
  const { primary, replica, calls } = servers;
  const store = redisStore(t, { url: primary.url, durability: 'replica', commandTimeoutMs: ACK_WAIT_MS });
  const epoch = await store.ensureEpoch(EPOCH_KEY);
  t.equal(await store.consumePermit(key('r1'), TTL_MS, record('r1'), fenced(epoch)), 'consumed');
  const before = await calls();
  t.same((await store.readRecords(STREAM, '0', 10)).map((stored) => stored.fields['permit_id']), ['r1'], 'read while the replica is connected');
  t.equal((await calls())('wait') - before('wait'), 1, 'the read was followed by one WAIT');

  // What a promotion does to the old primary: its replica leaves it.
  t.equal(await replica.command('REPLICAOF', 'NO', 'ONE'), '+OK');
  await t.rejects(store.readRecords(STREAM, '0', 10), { code: 'STORE_NOT_DURABLE' }, 'no record is handed out by a primary its replica has left');
  const plain = redisStore(t, { url: primary.url, durability: 'none' });
  t.equal(await plain.countRecords(STREAM), 1, 'the record stays in the stream');
});

t.test('durability replica: the undo of a consume that was not acknowledged is owed until a replica acknowledges it too', async (t) => {
  const servers = await primaryWithReplica(t);
  if (!servers) return;
  const { primary, replica } = servers;
  const store = redisStore(t, { url: primary.url, durability: 'replica', commandTimeoutMs: ACK_WAIT_MS });
  const epoch = await store.ensureEpoch(EPOCH_KEY);
  t.equal(await store.consumePermit(key('first'), TTL_MS, record('first'), fenced(epoch)), 'consumed', 'a consume while the replica keeps up');
  const marker = `countersign:once:${key('u')}`;

  // A stalled replica acknowledges nothing: neither the consume nor its undo.
  replica.pause();
  await t.rejects(store.consumePermit(key('u'), TTL_MS, record('u'), fenced(epoch)), { code: 'STORE_NOT_DURABLE' }, 'the consume is not acknowledged, so it does not count');
  t.equal(await primary.command('EXISTS', marker), ':0', 'the primary has run the undo');
  t.ok(await until(() => store.pendingReleases === 1), 'and, no replica having acknowledged it, the undo is owed');

  replica.resume();
  t.ok(await until(() => store.pendingReleases === 0), 'once the replica is back, the owed undo is acknowledged');
  t.equal(await replica.command('EXISTS', marker), ':0', 'the replica holds no marker of the consume that did not count');
  t.equal(await replica.command('XLEN', `countersign:stream:${STREAM}`), ':1', 'nor its record (the first consume\'s is the only one)');
});

t.test('the start check: a store without AOF or replicas cannot keep aof or replica', async (t) => {
  const redis = await startRedisProcess(t, { persistence: 'none' });
  if (!redis) return;
  const aof = await redisStore(t, { url: redis.url, durability: 'aof' }).checkDurability();
  t.notOk(aof.ok);
  t.match(aof.detail, /appendonly yes/);
  const replica = await redisStore(t, { url: redis.url, durability: 'replica' }).checkDurability();
  t.notOk(replica.ok);
  t.match(replica.detail, /no connected replica/);
  t.ok((await redisStore(t, { url: redis.url, durability: 'none' }).checkDurability()).ok);
});

t.test('durability replica without an acknowledgement: the consume is undone and the call fails closed', async (t) => {
  const redis = await startRedisProcess(t, { persistence: 'none' });
  if (!redis) return;
  const strict = redisStore(t, { url: redis.url, durability: 'replica', commandTimeoutMs: ACK_WAIT_MS });
  const plain = redisStore(t, { url: redis.url, durability: 'none' });
  const epoch = await plain.ensureEpoch(EPOCH_KEY);
  await t.rejects(strict.consumePermit(key('p'), TTL_MS, record('p'), fenced(epoch)), { code: 'STORE_NOT_DURABLE' });
  t.equal(await plain.countRecords(STREAM), 0, 'the record of the undone consume is gone');
  t.equal(await plain.consumePermit(key('p'), TTL_MS, record('p'), fenced(epoch)), 'consumed', 'the permit is still usable');
  t.equal(await plain.countRecords(STREAM), 1);
});

t.test('openCheckedStore: refuses to enforce on a store that cannot keep aof, unless accepted; shadow keeps asking', async (t) => {
  const weak = await startRedisProcess(t, { persistence: 'none' });
  const strong = await startRedisProcess(t, { persistence: 'aof' });
  if (!weak || !strong) return;
  const logger = { warn: () => undefined, info: () => undefined };
  const open = async (url: string, settings: Partial<StoreSettings>, enforcing: boolean) => {
    const metrics = createStoreMetrics(new Registry());
    const store = await openCheckedStore({ settings: { ...DEFAULT_STORE_SETTINGS, ...settings }, redisUrl: url, enforcing, logger, metrics, env: {} });
    t.teardown(() => store.close());
    const established = (await metrics.durabilityEstablished.get()).values[0]?.value;
    return { store, established };
  };

  await t.rejects(open(weak.url, {}, true), { code: 'STORE_DURABILITY_UNAVAILABLE', message: /appendonly yes/ }, 'enforce on a Redis without AOF: no start');
  await t.rejects(open(weak.url, { durability: 'none' }, true), { code: 'STORE_DURABILITY_UNAVAILABLE' }, 'none is a weaker store too');

  const accepted = await open(weak.url, { accept_weaker_durability: true }, true);
  t.equal(accepted.established, 0, 'accepted: the metric shows the gap');
  const epoch = await accepted.store.ensureEpoch(EPOCH_KEY);
  t.equal(await accepted.store.consumePermit(key('a'), TTL_MS, record('a'), fenced(epoch)), 'consumed', 'accepted: consumes work');

  const shadow = await open(weak.url, {}, false);
  t.equal(shadow.established, 0);
  await t.rejects(shadow.store.consumePermit(key('b'), TTL_MS, record('b'), fenced(epoch)), { code: 'STORE_NOT_DURABLE' }, 'shadow only: every use fails as not durable');

  const kept = await open(strong.url, {}, true);
  t.equal(kept.established, 1, 'a Redis with appendfsync always keeps aof');
  t.equal(kept.store.kind, 'redis');
});

/**
 * Reads Redis's per-command call counts (INFO commandstats) over a connection of its own;
 * `untilReplicaConnected` waits (bounded) until the server's replica is in sync (`state=online`).
 */
async function commandCounter(t: Test, url: string) {
  const client = new Redis(url, { lazyConnect: true, maxRetriesPerRequest: 1 });
  t.teardown(() => client.disconnect());
  await client.connect();
  const calls = async () => {
    const info = await client.info('commandstats');
    return (command: string) => Number(new RegExp(`^cmdstat_${command}:calls=(\\d+)`, 'm').exec(info)?.[1] ?? 0);
  };
  return Object.assign(calls, {
    async untilReplicaConnected(): Promise<void> {
      for (let attempt = 0; attempt < 200; attempt++) {
        if (/^slave0:.*state=online/m.test(await client.info('replication'))) return;
        await new Promise((resolve) => setTimeout(resolve, 50));
      }
      throw new Error('the replica did not connect');
    },
  });
}

/** Polls `condition` every 50 ms for up to 10 s; whether it came true. */
async function until(condition: () => boolean): Promise<boolean> {
  for (let attempt = 0; attempt < 200; attempt++) {
    if (condition()) return true;
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  return condition();
}

/** A primary and its replica, of this test's own, once the replica is in sync; undefined without redis-server. */
async function primaryWithReplica(t: Test) {
  const primary = await startRedisProcess(t, { persistence: 'none' });
  if (!primary) return undefined;
  const replica = await startRedisProcess(t, { persistence: 'none', args: ['--replicaof', '127.0.0.1', String(primary.port)] });
  if (!replica) return undefined;
  const calls = await commandCounter(t, primary.url);
  await calls.untilReplicaConnected();
  return { primary, replica, calls };
}
