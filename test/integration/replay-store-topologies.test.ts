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
  /** A store on the cluster, and an organization whose slots live on each of its three primaries. */
  const clusterWithAnOrganizationPerPrimary = async (t: Test) => {
    const keyPrefix = uniquePrefix();
    t.teardown(() => deleteClusterKeys(nodes, keyPrefix));
    const cluster = store(t, { topology: { kind: 'cluster', nodes: nodes.map(parseHostPort) }, keyPrefix });
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
    return { cluster, probe, orgs: [...owners.keys()] };
  };

  t.test('Cluster: fence, consume with its record, revocation, for organizations on every primary', async (t) => {
    // The consume must reach the slot's owner.
    const { cluster, orgs } = await clusterWithAnOrganizationPerPrimary(t);
    for (const org of orgs) {
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

  // Regression: the scripts took a variable number of keys, so the client read the key count as the
  // first key when it grouped commands by node, put consumes and undos of organizations on different
  // primaries into one pipeline, and then refused that pipeline whole: those consumes failed, and
  // owed undos were refused at every retry.
  t.test('Cluster: consumes and undos sent together for organizations on every primary each reach their own primary', async (t) => {
    const { cluster, probe, orgs } = await clusterWithAnOrganizationPerPrimary(t);
    const epochs = await Promise.all(orgs.map((org) => cluster.ensureEpoch(replayEpochKey(org))));
    const consumeAll = (jti: string, options: (i: number) => { signal?: AbortSignal } = () => ({})) =>
      Promise.allSettled(
        orgs.map((org, i) =>
          cluster.consumePermit(permitStoreKey(org, jti), TTL_MS, { stream: verificationStream(org), fields: { kind: 'permit.verified' } }, {
            fence: { epochKey: replayEpochKey(org), issuedAtMs: epochs[i]! },
            ...options(i),
          }),
        ),
      );
    const answers = (outcomes: PromiseSettledResult<string>[]) => outcomes.map((outcome) => (outcome.status === 'fulfilled' ? outcome.value : String(outcome.reason)));
    const sentTogether = await consumeAll('A'.repeat(22));
    t.same(answers(sentTogether), ['consumed', 'consumed', 'consumed'], 'three consumes in one go: each consumed');
    // Callers that give up once their consumes are on the wire: the store undoes each consume.
    const controllers = orgs.map(() => new AbortController());
    setImmediate(() => controllers.forEach((controller) => controller.abort()));
    const abandoned = await consumeAll('B'.repeat(22), (i) => ({ signal: controllers[i]!.signal }));
    t.ok(abandoned.every((outcome) => outcome.status === 'rejected'), 'every caller was told its consume failed');
    // The undos follow the consumes' replies: wait (bounded) until only the first use's record is left.
    const recordCounts = () => Promise.all(orgs.map((org) => cluster.countRecords(verificationStream(org))));
    for (let waited = 0; waited < 100 && (cluster.pendingReleases > 0 || (await recordCounts()).some((count) => count !== 1)); waited++) {
      await new Promise((resolve) => setTimeout(resolve, 50));
    }
    t.same(await recordCounts(), [1, 1, 1], 'each abandoned consume undone, its record removed');
    t.equal(cluster.pendingReleases, 0, 'no undo is still owed');
    const again = await consumeAll('B'.repeat(22));
    t.same(answers(again), ['consumed', 'consumed', 'consumed'], 'each abandoned permit is usable again');
    for (const org of orgs) t.equal(await cluster.countRecords(verificationStream(org)), 2, `${org}: the records of the two uses that counted, none of the abandoned one`);
    // As on a replica just promoted: the servers no longer know the scripts the client sent them.
    await Promise.all(probe.nodes('master').map((node) => node.script('FLUSH')));
    const afterFlush = await consumeAll('C'.repeat(22));
    t.same(answers(afterFlush), ['consumed', 'consumed', 'consumed'], 'consumed on servers whose script cache was flushed');
  });
}
