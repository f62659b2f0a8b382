/**
 * Keys never widen: CIDR containment, actor-pattern containment, and the limits a child key gets
 * from its creator.
 */
import t from 'tap';
import { actorPatternMatches, allowsActor } from '../../authority/api-keys/actors.js';
import { actorPatternWithin, cidrWithin, narrowedLimits } from '../../authority/api-keys/narrowing.js';
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
  const parent = { allowedCidrs: ['10.0.0.0/8', '192.168.1.0/24'], allowedActors: ['agent:*', 'finance-bot'], expiresAt };
  const nothing = { allowedCidrs: undefined, allowedActors: undefined, expiresAt: undefined };
  t.same(narrowedLimits(parent, nothing), { allowedCidrs: parent.allowedCidrs, allowedActors: parent.allowedActors, expiresAt });
  const earlier = new Date('2029-01-01T00:00:00Z');
  t.same(narrowedLimits(parent, { allowedCidrs: ['192.168.1.7'], allowedActors: ['agent:billing*'], expiresAt: earlier }), {
    allowedCidrs: ['192.168.1.7'],
    allowedActors: ['agent:billing*'],
    expiresAt: earlier,
  });
  t.throws(() => narrowedLimits(parent, { ...nothing, allowedCidrs: ['192.168.0.0/16'] }), CountersignError);
  t.throws(() => narrowedLimits(parent, { ...nothing, expiresAt: new Date('2031-01-01T00:00:00Z') }), { code: 'forbidden' });
  t.throws(() => narrowedLimits(parent, { ...nothing, allowedActors: ['agent:x', 'human:alice'] }), { code: 'forbidden', message: /beyond them: human:alice$/ });
  const unrestricted = { allowedCidrs: null, allowedActors: null, expiresAt: null };
  t.same(
    narrowedLimits(unrestricted, { allowedCidrs: ['0.0.0.0/0'], allowedActors: ['*'], expiresAt: undefined }),
    { allowedCidrs: ['0.0.0.0/0'], allowedActors: ['*'], expiresAt: undefined },
    'an unrestricted creator passes nothing on',
  );
  t.same(narrowedLimits(unrestricted, nothing), nothing, 'and its child is unrestricted unless asked');
});

t.test('actorPatternMatches: an exact id, a prefix ending in *, or * for any', async (t) => {
  t.ok(actorPatternMatches('finance-bot', 'finance-bot'));
  t.notOk(actorPatternMatches('finance-bot', 'finance-bot-2'), 'an exact id is not a prefix');
  t.notOk(actorPatternMatches('finance-bot', 'Finance-bot'), 'ids are compared exactly');
  t.ok(actorPatternMatches('agent:*', 'agent:billing'));
  t.ok(actorPatternMatches('agent:*', 'agent:'), 'the prefix itself, with nothing after it');
  t.notOk(actorPatternMatches('agent:*', 'agent'));
  t.notOk(actorPatternMatches('agent:*', 'human:agent:x'), 'a prefix anchors at the start');
  t.ok(actorPatternMatches('*', 'anyone'));
  t.ok(allowsActor(null, 'anyone'), 'no list: any actor');
  t.ok(allowsActor(['ci-bot', 'agent:*'], 'agent:x'));
  t.notOk(allowsActor(['ci-bot', 'agent:*'], 'finance-bot'));
});

t.test('actorPatternWithin: every id the child matches, some parent pattern matches', async (t) => {
  const agents = ['agent:*'];
  t.ok(actorPatternWithin('agent:x', agents), 'an exact id the parent prefix matches');
  t.ok(actorPatternWithin('agent:billing*', agents), 'a longer prefix');
  t.ok(actorPatternWithin('agent:*', agents), 'the same pattern');
  t.notOk(actorPatternWithin('*', agents), 'any actor is wider');
  t.notOk(actorPatternWithin('agent*', agents), 'a shorter prefix is wider (it matches agentx)');
  t.notOk(actorPatternWithin('finance-bot', agents));
  t.ok(actorPatternWithin('finance-bot', ['finance-bot']), 'an exact id within itself');
  t.notOk(actorPatternWithin('finance-bot*', ['finance-bot']), 'a prefix is never within exact ids');
  t.notOk(actorPatternWithin('a*', ['a', 'ab*']), 'nor within ids and prefixes that leave gaps (ac)');
  t.ok(actorPatternWithin('ab*', ['a', 'ab*']));
  t.ok(actorPatternWithin('*', ['*']));
  t.ok(actorPatternWithin('anything*', ['*']));
  t.ok(actorPatternWithin('x', ['ci', '*']), 'one matching parent pattern is enough');
});
