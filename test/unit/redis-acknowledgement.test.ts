/**
 * The durability acknowledgement (shared/store/redis-acknowledgement.ts): which command follows a
 * write in each mode, with what wait, and which replies count as durable. The commands against a
 * real primary and replica are in test/integration/replay-store-faults.test.ts.
 *
 * @example
 *   npx tap --disable-coverage test/unit/redis-acknowledgement.test.ts
 */
import t from 'tap';
import { acknowledgementCommand, acknowledgementError, type AcknowledgementPlan } from '../../shared/store/redis-acknowledgement.js';

const replica = { durability: 'replica', ok: true, detail: '', wait: 'wait' } as AcknowledgementPlan;
const aof = { durability: 'aof', ok: true, detail: '', wait: 'waitaof' } as AcknowledgementPlan;

t.test('the command: WAIT 1 for replica, WAITAOF 1 0 for aof, waiting until the deadline and at least 1 ms', async (t) => {
  const [name, replicas, wait] = acknowledgementCommand(replica, Date.now() + 60_000);
  t.same([name, replicas], ['WAIT', '1']);
  t.ok(Number(wait) > 59_000 && Number(wait) <= 60_000, 'the time left until the deadline');
  t.same(acknowledgementCommand(aof, Date.now() + 60_000).slice(0, 3), ['WAITAOF', '1', '0']);
  t.same(acknowledgementCommand(replica, Date.now() - 5).slice(2), ['1'], 'a deadline already past still waits 1 ms, never 0 (forever)');
});

t.test('the reply: durable only when acknowledged by at least one', async (t) => {
  t.equal(acknowledgementError(replica, [null, 1]), undefined, 'WAIT: one replica');
  t.equal(acknowledgementError(aof, [null, [1, 0]]), undefined, 'WAITAOF: the local fsync');
  t.match(acknowledgementError(replica, [null, 0]), { code: 'STORE_NOT_DURABLE' }, 'WAIT: no replica in time');
  t.match(acknowledgementError(aof, [null, [0, 0]]), { code: 'STORE_NOT_DURABLE' }, 'WAITAOF: not fsynced in time');
  t.match(acknowledgementError(replica, [new Error('READONLY'), null]), { code: 'STORE_NOT_DURABLE', message: /READONLY/ }, 'the command failed');
  t.match(acknowledgementError(replica, undefined), { code: 'STORE_NOT_DURABLE' }, 'no reply at all');
});
