/**
 * `Db` on a real Postgres server through a `pg.Pool`.
 *
 * Rows come back with the same JS types as PGlite (see db.ts): int8 → number, timestamptz → Date,
 * jsonb → parsed value, text[] → string[]. The int8 mapping is installed on this pool only, so
 * other users of `pg` in the same process keep pg's defaults.
 *
 * One difference from PGlite stays: pg serialises a JS array parameter as a Postgres array, so a
 * jsonb parameter that is an array must be passed as `JSON.stringify(value)` (PGlite would accept
 * either). Objects are fine as they are.
 *
 * @example
 *   const db = new PgDb({ connectionString: process.env.DATABASE_URL!, max: 20 });
 *   await db.ping();
 *   const [row] = await db.query<{ n: number }>('SELECT count(*) AS n FROM organizations');
 *   await db.close();
 */
import pg from 'pg';
import { CHANNEL_NAME, type ChangeListener, type Db, type Queryable, type StopListening } from './db.js';

export interface PgDbOptions {
  connectionString: string;
  /** Pool size; pg's default is 10. */
  max?: number;
  /**
   * How long acquiring a connection (a new one, or a free slot of the pool) may take before it
   * fails; default `DEFAULT_CONNECT_TIMEOUT_MS`.
   */
  connectTimeoutMs?: number;
  /**
   * Called when an idle pooled connection fails (server restart, network drop). The pool discards
   * that connection and opens a new one on demand; without a listener Node would crash the process.
   * Default: a process warning.
   */
  onError?: (err: Error) => void;
}

/**
 * A database that does not answer (host down, packets dropped) fails a request after this long,
 * answered 503 with Retry-After (see unavailable.ts), instead of holding it until the client gives
 * up. A refused connection fails at once either way.
 */
export const DEFAULT_CONNECT_TIMEOUT_MS = 5_000;

const INT8_OID = 20;
const INT8_ARRAY_OID = 1016;

/**
 * int8 text → JS number. Refuses values a double cannot hold exactly, so a counter past 2^53 is an
 * error instead of a silently wrong number. PGlite uses the same function.
 */
export function parseInt8(text: string): number {
  const n = Number(text);
  if (!Number.isSafeInteger(n)) {
    throw new RangeError(`int8 value ${text} does not fit a JS number exactly`);
  }
  return n;
}

type Nested<T> = T | null | Nested<T>[];

function mapNested(value: Nested<string>, fn: (s: string) => number): Nested<number> {
  if (value === null) return null;
  if (Array.isArray(value)) return value.map((v) => mapNested(v, fn));
  return fn(value);
}

// pg-types declares its parameter as an enum of the built-in OIDs, which lacks the array types.
const builtinParser = pg.types.getTypeParser as (oid: number, format?: string) => (value: string) => unknown;

/** pg's parsers, except int8 and int8[] which become numbers like in PGlite. */
const pgliteCompatibleTypes = {
  getTypeParser: (oid: number, format?: string) => {
    if (format !== 'binary') {
      if (oid === INT8_OID) return parseInt8;
      if (oid === INT8_ARRAY_OID) {
        const parseStrings = builtinParser(INT8_ARRAY_OID) as (s: string) => Nested<string>;
        return (text: string) => mapNested(parseStrings(text), parseInt8);
      }
    }
    return builtinParser(oid, format);
  },
} as pg.CustomTypesConfig;

async function runQuery<Row>(target: pg.Pool | pg.PoolClient, sql: string, params?: readonly unknown[]): Promise<Row[]> {
  const result = await target.query(sql, params === undefined ? undefined : [...params]);
  return result.rows as Row[];
}

/** Reconnect delays of a listening connection: 100 ms doubling up to 5 s. */
const LISTEN_RETRY_MS = { first: 100, max: 5_000 };

export class PgDb implements Db {
  readonly kind = 'postgres' as const;
  private readonly pool: pg.Pool;
  private readonly listeners = new Set<StopListening>();
  private closing: Promise<void> | undefined;

  constructor(private readonly options: PgDbOptions) {
    this.pool = new pg.Pool({
      connectionString: options.connectionString,
      max: options.max,
      connectionTimeoutMillis: options.connectTimeoutMs ?? DEFAULT_CONNECT_TIMEOUT_MS,
      types: pgliteCompatibleTypes,
    });
    const onError =
      options.onError ??
      ((err: Error) => process.emitWarning(`idle Postgres connection failed: ${err.message}`, 'CountersignDbWarning'));
    this.pool.on('error', (err) => onError(err));
  }

  query<Row = Record<string, unknown>>(sql: string, params?: readonly unknown[]): Promise<Row[]> {
    return runQuery<Row>(this.pool, sql, params);
  }

  async exec(sql: string): Promise<void> {
    // Without parameters pg uses the simple query protocol, which accepts several statements.
    await this.pool.query(sql);
  }

  /**
   * Note: inside `fn`, use `tx` only. `db.query` there runs on another connection, outside the
   * transaction (and on PGlite it would wait for the transaction forever).
   */
  async transaction<T>(fn: (tx: Queryable) => Promise<T>): Promise<T> {
    const client = await this.pool.connect();
    let open = true;
    // Set when the connection can no longer be trusted; release(err) then destroys it.
    let broken: Error | undefined;
    // The pool listens for errors only on idle clients; a checked-out client that loses its
    // connection emits 'error', which without a listener would crash the process. The pending
    // query rejects with the same error, so recording it is enough.
    const onClientError = (err: Error): void => {
      broken ??= err;
    };
    client.on('error', onClientError);
    const guard = (): void => {
      // Same rule as PGlite: a tx handle kept after the transaction ended must not run on a
      // connection that is back in the pool (and maybe in someone else's transaction).
      if (!open) throw new Error('Transaction is closed');
    };
    const tx: Queryable = {
      query: async <Row = Record<string, unknown>>(sql: string, params?: readonly unknown[]) => {
        guard();
        return runQuery<Row>(client, sql, params);
      },
      exec: async (sql: string) => {
        guard();
        await client.query(sql);
      },
    };
    try {
      await client.query('BEGIN');
      const result = await fn(tx);
      const commit = await client.query('COMMIT');
      // Postgres answers COMMIT of a failed transaction with ROLLBACK and no error; PGlite throws.
      // Throw too, or a caller that swallowed a statement error would believe its writes landed.
      if (commit.command === 'ROLLBACK') {
        throw new Error('transaction was rolled back: a statement in it failed');
      }
      return result;
    } catch (err) {
      await client.query('ROLLBACK').catch((rollbackErr: unknown) => {
        broken = rollbackErr instanceof Error ? rollbackErr : new Error(String(rollbackErr));
      });
      throw err;
    } finally {
      open = false;
      client.off('error', onClientError);
      client.release(broken);
    }
  }

  /**
   * LISTEN on a connection of its own (a pooled one would be handed to other queries). When it
   * fails, the listener hears `interrupted` and the connection is retried with backoff.
   */
  listen(channel: string, listener: ChangeListener): StopListening {
    if (!CHANNEL_NAME.test(channel)) throw new RangeError(`not a channel name: ${channel}`);
    let stopped = false;
    let current: pg.Client | undefined;
    let retry: NodeJS.Timeout | undefined;
    let failures = 0;

    const lost = (client: pg.Client, error: Error): void => {
      // 'error' and 'end' both arrive for one failure; only the first one counts.
      if (client !== current) return;
      current = undefined;
      client.end().catch(() => undefined);
      if (stopped) return;
      listener.interrupted(error);
      const delay = Math.min(LISTEN_RETRY_MS.first * 2 ** failures++, LISTEN_RETRY_MS.max);
      retry = setTimeout(connect, delay);
      retry.unref();
    };

    const connect = (): void => {
      const client = new pg.Client({
        connectionString: this.options.connectionString,
        connectionTimeoutMillis: this.options.connectTimeoutMs ?? DEFAULT_CONNECT_TIMEOUT_MS,
      });
      current = client;
      client.on('notification', (message) => {
        if (message.channel === channel) listener.notice(message.payload ?? '');
      });
      client.on('error', (error) => lost(client, error));
      client.on('end', () => lost(client, new Error('the listening connection ended')));
      client
        .connect()
        .then(() => client.query(`LISTEN ${channel}`))
        .then(() => {
          if (client !== current) return;
          failures = 0;
          listener.resumed();
        })
        .catch((error: unknown) => lost(client, error instanceof Error ? error : new Error(String(error))));
    };

    connect();
    const stop = async (): Promise<void> => {
      stopped = true;
      this.listeners.delete(stop);
      clearTimeout(retry);
      const client = current;
      current = undefined;
      await client?.end().catch(() => undefined);
    };
    this.listeners.add(stop);
    return stop;
  }

  async ping(): Promise<void> {
    await this.pool.query('SELECT 1');
  }

  /** Stops listening and ends the pool; safe to call more than once. */
  close(): Promise<void> {
    this.closing ??= (async () => {
      await Promise.all([...this.listeners].map((stop) => stop()));
      await this.pool.end();
    })();
    return this.closing;
  }
}
