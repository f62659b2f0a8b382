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

export interface Db extends Queryable {
  readonly kind: 'postgres' | 'pglite';
  /** Runs `fn` in one transaction: committed when it resolves, rolled back when it throws. */
  transaction<T>(fn: (tx: Queryable) => Promise<T>): Promise<T>;
  /** Rejects when the database cannot be reached. */
  ping(): Promise<void>;
  close(): Promise<void>;
}
