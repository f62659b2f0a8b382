/**
 * canonicalJson is our own RFC 8785 writer (shared/canonical-json.ts); the `canonicalize` package
 * is its oracle. The audit chain's hashes and the permit binding depend on the exact bytes, so the
 * two must agree on every value the package can serialize, and refuse the same values.
 */
import canonicalize from 'canonicalize';
import fc from 'fast-check';
import t from 'tap';
import { canonicalJson, NotCanonicalizableError } from '../../shared/canonical-json.js';

/** The package's answer: its text, or 'refused'. */
function oracle(value: unknown): string {
  try {
    return canonicalize(value) ?? 'refused';
  } catch {
    return 'refused';
  }
}

function ours(value: unknown): string {
  try {
    return canonicalJson(value);
  } catch (error) {
    if (!(error instanceof NotCanonicalizableError)) throw error;
    return 'refused';
  }
}

t.test('property: the same text as the canonicalize package for any JSON value, any UTF-16 code units', async (t) => {
  const value = fc.jsonValue({ maxDepth: 4, stringUnit: 'binary' });
  t.doesNotThrow(() => fc.assert(fc.property(value, (v) => ours(v) === oracle(v)), { numRuns: 5_000 }));
});

t.test('property: the same text with toJSON values, and undefined members and elements', async (t) => {
  // What audit details carry besides plain JSON: Dates, and optional fields left undefined.
  const leaf = fc.oneof(
    fc.jsonValue({ maxDepth: 1, stringUnit: 'grapheme' }),
    fc.date({ noInvalidDate: true }),
    fc.constant(undefined),
  );
  const tree = fc.letrec((tie) => ({
    node: fc.oneof({ depthSize: 'small' }, leaf, fc.array(tie('node'), { maxLength: 4 }), fc.dictionary(fc.string({ maxLength: 4 }), tie('node'), { maxKeys: 4 })),
  })).node;
  t.doesNotThrow(() => fc.assert(fc.property(fc.dictionary(fc.string({ maxLength: 6 }), tree, { maxKeys: 6 }), (v) => ours(v) === oracle(v)), { numRuns: 3_000 }));
});

t.test('every single UTF-16 code unit, as a value and as a key, alone and in a pair', async (t) => {
  const disagreements: string[] = [];
  for (let unit = 0; unit <= 0xffff; unit += 1) {
    const text = String.fromCharCode(unit);
    for (const value of [text, { [text]: 1 }, `a${text}\udc00`, `\ud800${text}`]) {
      if (ours(value) !== oracle(value)) disagreements.push(`U+${unit.toString(16)}: ${ours(value)} against ${oracle(value)}`);
    }
  }
  t.same(disagreements, [], 'all 65,536 agree');
});

t.test('refuses what JSON cannot represent exactly, with NOT_CANONICALIZABLE', async (t) => {
  const circular: Record<string, unknown> = { a: 1 };
  circular['self'] = { back: circular };
  const refused: Array<[string, unknown]> = [
    ['NaN', Number.NaN],
    ['Infinity', { n: Number.POSITIVE_INFINITY }],
    ['-Infinity', [Number.NEGATIVE_INFINITY]],
    ['BigInt', { n: 1n }],
    ['a lone high surrogate', 'a\ud800'],
    ['a lone low surrogate in a key', { '\udc00': 1 }],
    ['a circular reference', circular],
    ['undefined at the top', undefined],
    ['a function at the top', () => 1],
    ['a toJSON that gives NaN', { toJSON: () => Number.NaN }],
  ];
  for (const [name, value] of refused) {
    t.throws(() => canonicalJson(value), { code: 'NOT_CANONICALIZABLE' }, name);
  }
});

t.test('undefined, functions and symbols inside: left out of objects, null in arrays (as JSON.stringify)', async (t) => {
  t.equal(canonicalJson({ b: undefined, a: 1, c: Symbol('s'), d: () => 1 }), '{"a":1}');
  t.equal(canonicalJson([undefined, Symbol('s'), () => 1, 2]), '[null,null,null,2]');
  t.equal(canonicalJson({ at: new Date('2026-11-27T10:00:00.000Z') }), '{"at":"2026-11-27T10:00:00.000Z"}');
  // A shared, non-circular reference is written twice.
  const shared = { z: 1 };
  t.equal(canonicalJson({ a: shared, b: [shared] }), '{"a":{"z":1},"b":[{"z":1}]}');
});
