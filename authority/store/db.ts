/**
 * The authority's relational storage: Postgres in production (`PgDb`), PGlite (Postgres compiled
 * to WASM, same SQL) for the embedded default. Both pass one suite
 * (test/integration/db.test.ts), and both return the same JS types: timestamptz → Date,
 * int8 → number, jsonb → parsed value, text[] → string[].
 *
 * @example
 *   const rows = await db.query<{ id: string }>('SELECT id FROM organizations WHERE name = $1', ['default']);
 *   await db.transaction(async (tx) => { await tx.query('INSERT ...', [...]); });
 */
export interface Queryable {
  query<Row = Record<string, unknown>>(sql: string, params?: readonly unknown[]): Promise<Row[]>;
  /** Runs a script of several statements without parameters (migrations). */
  exec(sql: string): Promise<void>;
}

/**
 * Receives the notices of one `LISTEN` channel. Notices sent while the listening connection is
 * down are lost, so a listener must treat `interrupted` as "anything may have changed" and must
 * not rely on notices until `resumed`. Listening starts interrupted: the first call is `resumed`
 * (or `interrupted` when the first connection fails).
 */
export interface ChangeListener {
  /** `payload` is the second argument of `pg_notify`. */
  notice(payload: string): void;
  interrupted(error: Error): void;
  resumed(): void;
}

/** Stops listening. */
export type StopListening = () => Promise<void>;

/** Channel names are SQL identifiers spelled into `LISTEN`, so only this form is accepted. */
export const CHANNEL_NAME = /^[a-z_][a-z0-9_]{0,62}$/;

export interface Db extends Queryable {
  readonly kind: 'postgres' | 'pglite';
  /** Runs `fn` in one transaction: committed when it resolves, rolled back when it throws. */
  transaction<T>(fn: (tx: Queryable) => Promise<T>): Promise<T>;
  /**
   * Delivers the notices sent with `pg_notify(channel, …)` by any connection, after their
   * transaction commits. On Postgres a dedicated connection listens and reconnects on its own.
   */
  listen(channel: string, listener: ChangeListener): StopListening;
  /** Rejects when the database cannot be reached. */
  ping(): Promise<void>;
  close(): Promise<void>;
}
