/**
 * parsePermitClaims, the one check of a permit's claims (signer and verifiers): what it accepts,
 * the claim it names when it refuses, and, as a property, that it accepts exactly what the zod
 * schema it replaced accepted (kept here as the oracle), with the same data.
 *
 * @example
 *   npx tap --disable-coverage test/unit/permit-claims.test.ts
 */
import t from 'tap';
import fc from 'fast-check';
import { z } from 'zod';
import { canonicalJson } from '../../shared/canonical-json.js';
import { MAX_PERMIT_LIFETIME_SECONDS, PermitClaimsError, parsePermitClaims } from '../../shared/permits/claims.js';

/** The claims schema as zod stated it before parsePermitClaims replaced it. */
const seconds = z.number().int().nonnegative().max(Number.MAX_SAFE_INTEGER);
const ZodPermitClaims = z
  .object({
    iss: z.string().min(1),
    aud: z.string().min(1),
    sub: z.string().min(1).max(256),
    org: z.string().min(1).max(256).regex(/^[^{}\p{Cc}]+$/u),
    jti: z.string().regex(/^[A-Za-z0-9_-]{22}$/),
    rid: z.string().min(1),
    act: z.string().min(1).max(256),
    env: z.string().optional(),
    tgt: z.strictObject({ type: z.string(), id: z.string() }).optional(),
    bkeys: z
      .array(z.string().min(1))
      .refine((keys) => new Set(keys).size === keys.length)
      .refine((keys) => keys.includes('action_type') && keys.includes('actor_id')),
    bnd: z.string().regex(/^[A-Za-z0-9_-]{43}$/),
    pv: z.number().int().nonnegative(),
    one: z.literal(true),
    apr: z.array(z.string().min(1)).optional(),
    iat: z.number().nonnegative().max(Number.MAX_SAFE_INTEGER / 1000),
    nbf: seconds,
    exp: seconds,
  })
  .refine((c) => c.exp > c.nbf && c.nbf >= Math.floor(c.iat))
  .refine((c) => c.exp - c.iat <= MAX_PERMIT_LIFETIME_SECONDS);

const valid = {
  iss: 'https://authority.example',
  aud: 'countersign:gate',
  sub: 'ci-bot',
  org: 'org_1',
  jti: 'Xc2lH2k1cTUVbqG7Pq0x9A',
  rid: 'req_1',
  act: 'deploy.production',
  env: 'prod',
  tgt: { type: 'service', id: 'api' },
  bkeys: ['action_type', 'actor_id', 'environment', 'target'],
  bnd: '3O5AqT1cAZrVAcnwSSprHimjC2batnU2wxPVF50OPTc',
  pv: 3,
  one: true,
  apr: ['apr_1'],
  iat: 1_700_000_000.123,
  nbf: 1_700_000_000,
  exp: 1_700_000_060,
};

t.test('valid claims parse; unknown keys are dropped; optional claims may be absent', async (t) => {
  const parsed = parsePermitClaims({ ...valid, extra: 'ignored' });
  t.ok(parsed.success);
  t.same(parsed.success && parsed.data, valid, 'the known claims, nothing else');
  t.notOk(parsed.success && 'extra' in parsed.data, 'an unknown key is not carried');
  const { env: _env, tgt: _tgt, apr: _apr, ...minimal } = valid;
  const bare = parsePermitClaims({ ...minimal, bkeys: ['action_type', 'actor_id'] });
  t.ok(bare.success);
  t.same(bare.success && Object.keys(bare.data).sort(), Object.keys(minimal).sort(), 'absent optional claims stay absent');
});

t.test('each refusal names the claim', async (t) => {
  const cases: [string, unknown, string][] = [
    ['not an object', 'hello', ''],
    ['an array', [valid], ''],
    ['null', null, ''],
    ['missing iss', { ...valid, iss: undefined }, 'iss'],
    ['empty aud', { ...valid, aud: '' }, 'aud'],
    ['aud as an array', { ...valid, aud: ['countersign:gate'] }, 'aud'],
    ['sub too long', { ...valid, sub: 'x'.repeat(257) }, 'sub'],
    ['org with braces', { ...valid, org: 'org{1}' }, 'org'],
    ['org with a control character', { ...valid, org: 'org\n1' }, 'org'],
    ['short jti', { ...valid, jti: 'abc' }, 'jti'],
    ['empty rid', { ...valid, rid: '' }, 'rid'],
    ['act as a number', { ...valid, act: 7 }, 'act'],
    ['env null', { ...valid, env: null }, 'env'],
    ['tgt with another key', { ...valid, tgt: { type: 's', id: 'a', name: 'x' } }, 'tgt'],
    ['tgt without id', { ...valid, tgt: { type: 's' } }, 'tgt.id'],
    ['tgt as a string', { ...valid, tgt: 'service:api' }, 'tgt'],
    ['bkeys repeated', { ...valid, bkeys: ['action_type', 'actor_id', 'actor_id'] }, 'bkeys'],
    ['bkeys without actor_id', { ...valid, bkeys: ['action_type'] }, 'bkeys'],
    ['bkeys with an empty name', { ...valid, bkeys: ['action_type', 'actor_id', ''] }, 'bkeys.2'],
    ['bnd too short', { ...valid, bnd: 'abc' }, 'bnd'],
    ['pv fractional', { ...valid, pv: 1.5 }, 'pv'],
    ['pv negative', { ...valid, pv: -1 }, 'pv'],
    ['one false', { ...valid, one: false }, 'one'],
    ['apr with an empty id', { ...valid, apr: [''] }, 'apr.0'],
    ['iat negative', { ...valid, iat: -0.5 }, 'iat'],
    ['iat infinite', { ...valid, iat: Number.POSITIVE_INFINITY }, 'iat'],
    ['nbf fractional', { ...valid, nbf: 1_700_000_000.5 }, 'nbf'],
    ['exp beyond a safe integer', { ...valid, exp: 2 ** 53 }, 'exp'],
    ['exp before nbf', { ...valid, exp: valid.nbf }, 'exp'],
    ['iat after nbf', { ...valid, iat: valid.nbf + 1.5 }, 'exp'],
    ['lifetime over the maximum', { ...valid, exp: valid.nbf + MAX_PERMIT_LIFETIME_SECONDS + 1 }, 'exp'],
  ];
  for (const [name, claims, path] of cases) {
    const parsed = parsePermitClaims(claims);
    t.equal(parsed.success, false, `${name}: refused`);
    if (!parsed.success) {
      t.ok(parsed.error instanceof PermitClaimsError, `${name}: a PermitClaimsError`);
      t.equal(parsed.error.path, path, `${name}: names ${path === '' ? 'the payload' : path}`);
    }
    t.equal(ZodPermitClaims.safeParse(claims).success, false, `${name}: the zod schema refused it too`);
  }
});

t.test('property: accepts exactly what the zod schema accepted, with the same data', async (t) => {
  // Each claim is either valid, absent, or something else of any JSON type.
  const junk = fc.oneof(fc.jsonValue({ maxDepth: 2 }), fc.constantFrom(undefined, Number.NaN, Number.POSITIVE_INFINITY, -0, 2 ** 53, 0.5));
  const claim = <T>(good: fc.Arbitrary<T>) => fc.oneof({ arbitrary: good, weight: 6 }, { arbitrary: junk, weight: 1 });
  const nbf = fc.integer({ min: 0, max: 2_000_000_000 });
  const arbitraryClaims = fc
    .record({
      iss: claim(fc.string({ maxLength: 3 })),
      aud: claim(fc.string({ maxLength: 3 })),
      sub: claim(fc.string({ maxLength: 3 })),
      org: claim(fc.constantFrom('org_1', 'o{1}', 'o\u0007', '')),
      jti: claim(fc.constantFrom(valid.jti, 'short', `${valid.jti}x`)),
      rid: claim(fc.string({ maxLength: 3 })),
      act: claim(fc.string({ maxLength: 3 })),
      env: claim(fc.string({ maxLength: 3 })),
      tgt: claim(fc.record({ type: fc.string({ maxLength: 2 }), id: fc.string({ maxLength: 2 }) }, { requiredKeys: [] })),
      bkeys: claim(fc.array(fc.constantFrom('action_type', 'actor_id', 'environment', ''), { maxLength: 4 })),
      bnd: claim(fc.constantFrom(valid.bnd, 'abc')),
      pv: claim(fc.integer({ min: -2, max: 5 })),
      one: claim(fc.constantFrom(true, false)),
      apr: claim(fc.array(fc.string({ maxLength: 2 }), { maxLength: 2 })),
      offsets: fc.tuple(fc.integer({ min: -2, max: 2 }), fc.integer({ min: -2, max: MAX_PERMIT_LIFETIME_SECONDS + 2 }), fc.integer({ min: 0, max: 999 })),
      nbf,
    })
    .map(({ offsets: [iatOffset, lifetime, millis], nbf, ...rest }) => ({ ...rest, iat: nbf + iatOffset + millis / 1000, nbf, exp: nbf + lifetime }));
  t.doesNotThrow(() =>
    fc.assert(
      fc.property(arbitraryClaims, (claims) => {
        const ours = parsePermitClaims(claims);
        const theirs = ZodPermitClaims.safeParse(claims);
        if (ours.success !== theirs.success) return false;
        return !ours.success || canonicalJson(ours.data) === canonicalJson(theirs.data);
      }),
      { numRuns: 3000 },
    ),
  );
});
