/**
 * The durability acknowledgement (shared/store/redis-acknowledgement.ts): which command follows a
 * write in each mode, with what wait, and which replies count as durable. The commands against a
 * real primary and replicas are in test/integration/replay-store-faults.test.ts and
 * test/integration/replay-store-failover.test.ts.
 *
 * @example
 *   npx tap --disable-coverage test/unit/redis-acknowledgement.test.ts
 */
import t from 'tap';
import { acknowledgementCommand, acknowledgementError, type AcknowledgementPlan } from '../../shared/store/redis-acknowledgement.js';

const replica = { durability: 'replica', ok: true, detail: '', wait: 'wait' } as AcknowledgementPlan;
const aof = { durability: 'aof', ok: true, detail: '', wait: 'waitaof' } as AcknowledgementPlan;

t.test('the command: WAIT n for replica, WAITAOF 1 0 for aof, waiting until the deadline and at least 1 ms', async (t) => {
  const [name, replicas, wait] = acknowledgementCommand(replica, Date.now() + 60_000, 2);
  t.same([name, replicas], ['WAIT', '2'], 'every replica that could be promoted');
  t.ok(Number(wait) > 59_000 && Number(wait) <= 60_000, 'the time left until the deadline');
  t.same(acknowledgementCommand(aof, Date.now() + 60_000, 2).slice(0, 3), ['WAITAOF', '1', '0'], 'aof ignores the replica count');
  t.same(acknowledgementCommand(replica, Date.now() - 5, 1).slice(2), ['1'], 'a deadline already past still waits 1 ms, never 0 (forever)');
});

t.test('the reply: durable only when acknowledged by every replica asked for', async (t) => {
  t.equal(acknowledgementError(replica, [null, 1], 1), undefined, 'WAIT 1: one replica');
  t.equal(acknowledgementError(replica, [null, 2], 2), undefined, 'WAIT 2: both replicas');
  t.match(acknowledgementError(replica, [null, 1], 2), { code: 'STORE_NOT_DURABLE', message: /1 of the 2/ }, 'WAIT 2: one replica is not enough');
  t.equal(acknowledgementError(aof, [null, [1, 0]], 2), undefined, 'WAITAOF: the local fsync');
  t.match(acknowledgementError(replica, [null, 0], 1), { code: 'STORE_NOT_DURABLE' }, 'WAIT: no replica in time');
  t.match(acknowledgementError(aof, [null, [0, 0]], 1), { code: 'STORE_NOT_DURABLE' }, 'WAITAOF: not fsynced in time');
  t.match(acknowledgementError(replica, [new Error('READONLY'), null], 1), { code: 'STORE_NOT_DURABLE', message: /READONLY/ }, 'the command failed');
  t.match(acknowledgementError(replica, undefined, 1), { code: 'STORE_NOT_DURABLE' }, 'no reply at all');
});
