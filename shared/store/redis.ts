/**
 * The production `SharedStore`, on Redis (ioredis 5): one server, a Sentinel-managed primary, or a
 * Redis Cluster (redis-topology.ts). Every replica of the authority and every proxy replica points
 * at the same Redis, so consume-once, revocations, rate limits and the verification stream are
 * shared.
 *
 * Keys are `<keyPrefix><namespace>:<caller's key>` with namespaces `once`, `revoked`, `bucket`,
 * `stream` and `epoch`, so the kinds of state can never collide (as in `MemoryStore`). The caller's
 * `{org}` hash tag is the first braces in the full key, so a permit's marker, its revocation, its
 * organization's epoch and stream share a Redis Cluster slot; hence the prefix may not contain
 * braces.
 *
 * What a consume guarantees under faults (docs/replay-store.md):
 * - the epoch fence: a Redis that lost its state (restart without persistence, FLUSHALL, a new
 *   server) starts a new epoch, and permits issued before it are refused (`state_reset`);
 * - the deadline: a consume that reaches Redis after the caller's timeout or deadline changes
 *   nothing, and one that lands after the caller gave up (its signal aborted) is undone;
 * - durability: `aof` and `replica` acknowledge the consume and its record before it counts, and
 *   undo it when the acknowledgement does not come (`STORE_NOT_DURABLE`).
 *
 * Fails fast: while Redis is unreachable every method rejects (code `STORE_UNAVAILABLE`) within
 * about `commandTimeoutMs`, and callers fail closed. Nothing is queued for later. The client keeps
 * reconnecting in the background (capped backoff) and the store recovers by itself.
 *
 * @example
 *   const store = new RedisStore({ url: 'redis://127.0.0.1:6379', durability: 'aof' });
 *   const outcome = await store.consumePermit('permit:{org_1}:abc', 65_000, {
 *     stream: 'verifications:{org_1}',
 *     fields: { permit_id: 'abc', outcome: 'allow' },
 *   }, { fence: { epochKey: 'epoch:{org_1}', issuedAtMs }, timeoutMs: 1000 }); // 'consumed', and the record is in the stream
 *   await store.close();
 */
import { randomBytes } from 'node:crypto';
import { Cluster } from 'ioredis';
import { clusterSlotOf } from './cluster-slot.js';
import { acknowledgementCommand, acknowledgementError, type AcknowledgementPlan } from './redis-acknowledgement.js';
import { fieldPairs, recordArgument } from './redis-arguments.js';
import { RedisConnection } from './redis-connection.js';
import { checkDurabilityOf, DurabilityKeeper } from './redis-durability.js';
import { PendingReleases, type PendingRelease } from './redis-releases.js';
import { requiredReplicas, SentinelView } from './redis-replicas.js';
import {
  defineScriptCommands,
  runConsumeScript,
  runEnsureEpochScript,
  runReleaseScript,
  runTakeTokenScript,
  type ScriptedRedis,
} from './redis-script-commands.js';
import { CONSUME_SCRIPT_SHA } from './redis-scripts.js';
import { createRedisClient, measureClockOffset, primariesOf } from './redis-topology.js';
import type { RedisClient, RedisTopology } from './redis-topology.js';
import { StoreError, checkCount, checkFields, checkTtl, consumeBudgetMs } from './store-errors.js';
import { assertBucketSpec, bucketResult } from './token-bucket.js';
import type {
  ConsumeOptions,
  DurabilityCheck,
  PermitConsumption,
  RecordAppend,
  SharedStore,
  ReadRecordsOptions,
  StoreDurability,
  StoredRecord,
  TokenBucketResult,
  TokenBucketSpec,
} from './types.js';

export interface RedisStoreOptions {
  /** `redis://` or `rediss://` URL of one server, credentials and database included. */
  url?: string;
  /** Sentinel or Cluster instead of one server (`url` is then ignored). */
  topology?: RedisTopology;
  /** Prepended to every key. Default `countersign:`. Must not contain `{` or `}`. */
  keyPrefix?: string;
  /** TCP connect timeout. Default 1000 ms. */
  connectTimeoutMs?: number;
  /**
   * Bound on each call, waiting for a (re)connection included. Default 1000 ms. A consume with its
   * own `timeoutMs` is bounded by that instead.
   */
  commandTimeoutMs?: number;
  /** What a consume, a revocation and a record are worth when Redis crashes. Default `none`. */
  durability?: StoreDurability;
}

/** Lets a bucket key outlive the moment it is full by this much, against rounding. */
const BUCKET_EXPIRY_MARGIN_MS = 1000;
/**
 * The consume script refuses to run after this share of the caller's timeout has passed (on
 * Redis's clock). The rest covers the answer's way back and the error of the clock offset, so a
 * consume the caller gave up on has certainly changed nothing.
 */
const DEADLINE_SHARE = 0.75;

/**
 * A consume's nonce (the marker's value, which lets release undo exactly that consume): random per
 * process, then a counter. Unique per marker is all it needs, and reading the CSPRNG per consume
 * showed in the proxy's profile.
 */
const NONCE_PREFIX = randomBytes(6).toString('base64url');
let nonceCounter = 0;

/** The clock offset to Redis is measured again after this long. */
const CLOCK_OFFSET_MAX_AGE_MS = 30_000;
/** How long a read waits for the replicas' WAIT (readRecords): connected replicas answer it at once. */
const READ_CHECK_MS = 200;

type Client = RedisClient & ScriptedRedis;

export class RedisStore implements SharedStore {
  readonly kind = 'redis' as const;
  readonly durability: StoreDurability;

  readonly #connection: RedisConnection<Client>;
  readonly #prefix: string;
  readonly #commandTimeoutMs: number;
  /** How durability is kept after writes, read from the servers and kept current. */
  readonly #durability: DurabilityKeeper;
  /** Undos of consumes that did not count, owed while Redis could not be reached. */
  readonly #releases: PendingReleases;
  readonly #sentinels: SentinelView | undefined;
  #clock: { offsetMs: number; uncertaintyMs: number; measuredAtMs: number } | undefined;

  constructor(options: RedisStoreOptions) {
    this.#prefix = options.keyPrefix ?? 'countersign:';
    if (/[{}]/.test(this.#prefix)) {
      throw new RangeError('keyPrefix must not contain braces: they would replace the {org} hash tag');
    }
    const topology = options.topology ?? (options.url ? { kind: 'single' as const, url: options.url } : undefined);
    if (!topology) throw new RangeError('a Redis store needs a url or a topology');
    this.durability = options.durability ?? 'none';
    this.#commandTimeoutMs = options.commandTimeoutMs ?? 1000;
    const client = createRedisClient(topology, {
      connectTimeoutMs: options.connectTimeoutMs ?? 1000,
      commandTimeoutMs: this.#commandTimeoutMs,
    }) as Client;
    defineScriptCommands(client);
    this.#sentinels = topology.kind === 'sentinel' ? new SentinelView(topology, this.#commandTimeoutMs) : undefined;
    // Follows a new primary as soon as Sentinel names it. Otherwise the client would stay on the
    // old primary until that server answers READONLY, which it does only once Sentinel has turned
    // it into a replica: up to about ten seconds after a switchover. Reconnecting asks the
    // Sentinels for the primary again; commands in flight fail (and their consumes are undone).
    this.#sentinels?.watchSwitches(() => client.disconnect(true));
    this.#durability = new DurabilityKeeper(
      () => checkDurabilityOf(client, this.durability, this.#sentinels),
      // The same, when the periodic read finds the connection on a server Sentinel no longer names.
      () => client.disconnect(true),
    );
    this.#releases = new PendingReleases((release) => this.#connection.run(this.#commandTimeoutMs, (c) => this.#releaseDurably(c, release)));
    // A new connection may lead to another server (a failover): its clock and replicas are read anew.
    this.#connection = new RedisConnection(client, {
      onReady: () => {
        this.#clock = undefined;
        this.#durability.forget();
        void this.#releases.flush();
      },
    });
  }

  /** Undos of consumes that did not count which Redis has not run yet (see redis-releases.ts). */
  get pendingReleases(): number {
    return this.#releases.size;
  }

  async consumePermit(key: string, ttlMs: number, record?: RecordAppend, options: ConsumeOptions = {}): Promise<PermitConsumption> {
    const ttl = String(checkTtl(ttlMs));
    if (record) checkFields(record.fields);
    const startedMs = Date.now();
    // The caller's deadline shortens the timeout, and the script's deadline with it.
    const timeoutMs = consumeBudgetMs(options, this.#commandTimeoutMs, startedMs);
    // Set (synchronously, by the timer or the caller's abort) once the caller has been told the
    // consume failed: a consume that succeeds after that moment is undone, so it cannot outlive its request.
    let abandoned = false;
    const onGiveUp = () => (abandoned = true);
    return this.#connection.run(timeoutMs, async (client) => {
      const clock = await this.#redisClock();
      // In Redis's time: when the script must no longer change anything.
      const deadline = startedMs + clock.offsetMs + timeoutMs * DEADLINE_SHARE - clock.uncertaintyMs;
      const marker = this.#key('once', key);
      const stream = record ? this.#key('stream', record.stream) : undefined;
      const epochKey = this.#key('epoch', options.fence?.epochKey ?? epochKeyOf(key));
      const nonce = `${NONCE_PREFIX}${(nonceCounter++).toString(36)}`;
      const keys = [marker, this.#key('revoked', key), epochKey, ...(stream ? [stream] : [])];
      const args = [ttl, options.fence ? String(options.fence.issuedAtMs) : '', String(Math.floor(deadline)), nonce];
      if (record) args.push(recordArgument(record.fields));
      const plan = await this.#durabilityPlan();
      // Given up on while the clock or the durability plan was read: the script is not sent at all.
      if (abandoned) throw new StoreError('STORE_ABANDONED', 'the caller gave up before the consume was sent; nothing was consumed');
      const ackDeadlineMs = startedMs + timeoutMs * 0.9;
      const release = { keys: stream ? [marker, stream] : [marker], nonce };
      let outcome: { reply: [number, string]; notDurable?: unknown };
      try {
        outcome = await this.#consumeAndAcknowledge(client, plan, keys, args, marker, ackDeadlineMs);
      } catch (error) {
        // No answer (the connection dropped, or Redis timed out): the consume may have happened.
        // The caller is told it did not, so it is undone, now or once Redis can be reached.
        this.#releases.add(release);
        throw error;
      }
      const [code] = outcome.reply;
      if (code === -3) throw new StoreError('STORE_UNAVAILABLE', 'Redis answered after the consume deadline; nothing was consumed');
      if (code !== 1) return code === -2 ? 'state_reset' : code === -1 ? 'revoked' : 'already_used';
      try {
        if (outcome.notDurable !== undefined) throw outcome.notDurable;
        if (abandoned) throw new StoreError('STORE_UNAVAILABLE', 'the consume completed after its caller gave up');
      } catch (error) {
        // Undo exactly this consume, so the refused request leaves its permit usable and no
        // record of a use that did not happen. The caller is answered once the undo has run; its
        // acknowledgement is waited for after. An undo that could not run or was not acknowledged
        // is owed, and sent again until it is.
        await runReleaseScript(client, release).then(
          () => void this.#awaitDurable(client, marker, Date.now() + this.#commandTimeoutMs * 0.9).catch(() => this.#releases.add(release)),
          () => this.#releases.add(release),
        );
        throw error;
      }
      return 'consumed';
    }, { onGiveUp, signal: options.signal });
  }

  async ensureEpoch(epochKey: string): Promise<number> {
    const [epoch] = await this.#connection.run(this.#commandTimeoutMs, (client) => runEnsureEpochScript(client, this.#key('epoch', epochKey)));
    return Number(epoch);
  }

  async checkDurability(): Promise<DurabilityCheck> {
    const { durability, ok, detail } = await this.#connection.run(this.#commandTimeoutMs * 5, () => this.#durability.check());
    return { durability, ok, detail };
  }

  async revoke(id: string, ttlMs: number): Promise<void> {
    const ttl = checkTtl(ttlMs);
    const key = this.#key('revoked', id);
    const startedMs = Date.now();
    await this.#connection.run(this.#commandTimeoutMs, async (client) => {
      await client.set(key, '1', 'PX', ttl);
      await this.#awaitDurable(client, key, startedMs + this.#commandTimeoutMs);
    });
  }

  async isRevoked(id: string): Promise<boolean> {
    const count = await this.#connection.run(this.#commandTimeoutMs, (client) => client.exists(this.#key('revoked', id)));
    return count > 0;
  }

  async takeToken(key: string, bucket: TokenBucketSpec, nowMs: number): Promise<TokenBucketResult> {
    assertBucketSpec(bucket, nowMs);
    const [allowed, tokens, now] = await this.#connection.run(this.#commandTimeoutMs, (client) =>
      runTakeTokenScript(client, this.#key('bucket', key), [
        String(bucket.capacity),
        String(bucket.refillPerMinute),
        String(nowMs),
        String(BUCKET_EXPIRY_MARGIN_MS),
      ]),
    );
    const state = { tokens: Number(tokens), updatedAtMs: Number(now) };
    return bucketResult({ allowed: allowed === 1, state }, bucket);
  }

  /** Resolves once the record is as durable as the durability mode promises. */
  async appendRecord(stream: string, fields: Record<string, string>): Promise<string> {
    checkFields(fields);
    const key = this.#key('stream', stream);
    const startedMs = Date.now();
    const id = await this.#connection.run(this.#commandTimeoutMs, async (client) => {
      const appended = await client.xadd(key, '*', ...fieldPairs(fields));
      await this.#awaitDurable(client, key, startedMs + this.#commandTimeoutMs);
      return appended;
    });
    if (id === null) throw new StoreError('STORE_UNAVAILABLE', 'Redis did not return a record id');
    return id;
  }

  async appendRecords(stream: string, batch: ReadonlyArray<Record<string, string>>): Promise<PromiseSettledResult<string>[]> {
    for (const fields of batch) checkFields(fields);
    if (batch.length === 0) return [];
    const key = this.#key('stream', stream);
    const startedMs = Date.now();
    try {
      return await this.#connection.run(this.#commandTimeoutMs, async (client) => {
        // In one write; the stream's {org} tag keeps them on one node in a cluster.
        const replies = await this.#inOrder(client, batch.map((fields): [string, ...string[]] => ['XADD', key, '*', ...fieldPairs(fields)]));
        const outcomes = batch.map((_, i): PromiseSettledResult<string> => {
          const [error, id] = replies[i] ?? [new Error('no reply')];
          if (error) return { status: 'rejected', reason: this.#connection.translate(error) };
          return typeof id === 'string' ? { status: 'fulfilled', value: id } : { status: 'rejected', reason: new StoreError('STORE_UNAVAILABLE', 'Redis did not return a record id') };
        });
        // One acknowledgement covers every write this connection made before it.
        if (outcomes.some((outcome) => outcome.status === 'fulfilled')) await this.#awaitDurable(client, key, startedMs + this.#commandTimeoutMs);
        return outcomes;
      });
    } catch (error) {
      // Unreachable, or not acknowledged as durable: no record of the batch can be counted on.
      const reason = error instanceof Error ? error : this.#connection.translate(error);
      return batch.map(() => ({ status: 'rejected', reason }));
    }
  }

  async readRecords(stream: string, afterId: string, count: number, options: ReadRecordsOptions = {}): Promise<StoredRecord[]> {
    checkCount(count);
    // '(' makes the start exclusive (Redis >= 6.2).
    const start = afterId === '0' ? '-' : `(${afterId}`;
    const key = this.#key('stream', stream);
    const entries = await this.#connection.run(this.#commandTimeoutMs, async (client) => {
      let end = '+';
      if (options.settledForMs) {
        // A record's id starts with the Redis time of its append, in ms.
        const clock = await this.#redisClock();
        end = String(Math.max(0, Math.floor(Date.now() + clock.offsetMs - clock.uncertaintyMs - options.settledForMs)));
      }
      const read: [string, ...string[]] = ['XRANGE', key, start, end, 'COUNT', String(count)];
      const plan = this.durability === 'replica' ? await this.#durabilityPlan() : null;
      if (plan?.wait !== 'wait') return client.xrange(key, start, end, 'COUNT', count);
      // `replica`: the read is followed by a WAIT, as a consume is. An old primary that the
      // replica being promoted has already left (a switchover in progress) still answers reads,
      // but cannot gather every replica: what it holds beyond the new primary's copy is consumes
      // that never counted, and records that must not reach the audit log nor move its cursor.
      const replicas = this.#replicasFor(client, plan, key);
      const [[readError, reply], acknowledged] = await this.#inOrder(client, [read, acknowledgementCommand(plan, Date.now() + READ_CHECK_MS, replicas)]) as [[Error | null, unknown], [Error | null, unknown]];
      if (readError) throw readError;
      const notPrimary = acknowledgementError(plan, acknowledged, replicas);
      if (notPrimary) throw new StoreError('STORE_NOT_DURABLE', `records are read only from a primary with every replica that could be promoted: ${notPrimary.message}`, { cause: notPrimary });
      return reply as [string, string[]][];
    });
    return entries.map(([id, flat]) => {
      const fields: Record<string, string> = {};
      for (let i = 0; i + 1 < flat.length; i += 2) fields[flat[i]!] = flat[i + 1]!;
      return { id, fields };
    });
  }

  async countRecords(stream: string): Promise<number> {
    return this.#connection.run(this.#commandTimeoutMs, (client) => client.xlen(this.#key('stream', stream)));
  }

  async trimRecords(stream: string, upToId: string): Promise<void> {
    const match = /^(\d+)-(\d+)$/.exec(upToId);
    if (!match) throw new RangeError(`invalid stream id: ${JSON.stringify(upToId)}`);
    // XTRIM MINID keeps ids >= the threshold: the threshold is the id right after upToId.
    const threshold = `${match[1]}-${BigInt(match[2] as string) + 1n}`;
    await this.#connection.run(this.#commandTimeoutMs, (client) => client.xtrim(this.#key('stream', stream), 'MINID', threshold));
  }

  async ping(): Promise<void> {
    // A cluster answers PING from any node; every primary must be reachable to serve every slot.
    await this.#connection.run(this.#commandTimeoutMs, (client) => Promise.all(primariesOf(client).map((node) => node.ping())));
  }

  /** Quits cleanly (disconnects if that fails). Idempotent; every other method then rejects. */
  async close(): Promise<void> {
    // A last try at what is owed; what stays owed is lost with the process.
    await this.#releases.flush().catch(() => undefined);
    this.#releases.stop();
    this.#sentinels?.close();
    await this.#connection.close();
  }

  #key(namespace: 'once' | 'revoked' | 'bucket' | 'stream' | 'epoch', key: string): string {
    return `${this.#prefix}${namespace}:${key}`;
  }

  /**
   * After a write to `key` on this connection: waits until the durability mode's acknowledgement
   * (WAITAOF or WAIT, sent to the server holding `key`'s slot, after the write on the same
   * connection) or rejects with STORE_NOT_DURABLE by `deadlineMs`.
   */
  async #awaitDurable(client: Client, key: string, deadlineMs: number): Promise<void> {
    const plan = await this.#durabilityPlan();
    if (plan === null) return;
    const replicas = this.#replicasFor(client, plan, key);
    // The keyed EXISTS takes the acknowledgement to the node of that key's slot in a cluster.
    const replies = await this.#inOrder(client, [['EXISTS', key], acknowledgementCommand(plan, deadlineMs, replicas)]);
    const notDurable = acknowledgementError(plan, replies[1], replicas);
    if (notDurable) throw notDurable;
  }

  /**
   * Sends `commands` in order on one connection and answers their replies as [error, reply] pairs.
   * One server: as separate commands, which the corked socket sends in one write
   * (redis-connection.ts), without an ioredis Pipeline object (createRedisClient says what those
   * cost). A Cluster: as a pipeline, which goes whole to the node of its first keyed command, where
   * a WAIT must run.
   */
  async #inOrder(client: Client, commands: [string, ...string[]][]): Promise<[Error | null, unknown][]> {
    if (client.isCluster) {
      const pipeline = client.pipeline();
      for (const [name, ...args] of commands) pipeline.call(name, ...args);
      const replies = ((await pipeline.exec()) ?? []) as [Error | null, unknown][];
      // The client follows a redirection itself only for a pipeline of reads; these hold a write
      // or a WAIT, so a MOVED (the slot has a new primary: a failover) comes back here. Refreshing
      // the slot map sends the next commands to the new primary instead of failing until the
      // client's periodic refresh.
      if (client instanceof Cluster && replies.some(([error]) => error !== null && /^(MOVED|ASK) /.test(error.message))) client.refreshSlotsCache();
      return replies;
    }
    const settled = await Promise.allSettled(commands.map(([name, ...args]) => client.call(name, ...args)));
    return settled.map((result) => (result.status === 'fulfilled' ? [null, result.value] : [result.reason as Error, null]));
  }

  /**
   * The consume script and, when the durability mode asks for one, its acknowledgement, sent
   * together (#inOrder): one round trip instead of two. The script goes as a plain EVALSHA so that the
   * acknowledgement surely follows it on the connection; only when the server does not know the
   * script (a new server, SCRIPT FLUSH) does it go the two-step way, loading it with EVAL first.
   * `notDurable` says why a consume that happened was not acknowledged.
   */
  async #consumeAndAcknowledge(
    client: Client,
    plan: AcknowledgementPlan | null,
    keys: string[],
    args: string[],
    marker: string,
    ackDeadlineMs: number,
  ): Promise<{ reply: [number, string]; notDurable?: unknown }> {
    if (plan === null) return { reply: await runConsumeScript(client, keys, args) };
    const replicas = this.#replicasFor(client, plan, marker);
    const replies = await this.#inOrder(client, [['EVALSHA', CONSUME_SCRIPT_SHA, String(keys.length), ...keys, ...args], acknowledgementCommand(plan, ackDeadlineMs, replicas)]);
    const [scriptError, reply] = replies[0] ?? [new Error('no reply')];
    if (scriptError === null) {
      const notDurable = acknowledgementError(plan, replies[1], replicas);
      return { reply: reply as [number, string], ...(notDurable ? { notDurable } : {}) };
    }
    if (!/NOSCRIPT/.test(scriptError.message)) throw scriptError;
    const loaded = await runConsumeScript(client, keys, args);
    if (loaded[0] !== 1) return { reply: loaded };
    try {
      await this.#awaitDurable(client, marker, ackDeadlineMs);
      return { reply: loaded };
    } catch (error) {
      return { reply: loaded, notDurable: error };
    }
  }

  /**
   * Undoes a consume that did not count and waits until the undo is as durable as the consume was
   * meant to be: an undo the old primary took but no replica did would be lost in a failover, and
   * the promoted replica would keep the consume's marker and record. Rejects when it is not
   * acknowledged; the caller then owes it (PendingReleases), and sending it again is harmless.
   */
  async #releaseDurably(client: Client, release: PendingRelease): Promise<void> {
    await runReleaseScript(client, release);
    await this.#awaitDurable(client, release.keys[0]!, Date.now() + this.#commandTimeoutMs * 0.9);
  }

  /** What acknowledges a write in this durability mode (null: nothing to wait for), read from the servers. */
  async #durabilityPlan(): Promise<AcknowledgementPlan | null> {
    if (this.durability === 'none') return null;
    const plan = await this.#durability.current();
    if (!plan.ok) throw new StoreError('STORE_NOT_DURABLE', `durability ${plan.durability} cannot be kept: ${plan.detail}`);
    return plan.wait === 'none' ? null : (plan as AcknowledgementPlan);
  }

  /** How many replicas must acknowledge a write to `key`: those of the primary holding its slot. */
  #replicasFor(client: Client, plan: AcknowledgementPlan, key: string): number {
    if (plan.replicas === undefined) return 1;
    const primary = client instanceof Cluster ? client.slots[clusterSlotOf(key)]?.[0] : undefined;
    return requiredReplicas(plan.replicas, primary);
  }

  /** Redis's clock relative to ours, measured on first use and again every 30 s. */
  async #redisClock(): Promise<{ offsetMs: number; uncertaintyMs: number }> {
    const known = this.#clock;
    if (known && Date.now() - known.measuredAtMs < CLOCK_OFFSET_MAX_AGE_MS) return known;
    const measured = await measureClockOffset(this.#connection.client);
    this.#clock = { measuredAtMs: Date.now(), ...measured };
    return measured;
  }
}

/** `epoch:{org}` for a key carrying the `{org}` hash tag; one epoch for keys without a tag. */
function epochKeyOf(key: string): string {
  const tag = /\{([^}]*)\}/.exec(key)?.[1];
  return tag ? `epoch:{${tag}}` : 'epoch';
}
