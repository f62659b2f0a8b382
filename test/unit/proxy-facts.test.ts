/**
 * Fact derivation: every source kind, number conversion, JSON Pointer (RFC 6901 §5), refusals
 * that name the fact, and the example route's facts hashing equal to what evaluate binds.
 */
import fc from 'fast-check';
import t from 'tap';
import { bindingHash, boundFacts } from '../../shared/permits/binding.js';
import { loadProxyConfig, parseProxyConfig, type ProxyRoute } from '../../proxy/config.js';
import { deriveFacts, type FactRequest } from '../../proxy/facts.js';
import { readJsonPointer } from '../../proxy/json-pointer.js';
import { compileRouteTable, matchRoute } from '../../proxy/routes.js';

const base = { upstream: 'http://u', authority: { url: 'http://a', api_key: 'k' }, organization: 'org_1' };
const routeWith = (facts: Record<string, unknown>, path = '/r/:id/:acct'): ProxyRoute =>
  parseProxyConfig({ ...base, routes: [{ name: 'r', match: { method: 'POST', path }, action_type: 'payment.wire', facts }] }).routes[0]!;
const request = (over: Partial<FactRequest> = {}): FactRequest => ({
  params: { id: '42', acct: 'ACC-1' },
  query: new URLSearchParams('amount=12.50&memo=hi&dup=1&dup=2&bad=12abc'),
  headers: { 'x-actor-id': 'svc-a', 'x-amount': '7', 'x-env': 'prod' },
  body: { amount: 1200, amount_text: '99.5', target: { id: 'bene-1', 'a/b': 'slash' }, list: [10, 20], flag: false, nothing: null },
  ...over,
});

t.test('each source kind', async (t) => {
  const route = routeWith({
    actor_id: { header: 'X-Actor-Id' },
    environment: { header: 'x-env' },
    account_code: { path: 'acct' },
    amount_usd: { query: 'amount' },
    target: { type: { const: 'beneficiary' }, id: { body: '/target/id' } },
    memo: { query: 'memo' },
    second: { body: '/list/1' },
    flag: { body: '/flag' },
    nothing: { body: '/nothing' },
    tags: { const: ['a', { b: 1 }] },
    slash: { body: '/target/a~1b' },
    id_number: { path: 'id', as: 'number' },
  });
  const derived = deriveFacts(route, request());
  t.same(derived, {
    ok: true,
    actorFromPermit: false,
    facts: {
      action_type: 'payment.wire',
      actor_id: 'svc-a',
      environment: 'prod',
      account_code: 'ACC-1',
      amount_usd: 12.5,
      target: { type: 'beneficiary', id: 'bene-1' },
      memo: 'hi',
      second: 20,
      flag: false,
      nothing: null,
      tags: ['a', { b: 1 }],
      slash: 'slash',
      id_number: 42,
    },
  });
  t.equal(derived.ok && typeof derived.facts.amount_usd, 'number', 'a number, never a numeric string');
});

t.test('actor from the permit', async (t) => {
  const derived = deriveFacts(routeWith({ actor_id: { permit: true }, environment: { const: 'dev' } }), request());
  t.same(derived, { ok: true, actorFromPermit: true, facts: { action_type: 'payment.wire', environment: 'dev' } });
});

t.test('number conversion', async (t) => {
  const amountFrom = (facts: Record<string, unknown>, over: Partial<FactRequest> = {}) =>
    deriveFacts(routeWith({ actor_id: { permit: true }, ...facts }), request(over));
  t.same(amountFrom({ amount_usd: { header: 'X-Amount' } }), { ok: true, actorFromPermit: true, facts: { action_type: 'payment.wire', amount_usd: 7 } });
  for (const text of ['', ' 1', '1 ', '0x10', '1e999', 'NaN', 'Infinity', '12abc', '1,5', '.5', '+1']) {
    const derived = amountFrom({ amount_usd: { query: 'a' } }, { query: new URLSearchParams({ a: text }) });
    t.equal(derived.ok, false, `${JSON.stringify(text)} is refused`);
    t.equal(!derived.ok && derived.missing, 'amount_usd');
  }
  for (const [text, value] of [['0', 0], ['-0', 0], ['12.50', 12.5], ['1e3', 1000], ['007', 7]] as const) {
    const derived = amountFrom({ amount_usd: { query: 'a' } }, { query: new URLSearchParams({ a: text }) });
    t.same(derived.ok && derived.facts.amount_usd, value, `${text} → ${value}`);
  }
  const negative = amountFrom({ amount_usd: { query: 'a' } }, { query: new URLSearchParams({ a: '-5' }) });
  t.match(negative, { ok: false, missing: 'amount_usd', reason: /finite number >= 0/ });
  t.match(amountFrom({ amount_usd: { body: '/amount_text' } }), { ok: false, missing: 'amount_usd', reason: /must be a finite number/ }, 'a numeric body string is not a number');
  t.same(amountFrom({ amount_usd: { body: '/amount_text', as: 'number' } }).ok && 'ok', 'ok', 'unless the route says as: number');
  t.match(amountFrom({ amount_usd: { body: '/target', as: 'number' } }), { ok: false, missing: 'amount_usd' });
  t.match(amountFrom({ n: { query: 'bad', as: 'number' } }), { ok: false, missing: 'n', reason: /not a number/ });
});

t.test('refusals name the fact', async (t) => {
  const cases: Array<[facts: Record<string, unknown>, over: Partial<FactRequest>, missing: string, reason: RegExp]> = [
    [{ actor_id: { header: 'X-Actor-Id' } }, { headers: {} }, 'actor_id', /header x-actor-id is absent/],
    [{ actor_id: { header: 'X-Actor-Id' } }, { headers: { 'x-actor-id': '' } }, 'actor_id', /non-empty string/],
    [{ actor_id: { header: 'X-Actor-Id' } }, { headers: { 'x-actor-id': ['a', 'b'] } }, 'actor_id', /appears 2 times/],
    [{ actor_id: { permit: true }, memo: { query: 'missing' } }, {}, 'memo', /query parameter missing is absent/],
    [{ actor_id: { permit: true }, memo: { query: 'dup' } }, {}, 'memo', /appears 2 times/],
    [{ actor_id: { permit: true }, account_code: { body: '/nope' } }, {}, 'account_code', /the body has nothing at \/nope/],
    [{ actor_id: { permit: true }, account_code: { body: '/amount' } }, {}, 'account_code', /must be a string/],
    [{ actor_id: { permit: true }, account_code: { body: '/amount' } }, { body: undefined }, 'account_code', /no JSON body/],
    [{ actor_id: { permit: true }, target: { type: { const: 't' }, id: { body: '/list/5' } } }, {}, 'target.id', /nothing at \/list\/5/],
    [{ actor_id: { permit: true }, target: { type: { body: '/amount' }, id: { const: 'x' } } }, {}, 'target.type', /must be a string/],
    [{ actor_id: { permit: true }, target: { body: '/target' } }, {}, 'target', /type and id/],
    [{ actor_id: { permit: true }, x: { path: 'id' } }, { params: {} }, 'x', /path parameter :id is absent/],
  ];
  for (const [facts, over, missing, reason] of cases) {
    const derived = deriveFacts(routeWith(facts), request(over));
    t.match(derived, { ok: false, missing, reason }, `${missing}: ${reason}`);
  }
});

t.test('headers are matched case-insensitively (node:http lower-cases names)', async (t) => {
  for (const name of ['X-Actor-Id', 'x-actor-id', 'X-ACTOR-ID']) {
    const derived = deriveFacts(routeWith({ actor_id: { header: name } }), request());
    t.equal(derived.ok && derived.facts.actor_id, 'svc-a', name);
  }
});

t.test('JSON Pointer: RFC 6901 section 5', async (t) => {
  const document = { foo: ['bar', 'baz'], '': 0, 'a/b': 1, 'c%d': 2, 'e^f': 3, 'g|h': 4, 'i\\j': 5, 'k"l': 6, ' ': 7, 'm~n': 8 };
  const cases: Array<[string, unknown]> = [
    ['', document],
    ['/foo', ['bar', 'baz']],
    ['/foo/0', 'bar'],
    ['/', 0],
    ['/a~1b', 1],
    ['/c%d', 2],
    ['/e^f', 3],
    ['/g|h', 4],
    ['/i\\j', 5],
    ['/k"l', 6],
    ['/ ', 7],
    ['/m~0n', 8],
  ];
  for (const [pointer, expected] of cases) t.same(readJsonPointer(document, pointer), expected, JSON.stringify(pointer));
  t.equal(readJsonPointer({ '~1': 'tilde-one' }, '/~01'), 'tilde-one', '~01 is ~1, not /');
  for (const pointer of ['/foo/2', '/foo/-', '/foo/01', '/foo/+1', '/foo/0/x', '/nope', '/constructor', '/__proto__', '/toString']) {
    t.equal(readJsonPointer(document, pointer), undefined, `${pointer} → nothing`);
  }
  t.equal(readJsonPointer([[1, 2]], '/0/1'), 2);
  t.throws(() => readJsonPointer(document, 'foo'), /starts with \//);
  t.throws(() => readJsonPointer(document, '/a~2'), /~ must be followed by 0 or 1/);
});

t.test('the example route binds what evaluate of demo.echo binds', async (t) => {
  const config = await loadProxyConfig('config/proxy.yaml', { COUNTERSIGN_PROXY_ORGANIZATION: 'org_demo' });
  const table = compileRouteTable(config.routes);
  for (const [id, url] of [['42', '/echo/42'], ['a b/c', '/echo/a%20b%2Fc?x=1'], ['€', '/echo/%E2%82%AC/']] as const) {
    const match = matchRoute(table, 'POST', url);
    t.ok(match, url);
    const derived = deriveFacts(match!.route, { params: match!.params, query: new URLSearchParams(), headers: { 'x-actor-id': 'svc-demo' } });
    t.ok(derived.ok);
    if (!derived.ok) continue;
    const evaluated = boundFacts({ action_type: 'demo.echo', actor_id: 'svc-demo', context: { environment: 'dev', target: { type: 'demo', id } } }, []);
    t.equal(bindingHash(config.organization, derived.facts), bindingHash(config.organization, evaluated.facts), `hash-equal for ${url}`);
    t.same(Object.keys(derived.facts).sort(), evaluated.keys, 'the same bound keys');
  }
});

t.test('random requests never make matchRoute or deriveFacts throw', async (t) => {
  const config = parseProxyConfig({
    ...base,
    routes: [
      {
        name: 'all',
        match: { method: ['GET', 'POST'], path: '/p/:a/:b/*' },
        action_type: 'x.y',
        facts: {
          actor_id: { header: 'x-actor' },
          amount_usd: { query: 'amt' },
          account_code: { body: '/a/0/b' },
          target: { type: { path: 'a' }, id: { body: '/t' } },
          n: { header: 'x-n', as: 'number' },
          w: { path: '*' },
        },
      },
      { name: 'loose', match: { method: 'POST', path: '/' }, action_type: 'x.z', facts: { actor_id: { permit: true }, e: { body: '' } } },
    ],
  });
  const table = compileRouteTable(config.routes);
  const segment = fc.oneof(fc.constantFrom('p', '', '.', '..', '%', '%zz', '%2e', '%2F', '%E2%82', 'a?b', '#'), fc.string());
  const path = fc.array(segment, { maxLength: 8 }).map((parts) => `/${parts.join('/')}`);
  const headerValue = fc.oneof(fc.string(), fc.array(fc.string(), { maxLength: 3 }));
  t.doesNotThrow(() => fc.assert(
    fc.property(
      fc.constantFrom('GET', 'POST', 'HEAD', 'PUT', 'DELETE', 'BREW'),
      fc.oneof(path, fc.string()),
      fc.dictionary(fc.constantFrom('x-actor', 'x-n', 'x-other'), headerValue),
      fc.string(),
      fc.option(fc.jsonValue(), { nil: undefined }),
      (method, target, headers, query, body) => {
        const match = matchRoute(table, method, target);
        const route = match?.route ?? config.routes[0]!;
        const derived = deriveFacts(route, { params: match?.params ?? {}, query: new URLSearchParams(query), headers, body });
        if (derived.ok) {
          // Whatever is derived has a canonical form: hashing it never throws either.
          const facts = derived.actorFromPermit ? { ...derived.facts, actor_id: 'from-permit' } : derived.facts;
          bindingHash('org_1', facts);
        } else {
          if (typeof derived.missing !== 'string' || typeof derived.reason !== 'string') throw new Error('bad refusal');
        }
      },
    ),
    { numRuns: 2000 },
  ), 'matching, deriving and hashing never throw');
});
