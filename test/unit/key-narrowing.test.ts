/**
 * Keys never widen: CIDR containment and the limits a child key gets from its creator.
 */
import t from 'tap';
import { cidrWithin, narrowedLimits } from '../../authority/api-keys/narrowing.js';
import { CountersignError } from '../../shared/errors.js';

t.test('cidrWithin: every address of the inner block lies in the outer one', async (t) => {
  t.ok(cidrWithin('10.1.0.0/16', '10.0.0.0/8'));
  t.ok(cidrWithin('10.1.2.3', '10.0.0.0/8'), 'a bare address is a /32');
  t.ok(cidrWithin('10.0.0.0/8', '10.0.0.0/8'), 'a block is within itself');
  t.ok(cidrWithin('10.255.255.255/32', '10.0.0.0/8'));
  t.ok(cidrWithin('2001:db8:1::/48', '2001:db8::/32'));
  t.notOk(cidrWithin('10.0.0.0/7', '10.0.0.0/8'), 'a wider block is not');
  t.notOk(cidrWithin('11.0.0.1', '10.0.0.0/8'), 'a disjoint address is not');
  t.notOk(cidrWithin('::ffff:10.0.0.1', '10.0.0.0/8'), 'another family is not (fail closed)');
  t.notOk(cidrWithin('0.0.0.0/0', '10.0.0.0/8'));
  t.notOk(cidrWithin('not a block', '10.0.0.0/8'));
});

t.test('narrowedLimits: inherit when unset, refuse wider, accept narrower', async (t) => {
  const expiresAt = new Date('2030-01-01T00:00:00Z');
  const parent = { allowedCidrs: ['10.0.0.0/8', '192.168.1.0/24'], expiresAt };
  t.same(narrowedLimits(parent, { allowedCidrs: undefined, expiresAt: undefined }), { allowedCidrs: parent.allowedCidrs, expiresAt });
  const earlier = new Date('2029-01-01T00:00:00Z');
  t.same(narrowedLimits(parent, { allowedCidrs: ['192.168.1.7'], expiresAt: earlier }), { allowedCidrs: ['192.168.1.7'], expiresAt: earlier });
  t.throws(() => narrowedLimits(parent, { allowedCidrs: ['192.168.0.0/16'], expiresAt: undefined }), CountersignError);
  t.throws(() => narrowedLimits(parent, { allowedCidrs: undefined, expiresAt: new Date('2031-01-01T00:00:00Z') }), { code: 'forbidden' });
  const unrestricted = { allowedCidrs: null, expiresAt: null };
  t.same(narrowedLimits(unrestricted, { allowedCidrs: ['0.0.0.0/0'], expiresAt: undefined }), { allowedCidrs: ['0.0.0.0/0'], expiresAt: undefined }, 'an unrestricted creator passes nothing on');
});
