/**
 * createExecutionRecords: execution.observed records go out in batches (one Redis write for
 * several requests), and none is lost: a waiting record is appended without being asked, a full
 * batch at once, and close() appends what waits and waits for what is in flight.
 */
import t from 'tap';
import { createExecutionRecords } from '../../proxy/execution-records.js';

interface Append {
  stream: string;
  fields: Record<string, string>;
  settle: (error?: Error) => void;
}

/** A store whose appends stay pending until the test settles them. */
function pendingStore() {
  const appends: Append[] = [];
  let onAppend: () => void = () => undefined;
  return {
    appends,
    /** Resolves once `count` appends have been issued. */
    issued(count: number): Promise<void> {
      return new Promise((resolve) => {
        const check = () => (appends.length >= count ? resolve() : (onAppend = check));
        check();
      });
    },
    store: {
      /** Each record of the batch is settled on its own, so a test can fail one and not the others. */
      appendRecords(stream: string, batch: ReadonlyArray<Record<string, string>>): Promise<PromiseSettledResult<string>[]> {
        const each = batch.map(
          (fields) => new Promise<string>((resolve, reject) => appends.push({ stream, fields, settle: (error) => (error ? reject(error) : resolve('1-0')) })),
        );
        onAppend();
        return Promise.allSettled(each);
      },
    },
  };
}

const fields = (n: number) => ({ kind: 'execution.observed', request_id: `req-${n}` });

t.test('records added together are appended together on a flush, to the gate stream', async (t) => {
  const { store, appends } = pendingStore();
  const records = createExecutionRecords({ store, stream: 'org-1', onError: () => t.fail('no error expected'), flushAfterMs: 60_000 });
  records.add(fields(1), 'req-1');
  records.add(fields(2), 'req-2');
  records.add(fields(3), 'req-3');
  t.equal(appends.length, 0, 'nothing is appended while the batch waits');
  const flushed = records.flush();
  t.same(appends.map((a) => [a.stream, a.fields.request_id]), [['org-1', 'req-1'], ['org-1', 'req-2'], ['org-1', 'req-3']], 'one flush issues every waiting append, in order');
  for (const append of appends) append.settle();
  await flushed;
  await records.close();
});

t.test('a waiting record is appended without a flush being asked for', async (t) => {
  const { store, appends, issued } = pendingStore();
  const records = createExecutionRecords({ store, stream: 'org-1', onError: () => t.fail('no error expected'), flushAfterMs: 1 });
  records.add(fields(1), 'req-1');
  await issued(1);
  t.equal(appends[0]?.fields.request_id, 'req-1');
  appends[0]!.settle();
  await records.close();
});

t.test('a full batch is appended at once', async (t) => {
  const { store, appends } = pendingStore();
  const records = createExecutionRecords({ store, stream: 'org-1', onError: () => t.fail('no error expected'), flushAfterMs: 60_000, maxBatch: 2 });
  records.add(fields(1), 'req-1');
  t.equal(appends.length, 0);
  records.add(fields(2), 'req-2');
  t.equal(appends.length, 2, 'the second record filled the batch');
  for (const append of appends) append.settle();
  await records.close();
});

t.test('a failed append is reported with its request id and does not affect the others', async (t) => {
  const { store, appends } = pendingStore();
  const failed: string[] = [];
  const records = createExecutionRecords({ store, stream: 'org-1', onError: (_error, requestId) => failed.push(requestId), flushAfterMs: 60_000 });
  records.add(fields(1), 'req-1');
  records.add(fields(2), 'req-2');
  const flushed = records.flush();
  appends[0]!.settle(new Error('Redis went away'));
  appends[1]!.settle();
  await flushed;
  t.same(failed, ['req-1']);
});

t.test('an onError that throws does not break the batch', async (t) => {
  const { store, appends } = pendingStore();
  const records = createExecutionRecords({ store, stream: 'org-1', onError: () => { throw new Error('a broken logger'); }, flushAfterMs: 60_000 });
  records.add(fields(1), 'req-1');
  const flushed = records.flush();
  appends[0]!.settle(new Error('Redis went away'));
  await t.resolves(flushed);
});

t.test('close appends what waits and resolves only after every append settled', async (t) => {
  const { store, appends } = pendingStore();
  const records = createExecutionRecords({ store, stream: 'org-1', onError: () => t.fail('no error expected'), flushAfterMs: 60_000 });
  records.add(fields(1), 'req-1');
  void records.flush();
  records.add(fields(2), 'req-2');
  let closed = false;
  const closing = records.close().then(() => (closed = true));
  t.equal(appends.length, 2, 'close appended the waiting record');
  appends[0]!.settle();
  await new Promise((resolve) => setImmediate(resolve));
  t.equal(closed, false, 'close waits for the append still in flight');
  appends[1]!.settle();
  await closing;
  t.equal(closed, true);
});
