/**
 * How a record's fields travel to Redis (shared/store/redis-arguments.ts): XADD's pairs in the
 * fields' order, and the consume script's one JSON argument, in which a lone surrogate has become
 * U+FFFD (what a UTF-8 write makes of it) while everything else, a literal "\ud800" text included,
 * is kept.
 *
 * @example
 *   npx tap --disable-coverage test/unit/redis-arguments.test.ts
 */
import t from 'tap';
import { fieldPairs, recordArgument } from '../../shared/store/redis-arguments.js';

t.test('fieldPairs: name, value pairs in the order of the fields', async (t) => {
  t.same(fieldPairs({ kind: 'permit.verified', mode: 'enforce', code: '' }), ['kind', 'permit.verified', 'mode', 'enforce', 'code', '']);
  t.same(fieldPairs({}), []);
});

t.test('recordArgument: the pairs as one JSON array', async (t) => {
  const fields = { quotes: 'say "hi"', literal: 'C:\\ud800', controls: 'a\u0000b\n', emoji: '\ud83d\ude00', empty: '' };
  t.same(JSON.parse(recordArgument(fields)), fieldPairs(fields), 'everything well-formed is kept as it is');
  t.same(JSON.parse(recordArgument({ lone: 'x\ud800y', ['name \udc00']: 'v' })), ['lone', 'x\ufffdy', 'name \ufffd', 'v'], 'a lone surrogate becomes U+FFFD, in a value or a name');
  t.notMatch(recordArgument({ lone: 'x\ud800y' }), /\\ud800/, 'no escape cjson would refuse');
});
