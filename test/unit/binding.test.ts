/**
 * The permit binding: golden vectors (test/fixtures/binding-vectors.json), RFC 8785 number and
 * key-order cases, which facts are bound, their canonical forms, and the constant-time compare.
 * The vectors pin the exact bytes: if canonicalization or hashing ever changes, permits issued
 * by one version stop verifying at gates running another, and this file fails first.
 *
 * @example
 *   npx tap --disable-coverage test/unit/binding.test.ts
 */
import t from 'tap';
import fc from 'fast-check';
import { createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { canonicalJson } from '../../shared/canonical-json.js';
import {
  BindingFactError,
  OPTIONAL_STANDARD_FACTS,
  STANDARD_BOUND_FACTS,
  bindingCanonicalJson,
  bindingHash,
  bindingHashesEqual,
  boundFacts,
  normalizeBoundFact,
} from '../../shared/permits/binding.js';
import { repoPath } from '../helpers/repo.js';

interface Vector {
  name: string;
  org: string;
  facts: Record<string, unknown>;
  canonical: string;
  hash: string;
}

// JSON.parse keeps -0, which one vector needs.
const vectors = JSON.parse(
  readFileSync(repoPath('test', 'fixtures', 'binding-vectors.json'), 'utf8'),
) as Vector[];

/** Independent of the code under test: SHA-256 of the UTF-8 bytes, base64url, no padding. */
function independentHash(text: string): string {
  return createHash('sha256').update(Buffer.from(text, 'utf8')).digest('base64url');
}

function errorCode(fn: () => unknown): string | undefined {
  try {
    fn();
  } catch (error) {
    return error instanceof BindingFactError ? error.code : `not a BindingFactError: ${String(error)}`;
  }
  return undefined;
}

t.test('golden vectors', async (t) => {
  t.ok(vectors.length >= 8, 'at least 8 vectors');
  t.ok(Object.is(vectors.find((v) => v.name.includes('negative zero'))?.facts['amount_usd'], -0), 'the -0 vector really holds -0');
  for (const v of vectors) {
    t.test(v.name, async (t) => {
      t.equal(bindingCanonicalJson(v.org, v.facts), v.canonical, 'canonical text');
      t.equal(bindingHash(v.org, v.facts), v.hash, 'binding hash');
      t.equal(independentHash(v.canonical), v.hash, 'hash is SHA-256 of the committed canonical text');
      t.match(v.hash, /^[A-Za-z0-9_-]{43}$/, 'base64url without padding');

      // The same facts reached through boundFacts (as the authority does) hash the same.
      const { action_type, actor_id, ...context } = v.facts;
      const extra = Object.keys(context).filter((k) => !(STANDARD_BOUND_FACTS as readonly string[]).includes(k));
      const bound = boundFacts({ action_type: action_type as string, actor_id: actor_id as string, context }, extra);
      t.same(bound.keys, Object.keys(v.facts).sort(), 'every fact is bound, keys sorted');
      t.equal(bindingHash(v.org, bound.facts), v.hash, 'boundFacts then bindingHash');
    });
  }
});

t.test('hand-checked vector: the minimal binding', async (t) => {
  const canonical = '{"action_type":"deploy.production","actor_id":"ci-bot","org":"org_1","v":1}';
  t.equal(bindingCanonicalJson('org_1', { actor_id: 'ci-bot', action_type: 'deploy.production' }), canonical);
  // Computed independently: printf '%s' "$canonical" | openssl dgst -sha256 -binary | base64url
  t.equal(bindingHash('org_1', { action_type: 'deploy.production', actor_id: 'ci-bot' }), '3O5AqT1cAZrVAcnwSSprHimjC2batnU2wxPVF50OPTc');
});

t.test('RFC 8785 numbers (Appendix B)', async (t) => {
  const cases: [string, string][] = [
    ['0000000000000000', '0'],
    ['8000000000000000', '0'],
    ['0000000000000001', '5e-324'],
    ['8000000000000001', '-5e-324'],
    ['7fefffffffffffff', '1.7976931348623157e+308'],
    ['ffefffffffffffff', '-1.7976931348623157e+308'],
    ['4340000000000000', '9007199254740992'],
    ['c340000000000000', '-9007199254740992'],
    ['4430000000000000', '295147905179352830000'],
    ['44b52d02c7e14af5', '9.999999999999997e+22'],
    ['44b52d02c7e14af6', '1e+23'],
    ['44b52d02c7e14af7', '1.0000000000000001e+23'],
    ['444b1ae4d6e2ef4e', '999999999999999700000'],
    ['444b1ae4d6e2ef4f', '999999999999999900000'],
    ['444b1ae4d6e2ef50', '1e+21'],
    ['3eb0c6f7a0b5ed8c', '9.999999999999997e-7'],
    ['3eb0c6f7a0b5ed8d', '0.000001'],
    ['41b3de4355555553', '333333333.3333332'],
    ['41b3de4355555554', '333333333.33333325'],
    ['41b3de4355555555', '333333333.3333333'],
    ['41b3de4355555556', '333333333.3333334'],
    ['41b3de4355555557', '333333333.33333343'],
    ['becbf647612f3696', '-0.0000033333333333333333'],
    ['43143ff3c1cb0959', '1424953923781206.2'],
  ];
  for (const [hex, expected] of cases) {
    const value = Buffer.from(hex, 'hex').readDoubleBE(0);
    t.equal(canonicalJson(value), expected, `0x${hex}`);
    // The same text inside a bound fact.
    t.equal(
      bindingCanonicalJson('o', { action_type: 'a', actor_id: 'b', n: value }),
      `{"action_type":"a","actor_id":"b","n":${expected},"org":"o","v":1}`,
    );
  }
  t.equal(canonicalJson(1e21), '1e+21');
  t.equal(canonicalJson(1e-7), '1e-7');
  t.equal(canonicalJson(1.5e-7), '1.5e-7');
  t.equal(canonicalJson(4.5), '4.5');
  t.equal(canonicalJson(0.002), '0.002');
  t.equal(canonicalJson(100), '100');
  t.equal(canonicalJson(0.1), '0.1');
  for (const bad of [Number.NaN, Number.POSITIVE_INFINITY, Number.NEGATIVE_INFINITY]) {
    t.equal(errorCode(() => bindingHash('o', { action_type: 'a', actor_id: 'b', n: bad })), 'INVALID_BOUND_FACT', `${bad} refused`);
  }
});

t.test('RFC 8785 §3.2.2 sample and §3.2.3 key order', async (t) => {
  const sample = JSON.parse(
    '{"numbers": [333333333.33333329, 1E30, 4.50, 2e-3, 0.000000000000000000000000001],' +
      ' "string": "\\u20ac$\\u000F\\u000aA\'\\u0042\\u0022\\u005c\\\\\\"\\/",' +
      ' "literals": [null, true, false]}',
  ) as unknown;
  t.equal(
    canonicalJson(sample),
    '{"literals":[null,true,false],"numbers":[333333333.3333333,1e+30,4.5,0.002,1e-27],' +
      '"string":"\u20ac$\\u000f\\nA\'B\\"\\\\\\\\\\"/"}',
  );

  const keys = {
    '\u20ac': 'Euro Sign',
    '\r': 'Carriage Return',
    '\ufb33': 'Hebrew Letter Dalet With Dagesh',
    '1': 'One',
    '\ud83d\ude00': 'Emoji: Grinning Face',
    '\u0080': 'Control',
    '\u00f6': 'Latin Small Letter O With Diaeresis',
  };
  const expected =
    '{"\\r":"Carriage Return","1":"One","\u0080":"Control","\u00f6":"Latin Small Letter O With Diaeresis",' +
    '"\u20ac":"Euro Sign","\ud83d\ude00":"Emoji: Grinning Face","\ufb33":"Hebrew Letter Dalet With Dagesh"}';
  t.equal(canonicalJson(keys), expected, 'sorted by UTF-16 code units, not code points');
  t.equal(
    bindingCanonicalJson('o', { action_type: 'a', actor_id: 'b', k: keys }),
    `{"action_type":"a","actor_id":"b","k":${expected},"org":"o","v":1}`,
  );
  // Top-level fact names sort the same way (the surrogate pair sorts before U+FB33).
  t.same(
    boundFacts({ action_type: 'a', actor_id: 'b', context: keys }, Object.keys(keys)).keys,
    ['\r', '1', 'action_type', 'actor_id', '\u0080', '\u00f6', '\u20ac', '\ud83d\ude00', '\ufb33'],
  );
});

t.test('boundFacts selects the standard facts present plus the listed extra keys', async (t) => {
  t.same(STANDARD_BOUND_FACTS, ['action_type', 'actor_id', 'environment', 'target', 'amount_usd', 'account_code']);

  const minimal = boundFacts({ action_type: 'deploy.production', actor_id: 'ci', context: {} }, []);
  t.same(minimal, { facts: { action_type: 'deploy.production', actor_id: 'ci' }, keys: ['action_type', 'actor_id'] });

  const full = boundFacts(
    {
      action_type: 'payment.wire',
      actor_id: 'u1',
      context: {
        account_code: 'GL-1',
        amount_usd: 10,
        target: { type: 'account', id: 'a1', label: 'not bound' },
        environment: 'prod',
        approvals: ['apr_1'],
        memo: 'not listed, not bound',
        ticket: 'CHG-1',
      },
    },
    ['ticket', 'missing_key'],
  );
  t.same(full.keys, ['account_code', 'action_type', 'actor_id', 'amount_usd', 'environment', 'target', 'ticket']);
  t.same(full.facts['target'], { type: 'account', id: 'a1' }, 'target reduced to {type, id}');
  t.notOk('approvals' in full.facts, 'approvals are not a bound fact');
  t.notOk('memo' in full.facts, 'unlisted context keys are not bound');
  t.notOk('missing_key' in full.facts, 'a listed key the context lacks is simply not bound');

  const absent = boundFacts(
    { action_type: 'a.b', actor_id: 'u', context: { environment: undefined, amount_usd: undefined } },
    [],
  );
  t.same(absent.keys, ['action_type', 'actor_id'], 'undefined means absent');

  const inherited = Object.create({ environment: 'prod' }) as Record<string, unknown>;
  t.same(boundFacts({ action_type: 'a.b', actor_id: 'u', context: inherited }, []).keys, ['action_type', 'actor_id'], 'only own properties');

  const override = boundFacts(
    { action_type: 'a.b', actor_id: 'u', context: { action_type: 'evil.other', actor_id: 'someone' } },
    ['action_type', 'actor_id', 'environment'],
  );
  t.same(override.facts, { action_type: 'a.b', actor_id: 'u' }, 'action_type and actor_id come from the input, never the context');

  const extraNull = boundFacts({ action_type: 'a.b', actor_id: 'u', context: { flag: null } }, ['flag']);
  t.same(extraNull.keys, ['action_type', 'actor_id', 'flag'], 'an extra key holding null is bound');
});

t.test('canonical forms and refusals', async (t) => {
  t.ok(Object.is(normalizeBoundFact('amount_usd', -0), 0), '-0 becomes 0');
  t.equal(bindingHash('o', { action_type: 'a', actor_id: 'b', amount_usd: -0 }), bindingHash('o', { action_type: 'a', actor_id: 'b', amount_usd: 0 }));
  t.equal(
    bindingHash('o', { actor_id: 'b', action_type: 'a', target: { id: 'x', type: 't' } }),
    bindingHash('o', { target: { type: 't', id: 'x', extra: 1 }, action_type: 'a', actor_id: 'b' }),
    'input key order and extra target keys do not matter',
  );
  t.not(bindingHash('o1', { action_type: 'a', actor_id: 'b' }), bindingHash('o2', { action_type: 'a', actor_id: 'b' }), 'the org is bound');
  t.not(
    bindingHash('o', { action_type: 'a', actor_id: 'b', amount_usd: 100 }),
    bindingHash('o', { action_type: 'a', actor_id: 'b', x: 100 }),
    'the fact name is bound, not only its value',
  );

  const base = { action_type: 'a', actor_id: 'b' };
  const refused: [string, Record<string, unknown>][] = [
    ['NaN amount', { ...base, amount_usd: Number.NaN }],
    ['Infinity amount', { ...base, amount_usd: Number.POSITIVE_INFINITY }],
    ['negative amount', { ...base, amount_usd: -1 }],
    ['amount as a string', { ...base, amount_usd: '100' }],
    ['environment not a string', { ...base, environment: 3 }],
    ['environment null', { ...base, environment: null }],
    ['account_code not a string', { ...base, account_code: ['x'] }],
    ['target without id', { ...base, target: { type: 'svc' } }],
    ['target id a number', { ...base, target: { type: 'svc', id: 1 } }],
    ['target an array', { ...base, target: ['svc', 'x'] }],
    ['empty action_type', { ...base, action_type: '' }],
    ['actor_id not a string', { ...base, actor_id: 7 }],
    ['missing actor_id', { action_type: 'a' }],
    ['missing action_type', { actor_id: 'b' }],
    ['reserved name v', { ...base, v: 2 }],
    ['reserved name org', { ...base, org: 'other' }],
    ['NaN nested in an extra fact', { ...base, extra: { n: [1, Number.NaN] } }],
    ['undefined nested in an extra fact', { ...base, extra: { n: undefined } }],
    ['array hole', { ...base, extra: [1, , 3] }],
    ['Date', { ...base, extra: new Date(0) }],
    ['Map', { ...base, extra: new Map() }],
    ['BigInt', { ...base, extra: 10n }],
    ['function', { ...base, extra: () => 1 }],
    ['lone surrogate value', { ...base, extra: 'x\ud800y' }],
    ['lone surrogate key', { ...base, extra: { '\udc00': 1 } }],
    ['lone surrogate in environment', { ...base, environment: '\ud83d' }],
    ['lone surrogate in a fact name', { ...base, ['x\udc00']: 1 }],
  ];
  for (const [name, facts] of refused) {
    t.equal(errorCode(() => bindingHash('o', facts)), 'INVALID_BOUND_FACT', name);
  }
  t.equal(errorCode(() => bindingHash('', base)), 'INVALID_BOUND_FACT', 'empty org');
  t.equal(errorCode(() => bindingHash('o\ud800', base)), 'INVALID_BOUND_FACT', 'lone surrogate in the org');

  let deep: unknown = 1;
  for (let i = 0; i < 40; i++) deep = [deep];
  t.equal(errorCode(() => bindingHash('o', { ...base, deep })), 'INVALID_BOUND_FACT', 'too deep');
  const cyclic: Record<string, unknown> = {};
  cyclic['self'] = cyclic;
  t.equal(errorCode(() => bindingHash('o', { ...base, cyclic })), 'INVALID_BOUND_FACT', 'cycle');

  t.equal(errorCode(() => boundFacts({ action_type: 'a', actor_id: 'b', context: { org: 'x' } }, ['org'])), 'INVALID_BOUND_FACT', 'bind: [org] refused');
  t.equal(errorCode(() => boundFacts({ action_type: 'a', actor_id: 'b', context: {} }, ['__proto__'])), 'INVALID_BOUND_FACT', 'bind: [__proto__] refused');
  t.equal(errorCode(() => boundFacts({ action_type: 'a', actor_id: 'b', context: { amount_usd: Number.NaN } }, [])), 'INVALID_BOUND_FACT', 'NaN amount in context');

  try {
    bindingHash('o', { ...base, amount_usd: Number.NaN });
  } catch (error) {
    t.type(error, BindingFactError);
    t.equal((error as BindingFactError).fact, 'amount_usd', 'the error names the fact');
    t.match((error as Error).message, /amount_usd/);
  }
  t.same(OPTIONAL_STANDARD_FACTS, ['environment', 'target', 'amount_usd', 'account_code']);
});

t.test('bindingHashesEqual', async (t) => {
  const a = bindingHash('o', { action_type: 'a', actor_id: 'b' });
  const b = bindingHash('o', { action_type: 'a', actor_id: 'c' });
  t.equal(bindingHashesEqual(a, a), true);
  t.equal(bindingHashesEqual(a, `${a}`), true);
  t.equal(bindingHashesEqual(a, b), false, 'same length, different');
  t.equal(bindingHashesEqual(a, a.slice(0, -1)), false, 'different lengths: false, not an exception');
  t.equal(bindingHashesEqual(a, `${a}=`), false, 'padding is not ignored');
  t.equal(bindingHashesEqual('', a), false);
  t.equal(bindingHashesEqual('', ''), true);
  t.equal(bindingHashesEqual('é', 'e\u0301'), false, 'different UTF-8 lengths');
});

t.test('property: the hash depends on the facts, not on their order', async (t) => {
  const extraName = fc.string({ minLength: 1, maxLength: 8 }).filter((k) => !['v', 'org', '__proto__', ...STANDARD_BOUND_FACTS].includes(k));
  t.doesNotThrow(() => fc.assert(
    fc.property(fc.dictionary(extraName, fc.jsonValue({ maxDepth: 3 }), { maxKeys: 6 }), fc.string({ minLength: 1 }), (extra, org) => {
      const facts = { action_type: 'a.b', actor_id: 'u', ...extra };
      const reversed = Object.fromEntries(Object.entries(facts).reverse());
      const hash = bindingHash(org, facts);
      return hash === bindingHash(org, reversed) && hash === independentHash(canonicalJson({ ...JSON.parse(JSON.stringify(facts)), v: 1, org }));
    }),
  ), 'the hash is independent of fact order and equals an independent computation');
});

t.test('property: the binding text is canonicalJson of the envelope, for any names and values', async (t) => {
  // Every UTF-16 code unit, lone surrogates included: what the binding cannot write canonically,
  // it refuses (INVALID_BOUND_FACT), and canonicalJson refuses it too.
  const anyText = fc.string({ unit: 'binary', maxLength: 6 });
  const name = fc.string({ unit: 'binary', minLength: 1, maxLength: 6 }).filter((k) => !['v', 'org', '__proto__', ...STANDARD_BOUND_FACTS].includes(k));
  const value = fc.jsonValue({ maxDepth: 3, stringUnit: 'binary' });
  t.doesNotThrow(() => fc.assert(
    fc.property(fc.dictionary(name, value, { maxKeys: 6 }), anyText.filter((org) => org !== ''), (extra, org) => {
      const facts = { action_type: 'a.b', actor_id: 'u', ...extra };
      let expected: string | undefined;
      try {
        expected = canonicalJson({ ...JSON.parse(JSON.stringify(facts)), v: 1, org });
      } catch {
        expected = undefined;
      }
      try {
        return bindingCanonicalJson(org, facts) === expected;
      } catch (error) {
        return expected === undefined && error instanceof BindingFactError;
      }
    }),
    { numRuns: 500 },
  ), 'equal texts, or both refuse');
});
