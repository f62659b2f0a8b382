/**
 * AuthZEN subject and action search over real loopback HTTP, on the example policy: results are
 * what the policy engine would allow (a hold is not one; a type only a `prefix.*` class reaches is
 * listed only under a configured name), a search draws one `evaluate` token and records nothing,
 * pages follow `next_token` to the end, and resource search is not offered. Runs on PGlite + the
 * in-process store, and on Postgres + Redis when they are available.
 */
import t from 'tap';
import { GENEROUS_LIMITS, withTestAuthority } from '../helpers/authority.js';
import { appBackends, realServersMissing } from '../helpers/backends.js';
import { finance, payee, permitCount, production, refusedAt, wire } from '../helpers/authzen-scenario.js';
import { loopbackApi as loopback } from '../helpers/loopback-api.js';

for (const backend of appBackends()) {
  t.test(`subject and action search: through the policy, paged, one token, nothing recorded, on ${backend.name}`, (t) =>
    withTestAuthority(
      t,
      backend,
      async (authority) => {
        const { call, problems } = await loopback(authority);
        const evaluations = async () => (await authority.backend.db.query<{ n: number }>('SELECT count(*)::int AS n FROM evaluations'))[0]!.n;
        const before = await evaluations();

        const actions = await call('POST', '/access/v1/search/action', { body: { subject: finance, resource: payee(), context: production(500), action: { name: 'ignored' } } });
        t.equal(actions.status, 200);
        const names = actions.body.results.map((found: { name: string }) => found.name);
        t.ok(names.includes('wire-payment'), 'a configured name whose type (payments.wire) the policy allows finance-bot at 500');
        t.notOk(names.includes('payments.wire'), 'a type only a prefix class (payments.*) reaches is not enumerable by itself');
        const remaining = Number(actions.headers.get('x-ratelimit-remaining'));
        const held = await call('POST', '/access/v1/search/action', { body: { subject: finance, resource: payee(), context: production(50_000) } });
        t.notOk(held.body.results.some((found: { name: string }) => found.name === 'wire-payment'), 'a hold is not a result');
        t.equal(Number(held.headers.get('x-ratelimit-remaining')), remaining - 1, 'a search draws one token, whatever its candidates');
        t.same((await call('POST', '/access/v1/search/action', { body: { subject: { type: 'service', id: 'nobody' }, resource: payee() } })).body.results, [], 'an unknown subject: no results');

        const subjects = await call('POST', '/access/v1/search/subject', { body: { subject: { type: 'service', id: 'ignored' }, action: wire, resource: payee(), context: production(500) } });
        t.equal(subjects.status, 200);
        const found = subjects.body.results as Array<{ type: string; id: string }>;
        t.ok(found.some((subject) => subject.id === 'finance-bot'), 'finance-bot may wire');
        t.ok(found.every((subject) => subject.type === 'service'), 'with the requested type');
        t.equal(subjects.body.page.next_token, '', 'one page');
        t.equal(subjects.body.page.total, found.length);

        // Paging: one result a page, followed to the end.
        const seen: string[] = [];
        let token: string | undefined;
        do {
          const page = await call('POST', '/access/v1/search/subject', { body: { subject: { type: 'service' }, action: wire, resource: payee(), context: production(500), page: { limit: 1, ...(token ? { token } : {}) } } });
          t.equal(page.body.page.count, page.body.results.length);
          seen.push(...page.body.results.map((subject: { id: string }) => subject.id));
          token = page.body.page.next_token;
        } while (token);
        t.same(seen, found.map((subject) => subject.id), 'the pages together are the one-page answer, in order');
        refusedAt(t, await call('POST', '/access/v1/search/subject', { body: { subject: { type: 'service' }, action: wire, resource: payee(), page: { token: 'forged' } } }), 'page.token', 'a token this search did not hand out');

        t.equal(await evaluations(), before, 'no search recorded an evaluation');
        t.equal((await call('POST', '/access/v1/search/resource', { body: { subject: finance, action: wire, resource: { type: 'payee' } } })).status, 404, 'resource search is not offered');
        t.equal(await permitCount(authority), 0);
        t.same(problems, [], 'every answer matches the OpenAPI document');
      },
      { rate_limits: { ...GENEROUS_LIMITS.rate_limits, evaluate: { per_minute: 100, burst: 100 } }, authzen: { action_names: { 'wire-payment': 'payments.wire' } } },
    ),
  );

}

const missing = realServersMissing();
if (missing) t.comment(`the Postgres + Redis variant did not run: ${missing}`);
