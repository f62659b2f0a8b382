/**
 * The replay store on Redis Cluster and Redis Sentinel (real servers, started by `npm test` when
 * installed): every consume keeps its keys in one slot, wherever the organization's slot lives,
 * and a Sentinel failover under load accepts no replay and loses no record of a use, and the store
 * recovers by itself. Counts uses and records; the time to recover is printed, never asserted.
 */
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import t from 'tap';
import type { Test } from 'tap';
import { Cluster } from 'ioredis';
import { permitStoreKey, replayEpochKey, verificationStream } from '../../shared/permits/store-keys.js';
import { RedisStore } from '../../shared/store/redis.js';
import type { RedisStoreOptions } from '../../shared/store/redis.js';
import {
  REDIS_CLUSTER_NOT_RUN_REASON,
  deleteClusterKeys,
  failoverSentinelPrimary,
  parseHostPort,
  redisClusterNodes,
  startSentinelGroup,
  uniquePrefix,
} from '../helpers/redis.js';
import { redisServerBinary } from '../helpers/redis-process.js';

const TTL_MS = 60_000;

function store(t: Test, options: RedisStoreOptions): RedisStore {
  const opened = new RedisStore(options);
  t.teardown(() => opened.close());
  return opened;
}

const nodes = redisClusterNodes();
if (!nodes) {
  t.comment(`Cluster suite not run: ${REDIS_CLUSTER_NOT_RUN_REASON}`);
} else {
  t.test('Cluster: fence, consume with its record, revocation, for organizations on every primary', async (t) => {
    const keyPrefix = uniquePrefix();
    t.teardown(() => deleteClusterKeys(nodes, keyPrefix));
    const cluster = store(t, { topology: { kind: 'cluster', nodes: nodes.map(parseHostPort) }, keyPrefix });
    // Organizations whose slots live on each primary: the consume must reach the slot's owner.
    const probe = new Cluster(nodes.map(parseHostPort));
    t.teardown(() => probe.disconnect());
    await probe.ping();
    const owners = new Map<string, string>();
    for (let i = 0; owners.size < 3 && i < 1000; i++) {
      const org = `org_${i}`;
      const owner = probe.slots[keySlot(permitStoreKey(org, 'x'.repeat(22)))]?.[0];
      if (owner && ![...owners.values()].includes(owner)) owners.set(org, owner);
    }
    t.equal(owners.size, 3, 'an organization on each of the three primaries');
    for (const org of owners.keys()) {
      const epoch = await cluster.ensureEpoch(replayEpochKey(org));
      const fence = (issuedAtMs: number) => ({ fence: { epochKey: replayEpochKey(org), issuedAtMs } });
      const record = { stream: verificationStream(org), fields: { kind: 'permit.verified' } };
      const jti = 'A'.repeat(22);
      t.equal(await cluster.consumePermit(permitStoreKey(org, jti), TTL_MS, record, fence(epoch)), 'consumed', `${org}: consumed`);
      t.equal(await cluster.consumePermit(permitStoreKey(org, jti), TTL_MS, record, fence(epoch)), 'already_used', `${org}: replay refused`);
      t.equal(await cluster.consumePermit(permitStoreKey(org, 'B'.repeat(22)), TTL_MS, record, fence(epoch - 1)), 'state_reset', `${org}: fenced`);
      await cluster.revoke(permitStoreKey(org, 'C'.repeat(22)), TTL_MS);
      t.equal(await cluster.consumePermit(permitStoreKey(org, 'C'.repeat(22)), TTL_MS, record, fence(epoch)), 'revoked', `${org}: revoked`);
      t.equal(await cluster.countRecords(verificationStream(org)), 1, `${org}: one record, for the one use`);
    }
    await cluster.ping();
  });
}

/** The Redis Cluster slot of `key`: CRC16/XMODEM of its hash tag, mod 16384. */
function keySlot(key: string): number {
  const tag = /\{([^}]+)\}/.exec(key)?.[1] ?? key;
  let crc = 0;
  for (const byte of Buffer.from(tag)) {
    crc ^= byte << 8;
    for (let bit = 0; bit < 8; bit++) crc = crc & 0x8000 ? ((crc << 1) ^ 0x1021) & 0xffff : (crc << 1) & 0xffff;
  }
  return crc % 16384;
}

/** A fresh, empty redis-server on `port` replicating `primary`; stopped at teardown. */
async function restartAsReplica(t: Test, port: number, primary: { host: string; port: number }): Promise<void> {
  const bin = redisServerBinary();
  if (!bin) throw new Error('redis-server vanished');
  const dir = mkdtempSync(join(tmpdir(), 'countersign-replica-'));
  const child = spawn(bin, ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no', '--dir', dir, '--replicaof', primary.host, String(primary.port)], { stdio: 'ignore' });
  t.teardown(() => {
    child.kill('SIGKILL');
    rmSync(dir, { recursive: true, force: true });
  });
}

t.test('Sentinel failover under load, primary killed (durability replica): no replay accepted, no record of a use lost, recovery without restart', async (t) => {
  const started = await startSentinelGroup();
  if (!started.ok) {
    t.comment(`Sentinel failover not run: ${started.reason}`);
    return;
  }
  const group = started.group;
  t.teardown(() => group.stop());
  const org = 'org_failover';
  const gate = store(t, {
    topology: { kind: 'sentinel', sentinels: group.sentinels, name: group.name },
    durability: 'replica',
    commandTimeoutMs: 1000,
  });
  t.ok((await gate.checkDurability()).ok, 'the primary has its replica');
  const epoch = await gate.ensureEpoch(replayEpochKey(org));
  const uses = new Map<string, number>();
  const outcomes = { consumed: 0, failed: 0 };
  let next = 0;
  let stop = false;
  let recoveredAt: number | undefined;
  let failoverAt: number | undefined;
  const consume = async (jti: string) => {
    const startedAt = Date.now();
    try {
      const result = await gate.consumePermit(permitStoreKey(org, jti), TTL_MS, { stream: verificationStream(org), fields: { permit_id: jti } }, {
        fence: { epochKey: replayEpochKey(org), issuedAtMs: epoch },
      });
      if (result === 'consumed') {
        uses.set(jti, (uses.get(jti) ?? 0) + 1);
        outcomes.consumed++;
        // Started after the kill had surely reached the primary: answered by the new primary.
        if (failoverAt !== undefined && recoveredAt === undefined && startedAt > failoverAt + 100) recoveredAt = Date.now();
      }
    } catch {
      outcomes.failed++;
    }
  };
  // Eight gates' worth of load, each permit tried twice (a replay in flight).
  const workers = Array.from({ length: 8 }, async () => {
    while (!stop) {
      const jti = `p${String(next++).padStart(21, '0')}`;
      await Promise.all([consume(jti), consume(jti)]);
    }
  });
  while (outcomes.consumed < 200) await new Promise((resolve) => setTimeout(resolve, 10));
  failoverAt = Date.now();
  // The primary is killed; once the sentinels have promoted the replica, the old node comes back
  // empty as a replica of the new primary, as its supervisor would restart it. Until then the new
  // primary has no replica, so durability replica fails every consume closed.
  const { oldPrimary, newPrimary } = await failoverSentinelPrimary(group, { how: 'shutdown' });
  await restartAsReplica(t, oldPrimary.port, newPrimary);
  const consumedBefore = outcomes.consumed;
  while (outcomes.consumed < consumedBefore + 200) await new Promise((resolve) => setTimeout(resolve, 10));
  stop = true;
  await Promise.all(workers);

  t.comment(`recovered ${recoveredAt! - failoverAt} ms after the primary was killed; ${outcomes.failed} consumes failed closed meanwhile`);
  t.equal([...uses.values()].filter((count) => count > 1).length, 0, 'no permit was accepted twice');
  // Every accepted use has its record on the new primary.
  const records = await gate.readRecords(verificationStream(org), '0', 100_000);
  const recorded = new Set(records.map((r) => r.fields.permit_id));
  t.equal([...uses.keys()].filter((jti) => !recorded.has(jti)).length, 0, 'no record of an accepted use was lost');
  // Replays after the failover: every permit accepted before is still refused.
  let replaysAccepted = 0;
  for (const jti of uses.keys()) {
    const again = await gate.consumePermit(permitStoreKey(org, jti), TTL_MS, undefined, { fence: { epochKey: replayEpochKey(org), issuedAtMs: epoch } });
    if (again === 'consumed') replaysAccepted++;
  }
  t.equal(replaysAccepted, 0, 'no replay accepted after the failover');
});
