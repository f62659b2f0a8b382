/**
 * Group commit: concurrent submissions share transactions, and a failing batch is retried item by
 * item so that only the bad item fails.
 */
import t from 'tap';
import type { Queryable } from '../../authority/store/db.js';
import { GroupCommit } from '../../authority/store/group-commit.js';
import { dbBackends } from '../helpers/db.js';

for (const backend of dbBackends()) {
  t.test(`group commit on ${backend.name}`, async (t) => {
    const { db, cleanup } = await backend.open();
    t.teardown(cleanup);
    await db.exec('CREATE TABLE gc_items (id int PRIMARY KEY CHECK (id >= 0))');
    let transactions = 0;
    const write = async (tx: Queryable, ids: number[]) => {
      transactions += 1;
      await tx.query(`INSERT INTO gc_items (id) SELECT unnest($1::int[])`, [ids]);
      return ids.map((id) => `stored ${id}`);
    };
    const writer = new GroupCommit(db, write, { maxBatch: 16 });

    const outcomes = await Promise.all(Array.from({ length: 40 }, (_, id) => writer.submit(id)));
    t.same(outcomes, Array.from({ length: 40 }, (_, id) => `stored ${id}`), 'every submission gets its own outcome');
    t.ok(transactions < 40, `40 submissions were written in ${transactions} transactions`);
    t.equal((await db.query('SELECT id FROM gc_items')).length, 40);

    transactions = 0;
    const mixed = await Promise.allSettled([100, 101, -1, 102].map((id) => writer.submit(id)));
    t.same(mixed.map((result) => result.status), ['fulfilled', 'fulfilled', 'rejected', 'fulfilled'], 'only the bad item fails');
    const stored = (await db.query<{ id: number }>('SELECT id FROM gc_items WHERE id >= 100 ORDER BY id')).map((row) => row.id);
    t.same(stored, [100, 101, 102], 'the others are stored exactly once');
  });
}
