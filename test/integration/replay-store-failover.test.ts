/**
 * Single use and every record through a change of primary, on real servers: Redis Sentinel groups
 * with one and with two replicas, the primary killed (SHUTDOWN NOSAVE NOW, as a crash) or switched
 * over (`SENTINEL FAILOVER`, as operators do for maintenance), and a Redis Cluster with a replica
 * per primary whose primary is killed. Two gates under load (fresh permits in two-way races,
 * replays, twenty-way bursts), `store.durability: replica`. Each scenario counts, on the new
 * primary: permits used twice, used permits a replay would pass, used permits without their
 * record, and records of attempts that were refused. Each must be 0. How long the gates refused
 * is printed, never asserted.
 *
 * Regression pinned: with two replicas, `WAIT 1` let the replica that was not promoted acknowledge
 * consumes the old primary took during a switchover and then drop them, so those permits ran twice.
 */
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import t from 'tap';
import type { Test } from 'tap';
import { Redis } from 'ioredis';
import { permitStoreKey, replayEpochKey } from '../../shared/permits/store-keys.js';
import { clusterSlotOf } from '../../shared/store/cluster-slot.js';
import { RedisStore } from '../../shared/store/redis.js';
import type { RedisStoreOptions } from '../../shared/store/redis.js';
import type { RedisTopology } from '../../shared/store/redis-topology.js';
import { startRedisCluster } from '../support/redis-topologies.mjs';
import { startConsumeLoad } from '../helpers/consume-load.js';
import { failoverSentinelPrimary, parseHostPort, startSentinelGroup } from '../helpers/redis.js';
import { redisServerBinary } from '../helpers/redis-process.js';

const NOTHING_FORBIDDEN = { usedTwice: 0, replayable: 0, recordsLost: 0, falseVerifications: 0 };

// Five failovers of real Redis servers under load, each waiting for Sentinel or the Cluster to
// promote a replica: on a busy 2-core machine, longer than .taprc's two minutes per file.
t.setTimeout(5 * 60_000);

function store(t: Test, options: RedisStoreOptions): RedisStore {
  const opened = new RedisStore(options);
  t.teardown(() => opened.close());
  return opened;
}

/** A fresh, empty redis-server on `port` replicating `primary`, as a supervisor restarts a crashed node; stopped at teardown. */
function restartAsReplica(t: Test, port: number, primary: { host: string; port: number }): void {
  const bin = redisServerBinary();
  if (!bin) throw new Error('redis-server vanished');
  const dir = mkdtempSync(join(tmpdir(), 'countersign-replica-'));
  const child = spawn(bin, ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no', '--dir', dir, '--replicaof', primary.host, String(primary.port)], { stdio: 'ignore' });
  t.teardown(() => {
    child.kill('SIGKILL');
    rmSync(dir, { recursive: true, force: true });
  });
}

for (const replicas of [1, 2]) {
  for (const how of ['shutdown', 'switchover'] as const) {
    const fault = how === 'shutdown' ? 'primary killed' : 'SENTINEL FAILOVER';
    t.test(`Sentinel, ${replicas} replica(s), ${fault}: no permit used twice, no replay accepted, no record lost, none false`, async (t) => {
      const started = await startSentinelGroup(undefined, { replicas });
      if (!started.ok) {
        t.comment(`not run: ${started.reason}`);
        return;
      }
      const group = started.group;
      t.teardown(() => group.stop());
      const topology: RedisTopology = { kind: 'sentinel', sentinels: group.sentinels, name: group.name };
      const gates = [0, 1].map(() => store(t, { topology, durability: 'replica', commandTimeoutMs: 1000 }));
      const check = await gates[0]!.checkDurability();
      t.ok(check.ok, `durability replica established: ${check.detail}`);
      t.match(check.detail, new RegExp(`WAIT ${replicas}\\b`), 'every replica Sentinel could promote acknowledges each write');
      const org = 'org_failover';
      const load = startConsumeLoad(gates, { orgs: [{ id: org, epoch: await gates[0]!.ensureEpoch(replayEpochKey(org)) }] });
      await load.untilConsumed(200);
      const faultAt = Date.now();
      const failedBefore = load.failed;
      const { oldPrimary, newPrimary } = await failoverSentinelPrimary(group, { how });
      // With one replica, the new primary has none until the old node is back as its replica;
      // `replica` durability keeps the gate closed until then. After a switchover Sentinel turns
      // the old primary into that replica itself.
      if (how === 'shutdown' && replicas === 1) restartAsReplica(t, oldPrimary.port, newPrimary);
      await load.untilConsumed(200);
      t.comment(`${fault}: the gates consumed again ${Date.now() - faultAt} ms after the fault; ${load.failed - failedBefore} attempts failed closed meanwhile`);
      await load.stop();
      const checker = store(t, { topology, commandTimeoutMs: 5000 });
      t.same(await load.audit(checker), NOTHING_FORBIDDEN, 'on the new primary: nothing used twice, nothing replayable, no record lost or false');
      t.equal(gates.reduce((sum, gate) => sum + gate.pendingReleases, 0), 0, 'no undo is still owed');
    });
  }
}

t.test('Cluster with a replica per primary, one primary killed under load: nothing used twice, lost or false', async (t) => {
  if (!redisServerBinary()) {
    t.comment('not run: no redis-server binary on PATH');
    return;
  }
  const cluster = await startRedisCluster({ log: () => undefined, useEnv: false, replicasPerPrimary: 1, nodeTimeoutMs: 1000 });
  if (!cluster.ok) throw new Error(`could not start a Redis Cluster: ${cluster.reason}`);
  t.teardown(() => cluster.stop());
  const topology: RedisTopology = { kind: 'cluster', nodes: cluster.nodes.map(parseHostPort) };
  const gates = [0, 1].map(() => store(t, { topology, durability: 'replica', commandTimeoutMs: 1000 }));
  t.ok((await gates[0]!.checkDurability()).ok, 'every primary has its replica');
  // One organization per primary, so the load reaches every shard.
  const owners = await primariesBySlot(cluster.nodes[0]!);
  const orgs: { id: string; epoch: number; primary: string }[] = [];
  for (let i = 0; orgs.length < 3 && i < 1000; i++) {
    const id = `org_${i}`;
    const primary = owners(clusterSlotOf(permitStoreKey(id, 'x')));
    if (primary && !orgs.some((org) => org.primary === primary)) orgs.push({ id, primary, epoch: await gates[0]!.ensureEpoch(replayEpochKey(id)) });
  }
  t.equal(orgs.length, 3, 'an organization on each primary');
  const load = startConsumeLoad(gates, { orgs });
  await load.untilConsumed(300);
  const victim = orgs[0]!;
  const victimPort = parseHostPort(victim.primary).port;
  const victimProcess = cluster.processes?.find((p) => p.port === victimPort);
  if (!victimProcess?.pid) throw new Error(`no process for ${victim.primary}`);
  const faultAt = Date.now();
  process.kill(victimProcess.pid, 'SIGKILL');
  // Its replica takes over; the killed node, restarted, rejoins as the new primary's replica.
  const survivor = cluster.nodes.find((node) => node !== victim.primary)!;
  await waitFor(async () => {
    const owner = (await primariesBySlot(survivor))(clusterSlotOf(permitStoreKey(victim.id, 'x')));
    return owner !== undefined && owner !== victim.primary;
  }, 'a replica promoted for the killed primary');
  cluster.restartNode?.(victimPort);
  await load.untilConsumed(100, { orgId: victim.id });
  t.comment(`the killed primary's organization consumed again ${Date.now() - faultAt} ms after the kill; ${load.failed} attempts failed closed in all`);
  await load.stop();
  const checker = store(t, { topology, commandTimeoutMs: 5000 });
  t.same(await load.audit(checker), NOTHING_FORBIDDEN, 'nothing used twice, nothing replayable, no record lost or false');
  t.equal(gates.reduce((sum, gate) => sum + gate.pendingReleases, 0), 0, 'no undo is still owed');
});

/** Which primary (`host:port`) holds each slot, as `node` sees the cluster now. */
async function primariesBySlot(node: string): Promise<(slot: number) => string | undefined> {
  const client = new Redis({ ...parseHostPort(node), maxRetriesPerRequest: 0, retryStrategy: () => null, lazyConnect: true });
  client.on('error', () => undefined);
  try {
    await client.connect();
    const ranges = (await client.call('CLUSTER', 'SLOTS')) as [number, number, [string, number]][];
    return (slot) => {
      const range = ranges.find(([from, to]) => slot >= from && slot <= to);
      return range ? `${range[2][0]}:${range[2][1]}` : undefined;
    };
  } finally {
    client.disconnect();
  }
}

async function waitFor(probe: () => Promise<boolean>, what: string, timeoutMs = 60_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    if (await probe().catch(() => false)) return;
    await sleep(100);
  }
  throw new Error(`${what}: not within ${timeoutMs} ms`);
}
