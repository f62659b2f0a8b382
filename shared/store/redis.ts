/**
 * The production `SharedStore`, on Redis (ioredis 5). Every replica of the authority and every
 * proxy replica points at the same Redis, so consume-once, revocations, rate limits and the
 * verification stream are shared.
 *
 * Keys are `<keyPrefix><namespace>:<caller's key>` with namespaces `once`, `revoked`, `bucket` and
 * `stream`, so the four kinds of state can never collide (as in `MemoryStore`). The caller's `{org}`
 * hash tag is the first braces in the full key, so a permit marker and its organization's stream
 * share a Redis Cluster slot; hence the prefix may not contain braces.
 *
 * Fails fast: while Redis is unreachable every method rejects (code `STORE_UNAVAILABLE`) within
 * about `commandTimeoutMs`, and callers fail closed. Nothing is queued for later, so a request that
 * was already refused can never consume a permit once Redis is back. The client keeps
 * reconnecting in the background (capped backoff) and the store recovers by itself.
 *
 * @example
 *   const store = new RedisStore({ url: 'redis://127.0.0.1:6379' });
 *   const outcome = await store.consumePermit('permit:{org_1}:abc', 65_000, {
 *     stream: 'verifications:{org_1}',
 *     fields: { permit_id: 'abc', outcome: 'allow' },
 *   }); // 'consumed', and the record is in the stream
 *   await store.close();
 */
import { Redis } from 'ioredis';
import { StoreError, checkCount, checkFields, checkTtl } from './store-errors.js';
import { assertBucketSpec, bucketResult } from './token-bucket.js';
import type {
  PermitConsumption,
  RecordAppend,
  SharedStore,
  StoredRecord,
  TokenBucketResult,
  TokenBucketSpec,
} from './types.js';

export interface RedisStoreOptions {
  /** `redis://` or `rediss://` URL, credentials and database included. */
  url: string;
  /** Prepended to every key. Default `countersign:`. Must not contain `{` or `}`. */
  keyPrefix?: string;
  /** TCP connect timeout. Default 1000 ms. */
  connectTimeoutMs?: number;
  /**
   * Bound on each command, and on waiting for a (re)connection before sending it. Default
   * 1000 ms. A call rejects after at most about twice this.
   */
  commandTimeoutMs?: number;
}

/** Lets a bucket key outlive the moment it is full by this much, against rounding. */
const BUCKET_EXPIRY_MARGIN_MS = 1000;
/** Upper bound of the reconnect backoff. */
const MAX_RECONNECT_DELAY_MS = 2000;

/**
 * consumePermit. KEYS[1]: the marker; KEYS[2]: the key's revocation entry; KEYS[3], optional: the
 * stream. ARGV[1]: TTL in ms; ARGV[2..]: field, value, ... Returns -1 when the key is revoked, 1
 * when this call set the marker, 0 when it was set already. The stream's type is checked before
 * the marker is set, because a script is not rolled back: an XADD failing after SET would consume
 * the key without its record.
 */
const CONSUME_SCRIPT = `
if redis.call('EXISTS', KEYS[2]) == 1 then
  return -1
end
if #KEYS > 2 then
  local kind = redis.call('TYPE', KEYS[3])['ok']
  if kind ~= 'none' and kind ~= 'stream' then
    return redis.error_reply('WRONGTYPE the record stream key holds a ' .. kind)
  end
end
if not redis.call('SET', KEYS[1], '1', 'NX', 'PX', ARGV[1]) then
  return 0
end
if #KEYS > 2 then
  redis.call('XADD', KEYS[3], '*', unpack(ARGV, 2))
end
return 1
`;

/**
 * Mirrors takeFromBucket in token-bucket.ts operation for operation. KEYS[1]: the bucket hash.
 * ARGV: capacity, refillPerMinute, nowMs, expiry margin in ms. Numbers travel as '%.17g' strings
 * both ways: a double survives that exactly, while Lua truncates a returned number to an integer
 * and its default tostring keeps only 14 digits.
 */
const TAKE_TOKEN_SCRIPT = `
local capacity = tonumber(ARGV[1])
local perMinute = tonumber(ARGV[2])
local now = tonumber(ARGV[3])
local margin = tonumber(ARGV[4])
local tokens = capacity
local state = redis.call('HMGET', KEYS[1], 'tokens', 'updatedAtMs')
if state[1] and state[2] then
  local updated = tonumber(state[2])
  now = math.max(now, updated)
  tokens = math.min(capacity, tonumber(state[1]) + ((now - updated) * perMinute) / 60000)
end
local allowed = 0
if tokens >= 1 then
  tokens = tokens - 1
  allowed = 1
end
local tokensText = string.format('%.17g', tokens)
local nowText = string.format('%.17g', now)
redis.call('HSET', KEYS[1], 'tokens', tokensText, 'updatedAtMs', nowText)
-- msUntilFull in token-bucket.ts
local untilFull = math.max(0, math.ceil(((capacity - tokens) * 60000) / perMinute))
redis.call('PEXPIRE', KEYS[1], string.format('%.0f', untilFull + margin))
return {allowed, tokensText, nowText}
`;

interface ScriptedRedis extends Redis {
  countersignConsume(numberOfKeys: number, ...keysAndArgs: string[]): Promise<number>;
  countersignTakeToken(key: string, ...args: string[]): Promise<[number, string, string]>;
}

export class RedisStore implements SharedStore {
  readonly kind = 'redis' as const;

  readonly #client: ScriptedRedis;
  readonly #prefix: string;
  readonly #commandTimeoutMs: number;
  #closed = false;
  /** Why the last connection attempt failed; the cause of STORE_UNAVAILABLE rejections. */
  #lastError: Error | undefined;
  /** Settles on the next 'ready' (or on close); shared so waiters add no listeners each. */
  #readySignal: { promise: Promise<void>; resolve: () => void } | undefined;

  constructor(options: RedisStoreOptions) {
    this.#prefix = options.keyPrefix ?? 'countersign:';
    if (/[{}]/.test(this.#prefix)) {
      throw new RangeError('keyPrefix must not contain braces: they would replace the {org} hash tag');
    }
    this.#commandTimeoutMs = options.commandTimeoutMs ?? 1000;
    const client = new Redis(options.url, {
      connectTimeout: options.connectTimeoutMs ?? 1000,
      commandTimeout: this.#commandTimeoutMs,
      // Reject instead of queueing while disconnected, and reject (not resend) commands in
      // flight when a connection drops: a late consume would burn a permit already refused.
      enableOfflineQueue: false,
      maxRetriesPerRequest: 0,
      autoResendUnfulfilledCommands: false,
      retryStrategy: (attempt) => Math.min(50 * 2 ** Math.min(attempt, 10), MAX_RECONNECT_DELAY_MS),
      // After a failover the old primary answers READONLY; reconnecting finds the new one.
      reconnectOnError: (error) => error.message.startsWith('READONLY'),
      // Commands issued by concurrent requests in one turn of the event loop go out in one write
      // (a rate-limit check per API request, a consume per gated request): fewer syscalls under
      // load, and each command still gets its own answer or error.
      enableAutoPipelining: true,
    }) as ScriptedRedis;
    // Without a listener, an unreachable Redis would crash the process with an 'error' event.
    client.on('error', (error: Error) => {
      this.#lastError = error;
    });
    client.on('ready', () => {
      this.#lastError = undefined;
      this.#readySignal?.resolve();
      this.#readySignal = undefined;
    });
    client.defineCommand('countersignConsume', { lua: CONSUME_SCRIPT });
    client.defineCommand('countersignTakeToken', { numberOfKeys: 1, lua: TAKE_TOKEN_SCRIPT });
    this.#client = client;
  }

  async consumePermit(key: string, ttlMs: number, record?: RecordAppend): Promise<PermitConsumption> {
    const ttl = String(checkTtl(ttlMs));
    if (record) checkFields(record.fields);
    const keys = [this.#key('once', key), this.#key('revoked', key)];
    const result = await this.#run((client) =>
      record
        ? client.countersignConsume(3, ...keys, this.#key('stream', record.stream), ttl, ...Object.entries(record.fields).flat())
        : client.countersignConsume(2, ...keys, ttl),
    );
    return result === 1 ? 'consumed' : result === -1 ? 'revoked' : 'already_used';
  }

  async revoke(id: string, ttlMs: number): Promise<void> {
    const ttl = checkTtl(ttlMs);
    await this.#run((client) => client.set(this.#key('revoked', id), '1', 'PX', ttl));
  }

  async isRevoked(id: string): Promise<boolean> {
    const count = await this.#run((client) => client.exists(this.#key('revoked', id)));
    return count > 0;
  }

  async takeToken(key: string, bucket: TokenBucketSpec, nowMs: number): Promise<TokenBucketResult> {
    assertBucketSpec(bucket, nowMs);
    const [allowed, tokens, now] = await this.#run((client) =>
      client.countersignTakeToken(
        this.#key('bucket', key),
        String(bucket.capacity),
        String(bucket.refillPerMinute),
        String(nowMs),
        String(BUCKET_EXPIRY_MARGIN_MS),
      ),
    );
    const state = { tokens: Number(tokens), updatedAtMs: Number(now) };
    return bucketResult({ allowed: allowed === 1, state }, bucket);
  }

  async appendRecord(stream: string, fields: Record<string, string>): Promise<string> {
    checkFields(fields);
    const id = await this.#run((client) =>
      client.xadd(this.#key('stream', stream), '*', ...Object.entries(fields).flat()),
    );
    if (id === null) throw new StoreError('STORE_UNAVAILABLE', 'Redis did not return a record id');
    return id;
  }

  async readRecords(stream: string, afterId: string, count: number): Promise<StoredRecord[]> {
    checkCount(count);
    // '(' makes the start exclusive (Redis >= 6.2).
    const start = afterId === '0' ? '-' : `(${afterId}`;
    const entries = await this.#run((client) =>
      client.xrange(this.#key('stream', stream), start, '+', 'COUNT', count),
    );
    return entries.map(([id, flat]) => {
      const fields: Record<string, string> = {};
      for (let i = 0; i + 1 < flat.length; i += 2) fields[flat[i]!] = flat[i + 1]!;
      return { id, fields };
    });
  }

  async countRecords(stream: string): Promise<number> {
    return this.#run((client) => client.xlen(this.#key('stream', stream)));
  }

  async trimRecords(stream: string, upToId: string): Promise<void> {
    const match = /^(\d+)-(\d+)$/.exec(upToId);
    if (!match) throw new RangeError(`invalid stream id: ${JSON.stringify(upToId)}`);
    // XTRIM MINID keeps ids >= the threshold: the threshold is the id right after upToId.
    const threshold = `${match[1]}-${BigInt(match[2] as string) + 1n}`;
    await this.#run((client) => client.xtrim(this.#key('stream', stream), 'MINID', threshold));
  }

  async ping(): Promise<void> {
    await this.#run((client) => client.ping());
  }

  /** Quits cleanly (disconnects if that fails). Idempotent; every other method then rejects. */
  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    this.#readySignal?.resolve();
    this.#readySignal = undefined;
    if (this.#client.status === 'ready') {
      try {
        await this.#client.quit();
        return;
      } catch {
        // fall through to a hard disconnect
      }
    }
    this.#client.disconnect();
  }

  #key(namespace: 'once' | 'revoked' | 'bucket' | 'stream', key: string): string {
    return `${this.#prefix}${namespace}:${key}`;
  }

  /** Runs one command once the connection is ready, mapping failures to `StoreError`s. */
  async #run<T>(command: (client: ScriptedRedis) => Promise<T>): Promise<T> {
    try {
      await this.#ready();
      return await command(this.#client);
    } catch (error) {
      throw this.#translate(error);
    }
  }

  /**
   * Waits for the connection up to `commandTimeoutMs`: a store used right after construction,
   * or during a brief reconnect, should not fail, but an outage must not hold callers long.
   */
  async #ready(): Promise<void> {
    if (this.#closed) throw closedError();
    if (this.#client.status === 'ready') return;
    if (!this.#readySignal) {
      let resolve!: () => void;
      const promise = new Promise<void>((r) => (resolve = r));
      this.#readySignal = { promise, resolve };
    }
    let timer: NodeJS.Timeout | undefined;
    const timeout = new Promise<never>((_, reject) => {
      timer = setTimeout(
        () =>
          reject(
            new StoreError(
              'STORE_UNAVAILABLE',
              `Redis is not reachable${this.#lastError ? `: ${this.#lastError.message}` : ''}`,
              { cause: this.#lastError },
            ),
          ),
        this.#commandTimeoutMs,
      );
    });
    try {
      await Promise.race([this.#readySignal.promise, timeout]);
    } finally {
      clearTimeout(timer);
    }
    if (this.#closed) throw closedError();
  }

  #translate(error: unknown): Error {
    if (error instanceof StoreError) return error;
    if (this.#closed) return closedError(error);
    // Redis answered (a script or type error): a bug or a misconfiguration, not an outage.
    if (error instanceof Error && error.name === 'ReplyError') return error;
    const message = error instanceof Error ? error.message : String(error);
    return new StoreError('STORE_UNAVAILABLE', `Redis command failed: ${message}`, { cause: error });
  }
}

function closedError(cause?: unknown): StoreError {
  return new StoreError('STORE_CLOSED', 'the shared store is closed', { cause });
}
