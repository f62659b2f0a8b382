/**
 * The record backlog (proxy/record-backlog.ts): records the store cannot take are held, in order,
 * behind one another, and written once it is back; the caller never waits for that; past the
 * bound a record is dropped, counted and logged; held records survive a restart in the backlog
 * file; a retried append keeps the record's gate_record_id (the drain's test shows the duplicate
 * is recorded once: test/integration/verification-drain.test.ts).
 */
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import t, { type Test } from 'tap';
import { createRecordBacklog, openRecordBacklog, type RecordDropReason } from '../../proxy/record-backlog.js';
import { recordingLogger, switchableStore, waitFor } from '../helpers/record-stores.js';

const record = (n: number) => ({ kind: 'permit.rejected', request_id: `req-${n}`, gate_record_id: `id-${n}` });
const ids = (records: ReadonlyArray<Record<string, string>>) => records.map((fields) => fields.request_id);

function counters() {
  const dropped: Partial<Record<RecordDropReason, number>> = {};
  const state = { failed: 0, dropped };
  return {
    state,
    onAppendFailed: (count: number) => (state.failed += count),
    onDropped: (count: number, reason: RecordDropReason) => (dropped[reason] = (dropped[reason] ?? 0) + count),
  };
}

async function tempFile(t: Test): Promise<string> {
  const dir = await mkdtemp(join(tmpdir(), 'countersign-backlog-'));
  t.teardown(() => rm(dir, { recursive: true, force: true }));
  return join(dir, 'records.jsonl');
}

const fileLines = async (file: string) => (await readFile(file, 'utf8')).split('\n').filter((line) => line !== '');

t.test('with the store up, an append resolves once written; appends go out one at a time, in order', async (t) => {
  const store = switchableStore();
  const backlog = createRecordBacklog({ store, stream: 'org-1', logger: recordingLogger() });
  const first = backlog.append([record(1), record(2)]);
  const second = backlog.append([record(3)]);
  await first;
  t.same(ids(store.written).slice(0, 2), ['req-1', 'req-2'], 'the first append is written when it resolves');
  await second;
  t.same(ids(store.written), ['req-1', 'req-2', 'req-3']);
  t.equal(store.attempts, 2, 'the second waited for the first and went out on its own');
  t.equal(backlog.size(), 0);
  await backlog.close(1_000);
});

// Regression: an append made while the write before it was finishing (its loop done, the writer
// not yet marked idle) joined that writer, which never looked at the queue again: the record was
// never written and its caller, a refusal waiting for its record, never answered. Appends are made
// after each number of microtask hops behind the first write's completion, to land in that window.
t.test('an append made while the previous write is finishing is written, and its caller answered', async (t) => {
  for (let hops = 0; hops < 12; hops++) {
    const store = switchableStore();
    const backlog = createRecordBacklog({ store, stream: 'org-1', logger: recordingLogger() });
    let second: Promise<void> | undefined;
    const first = backlog.append([record(1)]);
    let hop: Promise<void> = Promise.resolve();
    for (let i = 0; i < hops; i++) hop = hop.then(() => undefined);
    void hop.then(() => (second = backlog.append([record(2)])));
    await first;
    await waitFor('the second append', () => second !== undefined);
    const answered = await Promise.race([second!.then(() => true), new Promise<boolean>((resolve) => setTimeout(() => resolve(false), 1_000))]);
    t.ok(answered, `appended ${hops} hops behind the first write: its caller is answered`);
    t.same(ids(store.written), ['req-1', 'req-2'], `appended ${hops} hops behind the first write: both written, in order`);
    await backlog.close(1_000);
  }
});

t.test('store down: records are held without the caller waiting, and written in order once it is back', async (t) => {
  const store = switchableStore();
  const count = counters();
  const logger = recordingLogger();
  const backlog = createRecordBacklog({ store, stream: 'org-1', logger, ...count });
  store.up = false;
  await backlog.append([record(1)]);
  t.equal(backlog.size(), 1, 'the failed append is held');
  // Behind a held record: held at once, without another attempt.
  const attempts = store.attempts;
  await backlog.append([record(2), record(3)]);
  t.equal(store.attempts, attempts, 'records behind a held one do not try the store themselves');
  t.equal(backlog.size(), 3);
  t.equal(count.state.failed, 3, 'countersign_proxy_record_append_failures_total counts each held record once');
  t.match(logger.lines, [{ level: 'warn', message: /holding them/ }], 'the outage is logged once');

  store.up = true;
  // The store is back, but a retry is still scheduled: a new record goes behind the held ones.
  await backlog.append([record(4)]);
  await waitFor('the held records to be written', () => backlog.size() === 0);
  t.same(ids(store.written), ['req-1', 'req-2', 'req-3', 'req-4'], 'every record once, in the order appended');
  t.same(count.state.dropped, {}, 'nothing dropped');
  t.match(logger.lines.at(-1), { level: 'info', details: { records: 4 } }, 'the recovery is logged');
  await backlog.close(1_000);
});

t.test('past the bound a record is dropped, counted and logged with its request id; the held ones are written', async (t) => {
  const store = switchableStore();
  const count = counters();
  const logger = recordingLogger();
  const backlog = createRecordBacklog({ store, stream: 'org-1', maxHeld: 3, logger, ...count });
  store.up = false;
  await backlog.append([record(1), record(2)]);
  await backlog.append([record(3), record(4), record(5)]);
  t.equal(backlog.size(), 3, 'held up to the bound');
  t.same(count.state.dropped, { backlog_full: 2 }, 'countersign_proxy_records_dropped_total{reason="backlog_full"} 2');
  t.match(
    logger.lines.find((line) => line.level === 'error'),
    { details: { records: 2, reason: 'backlog_full', request_ids: ['req-4', 'req-5'] }, message: /dropped/ },
    'the drop is logged with the request ids',
  );
  store.up = true;
  await waitFor('the held records to be written', () => backlog.size() === 0);
  t.same(ids(store.written), ['req-1', 'req-2', 'req-3']);
  await backlog.close(1_000);
});

t.test('an append whose outcome was unknown is appended again with the same gate_record_id', async (t) => {
  const store = switchableStore();
  const backlog = createRecordBacklog({ store, stream: 'org-1', logger: recordingLogger() });
  store.ambiguous = 1;
  await backlog.append([record(1), record(2)]);
  await backlog.append([record(3)]);
  await waitFor('the retry', () => backlog.size() === 0);
  t.same(ids(store.written), ['req-1', 'req-2', 'req-1', 'req-2', 'req-3'], 'written, reported failed, appended again, then the next');
  t.same(
    store.written.map((fields) => fields.gate_record_id),
    ['id-1', 'id-2', 'id-1', 'id-2', 'id-3'],
    'each copy carries the same gate_record_id, which the drain records once',
  );
  await backlog.close(1_000);
});

t.test('shutdown without a file: what is still held is dropped as shutdown, and logged', async (t) => {
  const store = switchableStore();
  const count = counters();
  const logger = recordingLogger();
  const backlog = createRecordBacklog({ store, stream: 'org-1', logger, ...count });
  store.up = false;
  await backlog.append([record(1), record(2)]);
  await backlog.close(50);
  t.same(count.state.dropped, { shutdown: 2 });
  t.match(logger.lines.at(-1), { level: 'error', details: { records: 2, reason: 'shutdown', request_ids: ['req-1', 'req-2'] } });
});

t.test('shutdown with the store back writes what is held before it returns', async (t) => {
  const store = switchableStore();
  const count = counters();
  const backlog = createRecordBacklog({ store, stream: 'org-1', retryMaxMs: 60_000, logger: recordingLogger(), ...count });
  store.up = false;
  await backlog.append([record(1)]);
  store.up = true;
  await backlog.close(5_000);
  t.same(ids(store.written), ['req-1'], 'written at shutdown, without waiting for the scheduled retry');
  t.same(count.state.dropped, {});
});

t.test('with a file: held records survive a restart, are written by the next process, and the file is emptied', async (t) => {
  const file = await tempFile(t);
  const down = switchableStore();
  down.up = false;
  const count = counters();
  const first = await openRecordBacklog({ store: down, stream: 'org-1', file, logger: recordingLogger(), ...count });
  await first.append([record(1), record(2)]);
  await first.append([record(3)]);
  await waitFor('the held records to reach the file', async () => (await fileLines(file)).length === 3);
  t.same((await fileLines(file)).map((line) => JSON.parse(line).request_id), ['req-1', 'req-2', 'req-3'], 'one JSON line per held record, in order');
  await first.close(0);
  t.same(count.state.dropped, {}, 'nothing lost at shutdown: the file keeps it');

  const store = switchableStore();
  const logger = recordingLogger();
  const second = await openRecordBacklog({ store, stream: 'org-1', file, logger });
  t.match(logger.lines[0], { level: 'warn', details: { records: 3 }, message: /reloaded/ }, 'the reload is logged');
  await second.append([record(4)]);
  await waitFor('the reloaded records to be written', () => second.size() === 0);
  t.same(ids(store.written), ['req-1', 'req-2', 'req-3', 'req-4'], 'the earlier run’s records first, then the new one');
  await second.close(1_000);
  t.same(await fileLines(file), [], 'the file is emptied once everything is written');
});

t.test('a line of the file that is not a record (cut short by a crash) is counted as unreadable; the others are written', async (t) => {
  const file = await tempFile(t);
  await writeFile(file, `${JSON.stringify(record(1))}\n${JSON.stringify(record(2))}\n{"kind":"permit.rej`);
  const store = switchableStore();
  const count = counters();
  const backlog = await openRecordBacklog({ store, stream: 'org-1', file, logger: recordingLogger(), ...count });
  await waitFor('the reloaded records to be written', () => backlog.size() === 0);
  t.same(ids(store.written), ['req-1', 'req-2']);
  t.same(count.state.dropped, { unreadable: 1 });
  await backlog.close(1_000);
});

t.test('a backlog file that cannot be written stops the start', async (t) => {
  const dir = await mkdtemp(join(tmpdir(), 'countersign-backlog-'));
  t.teardown(() => rm(dir, { recursive: true, force: true }));
  await t.rejects(openRecordBacklog({ store: switchableStore(), stream: 'org-1', file: join(dir, 'missing', 'records.jsonl'), logger: recordingLogger() }), { code: 'ENOENT' });
});
