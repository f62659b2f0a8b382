/**
 * createExecutionRecords: execution.observed records go to the record backlog in batches (one
 * Redis write for several requests), and none is lost: a waiting record is handed over without
 * being asked, a full batch at once, close() hands over what waits and waits for what is in
 * flight, and a record the store cannot take is held by the backlog and written once it is back.
 */
import t from 'tap';
import { createExecutionRecords } from '../../proxy/execution-records.js';
import { createRecordBacklog } from '../../proxy/record-backlog.js';
import { recordingLogger, switchableStore, waitFor } from '../helpers/record-stores.js';

interface Append {
  batch: ReadonlyArray<Record<string, string>>;
  settle: () => void;
}

/** A backlog whose appends stay pending until the test settles them. */
function pendingBacklog() {
  const appends: Append[] = [];
  return {
    appends,
    records: {
      append(batch: ReadonlyArray<Record<string, string>>): Promise<void> {
        return new Promise<void>((resolve) => appends.push({ batch, settle: resolve }));
      },
    },
  };
}

const fields = (n: number) => ({ kind: 'execution.observed', request_id: `req-${n}` });
const requestIds = (batch: ReadonlyArray<Record<string, string>>) => batch.map((record) => record.request_id);

t.test('records added together are handed to the backlog together on a flush, in order', async (t) => {
  const { records: backlog, appends } = pendingBacklog();
  const records = createExecutionRecords({ records: backlog, flushAfterMs: 60_000 });
  records.add(fields(1));
  records.add(fields(2));
  records.add(fields(3));
  t.equal(appends.length, 0, 'nothing is appended while the batch waits');
  const flushed = records.flush();
  t.same(appends.map((append) => requestIds(append.batch)), [['req-1', 'req-2', 'req-3']], 'one flush hands over every waiting record, in order');
  appends[0]!.settle();
  await flushed;
  await records.close();
});

t.test('a waiting record is handed over without a flush being asked for', async (t) => {
  const { records: backlog, appends } = pendingBacklog();
  const records = createExecutionRecords({ records: backlog, flushAfterMs: 1 });
  records.add(fields(1));
  await waitFor('the batch to be handed over', () => appends.length === 1);
  t.same(requestIds(appends[0]!.batch), ['req-1']);
  appends[0]!.settle();
  await records.close();
});

t.test('a full batch is handed over at once', async (t) => {
  const { records: backlog, appends } = pendingBacklog();
  const records = createExecutionRecords({ records: backlog, flushAfterMs: 60_000, maxBatch: 2 });
  records.add(fields(1));
  t.equal(appends.length, 0);
  records.add(fields(2));
  t.equal(appends.length, 1, 'the second record filled the batch');
  t.same(requestIds(appends[0]!.batch), ['req-1', 'req-2']);
  appends[0]!.settle();
  await records.close();
});

t.test('close hands over what waits and resolves only after every batch is written or held', async (t) => {
  const { records: backlog, appends } = pendingBacklog();
  const records = createExecutionRecords({ records: backlog, flushAfterMs: 60_000 });
  records.add(fields(1));
  void records.flush();
  records.add(fields(2));
  let closed = false;
  const closing = records.close().then(() => (closed = true));
  t.equal(appends.length, 2, 'close handed over the waiting record');
  appends[0]!.settle();
  await new Promise((resolve) => setImmediate(resolve));
  t.equal(closed, false, 'close waits for the batch still in flight');
  appends[1]!.settle();
  await closing;
  t.equal(closed, true);
});

t.test('execution records the store cannot take are held, and written once it is back', async (t) => {
  const store = switchableStore();
  store.up = false;
  let failed = 0;
  const backlog = createRecordBacklog({ store, stream: 'org-1', logger: recordingLogger(), onAppendFailed: (count) => (failed += count) });
  t.teardown(() => backlog.close(0));
  const records = createExecutionRecords({ records: backlog, flushAfterMs: 60_000 });
  records.add(fields(1));
  records.add(fields(2));
  await records.flush();
  t.equal(failed, 2, 'both appends failed: counted');
  t.equal(backlog.size(), 2, 'and held');
  t.same(store.written, [], 'nothing reached the stream yet');
  store.up = true;
  await waitFor('the held records to be written', () => backlog.size() === 0);
  t.same(requestIds(store.written), ['req-1', 'req-2'], 'written once each, in order');
  await records.close();
});
