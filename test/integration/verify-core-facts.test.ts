/**
 * The permit verification core against real tokens, what a genuine permit must match: its
 * issuer, audience and organization, the permit's record (found, used, revoked), its time window
 * at the leeway's boundaries, and the action: action type, actor, every bound fact (the full
 * binding a gate derives) and the partial binding verify-permit checks without a context. Every
 * refusal code comes from a real token; time moves through `nowMs`, never by sleeping
 * (test/helpers/verify-core-fixture.ts).
 *
 * @example
 *   npx tap --disable-coverage test/integration/verify-core-facts.test.ts
 */
import t from 'tap';
import { PERMIT_LEEWAY_SECONDS } from '../../shared/permits/claims.js';
import { verifyPermit } from '../../shared/permits/verify.js';
import type { SharedStore } from '../../shared/store/types.js';
import { CONTEXT, GATE_FACTS, T0, issue, newMemoryStore, options, refusal } from '../helpers/verify-core-fixture.js';

t.test('issuer, audience, organization, existence', async (t) => {
  let outcome = await verifyPermit(options(t, (await issue({ issuer: 'https://evil.test' })).token));
  refusal(t, outcome, 'PERMIT_INVALID', 'wrong issuer', /issuer/);
  t.equal(outcome.valid === false && outcome.claims?.iss, 'https://evil.test', 'claims are reported once the signature holds');

  outcome = await verifyPermit(options(t, (await issue({ audience: 'countersign:other-gate' })).token));
  refusal(t, outcome, 'PERMIT_INVALID', 'wrong audience', /audience/);

  outcome = await verifyPermit(options(t, (await issue({ org: 'org_2' })).token));
  refusal(t, outcome, 'ORG_MISMATCH', 'other organization');
  t.equal(outcome.valid === false && outcome.claims?.org, 'org_2');

  const { token, claims } = await issue();
  const seen: string[] = [];
  outcome = await verifyPermit(
    options(t, token, {
      permitStatus: async (c) => {
        seen.push(c.jti);
        return 'unknown';
      },
    }),
  );
  refusal(t, outcome, 'PERMIT_NOT_FOUND', 'not found');
  t.same(seen, [claims.jti], 'asked about this permit');

  // Recorded as used or revoked: refused before the store is asked, so a store that lost the fact cannot re-open it.
  const recorded = await issue();
  refusal(t, await verifyPermit(options(t, recorded.token, { permitStatus: async () => 'consumed' })), 'PERMIT_ALREADY_USED', 'recorded as consumed');
  refusal(t, await verifyPermit(options(t, recorded.token, { permitStatus: async () => 'revoked' })), 'PERMIT_REVOKED', 'recorded as revoked');

  outcome = await verifyPermit(options(t, token, { permitStatus: async () => 'issued' }));
  t.equal(outcome.valid, true, 'found');

  outcome = await verifyPermit(
    options(t, (await issue()).token, {
      permitStatus: async () => {
        throw new Error('database down');
      },
    }),
  );
  refusal(t, outcome, 'INTERNAL_ERROR', 'lookup fails');
  t.equal(outcome.valid === false && outcome.unavailable, true, 'unavailable');
});

t.test('not yet valid and expired, at the leeway boundaries', async (t) => {
  const { token, claims } = await issue({ lifetimeSeconds: 60 });
  const leewayMs = PERMIT_LEEWAY_SECONDS * 1000;
  t.equal(claims.exp - claims.iat, 60);
  refusal(t, await verifyPermit(options(t, token, { nowMs: claims.nbf * 1000 - leewayMs - 1 })), 'PERMIT_NOT_YET_VALID', 'before nbf beyond the leeway');
  t.equal((await verifyPermit(options(t, token, { nowMs: claims.nbf * 1000 - leewayMs }))).valid, true, 'within the leeway before nbf');
  t.equal((await verifyPermit(options(t, token, { nowMs: claims.exp * 1000 + leewayMs - 1 }))).valid, true, 'within the leeway after exp');
  refusal(t, await verifyPermit(options(t, token, { nowMs: claims.exp * 1000 + leewayMs })), 'PERMIT_EXPIRED', 'at exp + leeway');
  refusal(t, await verifyPermit(options(t, token, { nowMs: claims.exp * 1000 + 3_600_000 })), 'PERMIT_EXPIRED', 'long expired');
  refusal(t, await verifyPermit(options(t, token, { nowMs: claims.exp * 1000, leewaySeconds: 0 })), 'PERMIT_EXPIRED', 'no leeway');

  // The consume marker outlives the last accepted moment.
  const store = newMemoryStore(t);
  const ttls: number[] = [];
  const spy: SharedStore = Object.assign(Object.create(store) as SharedStore, {
    consumePermit: (key: string, ttlMs: number) => {
      ttls.push(ttlMs);
      return store.consumePermit(key, ttlMs);
    },
  });
  await verifyPermit(options(t, (await issue()).token, { store: spy, nowMs: T0 + 10_000 }));
  await verifyPermit(options(t, (await issue()).token, { store: spy, nowMs: claims.exp * 1000 + leewayMs - 1 }));
  t.same(ttls, [60_000 - 10_000 + leewayMs, 1], 'TTL until exp + leeway, at least 1 ms');
});

t.test('action type and actor', async (t) => {
  const { token } = await issue();
  refusal(t, await verifyPermit(options(t, token, { binding: { kind: 'full', facts: { ...GATE_FACTS, action_type: 'payment.refund' } } })), 'ACTION_TYPE_MISMATCH', 'action type');
  refusal(t, await verifyPermit(options(t, token, { binding: { kind: 'full', facts: { ...GATE_FACTS, actor_id: 'svc-other' } } })), 'ACTOR_MISMATCH', 'actor');
  // Action type is checked before the actor.
  refusal(
    t,
    await verifyPermit(options(t, token, { binding: { kind: 'full', facts: { ...GATE_FACTS, action_type: 'x.y', actor_id: 'z' } } })),
    'ACTION_TYPE_MISMATCH',
    'both differ',
  );
});

t.test('binding mismatch on each bound fact', async (t) => {
  const { token } = await issue();
  const changed: [string, Record<string, unknown>][] = [
    ['environment', { environment: 'staging' }],
    ['target.type', { target: { type: 'wallet', id: 'acct_42' } }],
    ['target.id', { target: { type: 'account', id: 'acct_43' } }],
    ['amount_usd', { amount_usd: 1250.51 }],
    ['amount_usd as a string', { amount_usd: '1250.5' }],
    ['account_code', { account_code: 'GL-4011' }],
    ['extra bound key', { ticket: 'CHG-1002' }],
    ['unbound standard fact the gate derived', { environment: 'production' }],
  ];
  for (const [name, change] of changed) {
    const facts = name.startsWith('unbound') ? { ...GATE_FACTS } : { ...GATE_FACTS, ...change };
    const permit = name.startsWith('unbound') ? (await issue({ context: { ...CONTEXT, environment: undefined } })).token : token;
    const outcome = await verifyPermit(options(t, permit, { binding: { kind: 'full', facts } }));
    refusal(t, outcome, 'BINDING_MISMATCH', name, name.startsWith('unbound') ? /carries environment/ : name.endsWith('string') ? /amount_usd/ : /does not match/);
    t.not(outcome.valid === false && outcome.claims, null, `${name}: claims reported`);
  }

  for (const missing of ['environment', 'target', 'amount_usd', 'account_code', 'ticket']) {
    const facts: Record<string, unknown> = { ...GATE_FACTS };
    delete facts[missing];
    const outcome = await verifyPermit(options(t, token, { binding: { kind: 'full', facts } }));
    refusal(t, outcome, 'BINDING_MISMATCH', `gate could not derive ${missing}`);
    t.match(outcome.valid === false && outcome.reason, missing, 'the reason names the fact');
  }
  const noAction: Record<string, unknown> = { ...GATE_FACTS };
  delete noAction['action_type'];
  refusal(t, await verifyPermit(options(t, token, { binding: { kind: 'full', facts: noAction } })), 'BINDING_MISMATCH', 'gate could not derive action_type');

  refusal(
    t,
    await verifyPermit(options(t, token, { binding: { kind: 'full', facts: { ...GATE_FACTS, amount_usd: Number.NaN } } })),
    'BINDING_MISMATCH',
    'a gate fact without canonical form',
  );

  // Facts the permit does not bind, and extra target keys, do not matter.
  const outcome = await verifyPermit(
    options(t, token, {
      binding: { kind: 'full', facts: { ...GATE_FACTS, memo: 'anything', target: { id: 'acct_42', type: 'account', label: 'x' } } },
    }),
  );
  t.equal(outcome.valid, true, 'unbound extras and extra target keys are ignored');
});

t.test('partial binding', async (t) => {
  const { token } = await issue();
  let outcome = await verifyPermit(options(t, token, { binding: { kind: 'partial', actionType: 'payment.wire', actorId: 'svc-billing' } }));
  t.equal(outcome.valid, true);
  t.equal(outcome.valid && outcome.binding, 'partial');

  outcome = await verifyPermit(options(t, (await issue()).token, { binding: { kind: 'partial', actionType: '', actorId: '' } }));
  t.equal(outcome.valid && outcome.binding, 'partial', 'empty strings mean not given');
  outcome = await verifyPermit(options(t, (await issue()).token, { binding: { kind: 'partial' } }));
  t.equal(outcome.valid && outcome.binding, 'partial', 'nothing given');

  refusal(t, await verifyPermit(options(t, (await issue()).token, { binding: { kind: 'partial', actionType: 'payment.refund' } })), 'ACTION_TYPE_MISMATCH', 'partial action type');
  refusal(t, await verifyPermit(options(t, (await issue()).token, { binding: { kind: 'partial', actorId: 'svc-other' } })), 'ACTOR_MISMATCH', 'partial actor');
});
