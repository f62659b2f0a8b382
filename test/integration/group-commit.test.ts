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

for (const backend of dbBackends()) {
  t.test(`group commit on ${backend.name}: up to maxInFlight transactions at once`, async (t) => {
    const { db, cleanup } = await backend.open();
    t.teardown(cleanup);
    let running = 0;
    let most = 0;
    let releaseFirst!: () => void;
    const firstHeld = new Promise<void>((resolve) => (releaseFirst = resolve));
    let firstStarted!: () => void;
    const started = new Promise<void>((resolve) => (firstStarted = resolve));
    const batches: number[][] = [];
    const write = async (_tx: Queryable, ids: number[]) => {
      running += 1;
      most = Math.max(most, running);
      batches.push(ids);
      if (ids.includes(0)) {
        firstStarted();
        await firstHeld;
      }
      running -= 1;
      return ids;
    };
    // PGlite has one connection, so its transactions queue inside PGlite whatever the writer allows.
    const maxInFlight = backend.name === 'postgres' ? 2 : 1;
    const writer = new GroupCommit(db, write, { maxBatch: 4, maxInFlight });
    const first = writer.submit(0);
    await started;
    const rest = Array.from({ length: 12 }, (_, i) => writer.submit(i + 1));
    if (maxInFlight === 2) {
      // The second transaction runs (and others after it) while the first still holds its batch.
      const done = await Promise.all(rest);
      t.same(done, Array.from({ length: 12 }, (_, i) => i + 1), 'later batches committed while the first was held');
      t.equal(most, 2, 'never more than maxInFlight at once');
      releaseFirst();
    } else {
      releaseFirst();
      await Promise.all(rest);
      t.equal(most, 1, 'one at a time');
    }
    t.equal(await first, 0);
    t.ok(batches.every((batch) => batch.length <= 4), 'no batch above maxBatch');
    t.throws(() => new GroupCommit(db, write, { maxBatch: 4, maxInFlight: 0 }), RangeError);
  });
}

// Regression: a batch's slot used to be freed only after its callers had resumed (each building
// and sending its answer), so the queued batch reached the database that much later.
for (const backend of dbBackends()) {
  t.test(`group commit on ${backend.name}: the next batch is handed to the writer before the last one's callers resume`, async (t) => {
    const { db, cleanup } = await backend.open();
    t.teardown(cleanup);
    const batches: number[][] = [];
    let releaseFirst!: () => void;
    const firstHeld = new Promise<void>((resolve) => (releaseFirst = resolve));
    const write = async (tx: Queryable, ids: number[]) => {
      batches.push(ids);
      if (ids.includes(0)) await firstHeld;
      await tx.query('SELECT 1');
      return ids.map((id) => `stored ${id}`);
    };
    // One statement per batch, as evaluate writes: the writer is called as the batch starts.
    const writer = new GroupCommit(db, write, { maxBatch: 8, maxInFlight: 1, transaction: false });
    const first = writer.submit(0);
    const queued = [1, 2, 3].map((id) => writer.submit(id));
    const batchesWhenFirstResumed = first.then(() => batches.length);
    releaseFirst();
    t.equal(await batchesWhenFirstResumed, 2, 'the queued batch was handed to the writer when the first caller resumed');
    t.same(await Promise.all(queued), ['stored 1', 'stored 2', 'stored 3']);
    t.same(batches, [[0], [1, 2, 3]], 'the three queued submissions went in one batch');
  });
}
