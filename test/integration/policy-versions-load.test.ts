/**
 * Evaluations that arrive together for a policy version not yet compiled in this process (after a
 * start, or a PUT on another replica) share one load and one compilation: the regression was one
 * query and one compilation per waiting evaluation, all on the event loop at once.
 */
import t from 'tap';
import { PolicyVersions } from '../../authority/policy/versions.js';
import type { Db } from '../../authority/store/db.js';
import { PolicyResponse } from '../../shared/wire/policies.js';
import { withTestAuthority } from '../helpers/authority.js';
import { appBackends } from '../helpers/backends.js';
import { oneRulePolicy } from '../helpers/one-rule-policy.js';

const [backend] = appBackends();

/** The same database, counting the policy loads that reach it. */
function countingPolicyLoads(db: Db): { db: Db; loads: () => number } {
  let loads = 0;
  const counted = Object.create(db) as Db;
  counted.query = ((text: string, params?: unknown[]) => {
    if (text.startsWith('SELECT * FROM policies')) loads += 1;
    return db.query(text, params);
  }) as Db['query'];
  return { db: counted, loads: () => loads };
}

if (backend) {
  t.test('concurrent evaluations share one load of a policy version', (t) =>
    withTestAuthority(t, backend, async (authority) => {
      const put = await authority.app.inject({
        method: 'PUT',
        url: '/v1/policies',
        headers: { ...authority.bearer(authority.acmeAdmin), 'content-type': 'application/json' },
        payload: JSON.stringify({ source: oneRulePolicy('true', { actionPrefix: 'load', ruleId: 'any', reason: 'ANY' }), format: 'yaml' }),
      });
      t.equal(put.statusCode, 200);
      const version = PolicyResponse.parse(put.json()).policy?.version;
      if (version === undefined) throw new Error('the PUT stored no policy');

      const counting = countingPolicyLoads(authority.backend.db);
      const policies = new PolicyVersions(counting.db, authority.clock);
      const org = { id: authority.acme.id, policyVersion: version };
      const loaded = await Promise.all(Array.from({ length: 8 }, () => policies.current(org)));

      t.equal(counting.loads(), 1, 'one query for eight evaluations');
      t.equal(loaded[0]?.version, version, 'the version asked for');
      t.ok(loaded.every((policy) => policy === loaded[0]), 'every evaluation got the same compiled policy');

      t.equal(await policies.current(org), loaded[0], 'later evaluations use the cache');
      t.equal(counting.loads(), 1);
    }),
  );

  t.test('a failed load is not remembered: the next evaluation loads again', (t) =>
    withTestAuthority(t, backend, async (authority) => {
      const failing = Object.create(authority.backend.db) as Db;
      let attempts = 0;
      failing.query = (async () => {
        attempts += 1;
        throw new Error('the database is down');
      }) as Db['query'];
      const policies = new PolicyVersions(failing, authority.clock);
      const org = { id: authority.acme.id, policyVersion: 1 };
      const results = await Promise.allSettled([policies.current(org), policies.current(org)]);
      t.same(results.map((result) => result.status), ['rejected', 'rejected']);
      t.equal(attempts, 1, 'the two waiting evaluations shared the failed load');
      await t.rejects(policies.current(org), /the database is down/);
      t.equal(attempts, 2, 'and the next one tried again');
    }),
  );
}
