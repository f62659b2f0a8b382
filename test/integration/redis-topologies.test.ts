/**
 * Smoke test of the real Redis topologies the test helpers provide: ioredis
 * reaches every primary of the 3-primary Redis Cluster through one `Cluster` client, and an
 * ioredis Sentinel client follows a failover to the new primary. Each part comments why it did not
 * run when the servers are not there (install redis-server, redis-sentinel; `npm test` starts them).
 *
 * @example
 *   node test/run.mjs test/integration/redis-topologies.test.ts
 */
import t from 'tap';
import { setTimeout as sleep } from 'node:timers/promises';
import { Cluster, Redis } from 'ioredis';
import {
  REDIS_CLUSTER_NOT_RUN_REASON,
  REDIS_SENTINEL_NOT_RUN_REASON,
  deleteClusterKeys,
  failoverSentinelPrimary,
  parseHostPort,
  redisClusterNodes,
  redisSentinels,
  startSentinelGroup,
  uniquePrefix,
} from '../helpers/redis.js';

const POLL_LIMIT_MS = 30_000;

/** Polls (bounded) until `attempt` resolves a value; the last error is in the failure message. */
async function until<T>(what: string, attempt: () => Promise<T>): Promise<T> {
  const deadline = Date.now() + POLL_LIMIT_MS;
  let last: unknown;
  while (Date.now() < deadline) {
    try {
      return await attempt();
    } catch (err) {
      last = err;
    }
    await sleep(100);
  }
  throw new Error(`gave up waiting for ${what}: ${String(last)}`);
}

/** A plain client on one node, not following redirects: shows where a key really lives. */
async function onNode<T>(address: string, use: (client: Redis) => Promise<T>): Promise<T> {
  const client = new Redis({ ...parseHostPort(address), lazyConnect: true, maxRetriesPerRequest: 1 });
  client.on('error', () => {});
  try {
    await client.connect();
    return await use(client);
  } finally {
    client.disconnect();
  }
}

t.test('Cluster: one client reads and writes keys whose hash tags live on every primary', async (t) => {
  const nodes = redisClusterNodes();
  if (!nodes) {
    t.comment(`Redis Cluster test did not run: ${REDIS_CLUSTER_NOT_RUN_REASON}`);
    return;
  }
  const prefix = uniquePrefix();
  const cluster = new Cluster(nodes.map(parseHostPort), { redisOptions: { maxRetriesPerRequest: 1 } });
  cluster.on('error', () => {});
  t.teardown(async () => {
    cluster.disconnect();
    await deleteClusterKeys(nodes, prefix);
  });

  const ranges = await cluster.cluster('SLOTS');
  const ownerOf = (slot: number): string => {
    const primary = ranges.find(([low, high]) => slot >= low && slot <= high)?.[2];
    if (!primary) throw new Error(`slot ${slot} is not served (cluster not ready?)`);
    return `${primary[0]}:${primary[1]}`;
  };
  const primaries = new Set(ranges.map(([low]) => ownerOf(low)));
  t.ok(primaries.size >= 3, `the cluster has at least 3 primaries (${[...primaries].join(', ')})`);

  // One hash tag per primary, the way store keys carry `{org}`: the tag alone decides the slot.
  const tagByPrimary = new Map<string, string>();
  for (let i = 0; tagByPrimary.size < primaries.size && i < 10_000; i++) {
    const tag = `{org-${i}}`;
    const owner = ownerOf((await cluster.cluster('KEYSLOT', `${prefix}${tag}:x`)) as number);
    if (!tagByPrimary.has(owner)) tagByPrimary.set(owner, tag);
  }
  t.equal(tagByPrimary.size, primaries.size, 'a hash tag was found for every primary');

  for (const [owner, tag] of tagByPrimary) {
    const key = `${prefix}${tag}:permit`;
    t.equal(await cluster.set(key, owner), 'OK', `SET ${tag} through the cluster client`);
    t.equal(await cluster.get(key), owner, `GET ${tag} through the cluster client`);
    // Read without redirects on the owning node: the key really is there, not on a single node.
    t.equal(await onNode(owner, (c) => c.get(key)), owner, `${tag} is stored on ${owner}`);
    // Multi-key scripts stay on one slot: two keys with the same tag run in one EVAL.
    const both = await cluster.eval(
      "redis.call('SET', KEYS[2], ARGV[1]); return redis.call('GET', KEYS[1]) .. '|' .. redis.call('GET', KEYS[2])",
      2, key, `${prefix}${tag}:marker`, 'used',
    );
    t.equal(both, `${owner}|used`, `a two-key script with tag ${tag} runs on its one slot`);
  }

  // Keys of different slots in one script are refused by Redis: why every store key needs a tag.
  const [firstTag, secondTag] = [...tagByPrimary.values()];
  await t.rejects(
    cluster.eval("return redis.call('GET', KEYS[1])", 2, `${prefix}${firstTag}:a`, `${prefix}${secondTag}:a`),
    /CROSSSLOT/,
    'a script over two slots is refused',
  );
});

t.test('Sentinel: a client of the shared group writes and reads through the master the sentinels name', async (t) => {
  const group = redisSentinels();
  if (!group) {
    t.comment(`Redis Sentinel test did not run: ${REDIS_SENTINEL_NOT_RUN_REASON}`);
    return;
  }
  const key = `${uniquePrefix()}hello`;
  const client = new Redis({ sentinels: group.sentinels, name: group.name, maxRetriesPerRequest: 1 });
  client.on('error', () => {});
  t.teardown(async () => {
    await client.del(key).catch(() => undefined);
    client.disconnect();
  });
  t.equal(await client.set(key, 'world'), 'OK');
  t.equal(await client.get(key), 'world');
  t.equal((await client.role())[0], 'master', 'the client is connected to the master');
});

// Fails over a group of its own: the shared group serves test files running in parallel.
t.test('Sentinel: after the primary is killed, the same client writes to the promoted replica', async (t) => {
  const started = await startSentinelGroup();
  if (!started.ok) {
    t.comment(`Redis Sentinel failover test did not run: ${started.reason}`);
    return;
  }
  const group = started.group;
  t.teardown(() => group.stop());
  const client = new Redis({ sentinels: group.sentinels, name: group.name });
  client.on('error', () => {});
  t.teardown(() => client.disconnect());

  t.equal(await client.set('before', '1'), 'OK');
  // Replication is asynchronous: WAIT makes sure the replica has the write before the kill.
  t.equal(await client.wait(1, 10_000), 1, 'the replica acknowledged the write before the failover');

  const { oldPrimary, newPrimary } = await failoverSentinelPrimary(group);
  t.same(oldPrimary, { host: group.primary.host, port: group.primary.port }, 'the primary was taken away');
  t.same(newPrimary, { host: group.replica.host, port: group.replica.port }, 'the sentinels promoted the replica');

  // The client was not recreated: it asks the sentinels again after losing its connection.
  const reply = await until('a write through the Sentinel client after the failover', () => client.set('after', '2'));
  t.equal(reply, 'OK', 'a write succeeds after the failover');
  const address = `${newPrimary.host}:${newPrimary.port}`;
  t.same(
    await onNode(address, (c) => c.mget('before', 'after')),
    ['1', '2'],
    'the new primary holds the write from before the failover and the one after it',
  );
  t.equal((await client.role())[0], 'master', 'the client is connected to a master');
});
