/**
 * The replay store on a Redis Cluster (real servers, started by `npm test` when installed): every
 * consume keeps its keys in one slot, wherever the organization's slot lives. Failovers are in
 * replay-store-failover.test.ts.
 */
import t from 'tap';
import type { Test } from 'tap';
import { Cluster } from 'ioredis';
import { permitStoreKey, replayEpochKey, verificationStream } from '../../shared/permits/store-keys.js';
import { clusterSlotOf } from '../../shared/store/cluster-slot.js';
import { RedisStore } from '../../shared/store/redis.js';
import type { RedisStoreOptions } from '../../shared/store/redis.js';
import {
  REDIS_CLUSTER_NOT_RUN_REASON,
  deleteClusterKeys,
  parseHostPort,
  redisClusterNodes,
  uniquePrefix,
} from '../helpers/redis.js';

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
      const owner = probe.slots[clusterSlotOf(permitStoreKey(org, 'x'.repeat(22)))]?.[0];
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
