/**
 * The permit verification core and the shared store: a store or key source that fails keeps
 * every permit closed (an outcome, never an exception), and the state gates share (revocation,
 * single use, the verification record written with the consume, 500 concurrent uses of one
 * permit) holds on MemoryStore always and on RedisStore when REDIS_URL is set.
 *
 * @example
 *   REDIS_URL=redis://127.0.0.1:6391 npx tap --disable-coverage test/integration/verify-core-store.test.ts
 */
import t from 'tap';
import type { Test } from 'tap';
import { permitStoreKey, verificationStream } from '../../shared/permits/store-keys.js';
import { verifyPermit } from '../../shared/permits/verify.js';
import type { PermitKeyResolver } from '../../shared/permits/verify.js';
import { RedisStore } from '../../shared/store/redis.js';
import type { SharedStore } from '../../shared/store/types.js';
import { REDIS_NOT_RUN_REASON, TEST_COMMAND_TIMEOUT_MS, deleteKeys, redisUrl, uniquePrefix } from '../helpers/redis.js';
import { GATE_FACTS, ORG, issue, newMemoryStore, options, refusal } from '../helpers/verify-core-fixture.js';

t.test('a failing store or key source fails closed', async (t) => {
  const store = newMemoryStore(t);
  const failing = Object.assign(Object.create(store) as SharedStore, { consumePermit: async () => Promise.reject(new Error('connection refused')) });
  const failed = await verifyPermit(options(t, (await issue()).token, { store: failing }));
  refusal(t, failed, 'INTERNAL_ERROR', 'the revocation check and consume reject');
  t.equal(failed.valid === false && failed.unavailable, true, 'unavailable');

  const closed = newMemoryStore(t);
  await closed.close();
  const outcome = await verifyPermit(options(t, (await issue()).token, { store: closed }));
  refusal(t, outcome, 'INTERNAL_ERROR', 'closed store');
  t.equal(outcome.valid === false && outcome.unavailable, true);

  const keysDown: PermitKeyResolver = { resolve: async () => Promise.reject(new Error('JWKS fetch failed')) };
  const keysOutcome = await verifyPermit(options(t, (await issue()).token, { keys: keysDown }));
  refusal(t, keysOutcome, 'INTERNAL_ERROR', 'key source down');
  t.equal(keysOutcome.valid === false && keysOutcome.unavailable, true);

  const recordThrows = await verifyPermit(
    options(t, (await issue()).token, {
      record: () => {
        throw new Error('bug');
      },
    }),
  );
  refusal(t, recordThrows, 'INTERNAL_ERROR', 'record builder throws');

  const badOption = await verifyPermit(options(t, (await issue()).token, { nowMs: Number.NaN }));
  refusal(t, badOption, 'INTERNAL_ERROR', 'invalid nowMs: an outcome, not an exception');
});

// ---------------------------------------------------------------------------------------------
// State shared between gates: on MemoryStore always, on RedisStore when REDIS_URL is set.

type StoreFactory = (t: Test) => SharedStore;

const stores: [string, StoreFactory][] = [['memory', (t) => newMemoryStore(t)]];
const url = redisUrl();
if (url) {
  stores.push([
    'redis',
    (t) => {
      const keyPrefix = uniquePrefix();
      const store = new RedisStore({ url, keyPrefix, commandTimeoutMs: TEST_COMMAND_TIMEOUT_MS });
      t.teardown(async () => {
        await store.close();
        await deleteKeys(url, keyPrefix);
      });
      return store;
    },
  ]);
} else {
  t.comment(`RedisStore variant of the replay, revocation and concurrency tests not run: ${REDIS_NOT_RUN_REASON}`);
}

for (const [name, open] of stores) {
  t.test(`${name}: revoked, replayed, and the verification record`, async (t) => {
    const store = open(t);
    const first = await issue();
    const revoked = await issue();
    await store.revoke(permitStoreKey(ORG, revoked.claims.jti), 120_000);
    refusal(t, await verifyPermit(options(t, revoked.token, { store })), 'PERMIT_REVOKED', 'revoked');

    const ok = await verifyPermit(options(t, first.token, { store }));
    t.equal(ok.valid, true, 'first use');
    t.equal(ok.valid && ok.consumed, true);
    refusal(t, await verifyPermit(options(t, first.token, { store })), 'PERMIT_ALREADY_USED', 'second use');
    refusal(t, await verifyPermit(options(t, first.token, { store, binding: { kind: 'partial' } })), 'PERMIT_ALREADY_USED', 'second use via verify-permit');

    // A refused permit is not consumed: after the refusal it still verifies once.
    const later = await issue();
    refusal(t, await verifyPermit(options(t, later.token, { store, binding: { kind: 'full', facts: { ...GATE_FACTS, ticket: 'x' } } })), 'BINDING_MISMATCH', 'mismatch');
    t.equal((await verifyPermit(options(t, later.token, { store }))).valid, true, 'a refused permit was not consumed');

    const records = await store.readRecords(verificationStream(ORG), '0', 100);
    t.same(
      records.map((r) => r.fields),
      [
        { permit_id: first.claims.jti, outcome: 'allow' },
        { permit_id: later.claims.jti, outcome: 'allow' },
      ],
      'one record per successful verification, none for refusals',
    );

    // The revocation marker and the consume marker live apart under one key.
    const consumedThenRevoked = await issue();
    t.equal((await verifyPermit(options(t, consumedThenRevoked.token, { store }))).valid, true);
    await store.revoke(permitStoreKey(ORG, consumedThenRevoked.claims.jti), 120_000);
    refusal(t, await verifyPermit(options(t, consumedThenRevoked.token, { store })), 'PERMIT_REVOKED', 'revocation is checked before replay');
  });

  t.test(`${name}: 500 concurrent verifications of one permit`, async (t) => {
    const store = open(t);
    const { token, claims } = await issue();
    const outcomes = await Promise.all(Array.from({ length: 500 }, () => verifyPermit(options(t, token, { store }))));
    const valid = outcomes.filter((o) => o.valid);
    const used = outcomes.filter((o) => !o.valid && o.code === 'PERMIT_ALREADY_USED');
    t.equal(valid.length, 1, 'exactly one valid');
    t.equal(used.length, 499, '499 PERMIT_ALREADY_USED');
    const records = await store.readRecords(verificationStream(ORG), '0', 1000);
    t.same(records.map((r) => r.fields['permit_id']), [claims.jti], 'exactly one record');
  });
}
