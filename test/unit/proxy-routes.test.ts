/** Route matching: method and path pattern, decoding, wildcard, trailing slash, first match wins. */
import t from 'tap';
import { parseProxyConfig } from '../../proxy/config.js';
import { compileRouteTable, matchRoute, parsePathPattern, splitPath } from '../../proxy/routes.js';

const route = (name: string, method: string | string[], path: string) => ({
  name,
  match: { method, path },
  action_type: 'demo.echo',
  facts: { actor_id: { permit: true } },
});

const config = parseProxyConfig({
  upstream: 'http://127.0.0.1:7090',
  authority: { url: 'http://127.0.0.1:7070', api_key: 'k' },
  organization: 'org_1',
  routes: [
    route('echo', 'POST', '/echo/:id'),
    route('wire', ['POST', 'PUT'], '/payments/:account/wire'),
    route('wire-any', 'POST', '/payments/:account/:op'),
    route('files', 'GET', '/files/*'),
    route('root', 'DELETE', '/'),
    route('export', 'GET', '/Exports/Now'),
  ],
});
const table = compileRouteTable(config.routes);

const cases: Array<[method: string, path: string, expected: string | null, params?: Record<string, string>]> = [
  ['POST', '/echo/42', 'echo', { id: '42' }],
  ['POST', '/echo/42/', 'echo', { id: '42' }],
  ['POST', '//echo//42', 'echo', { id: '42' }],
  ['POST', '/echo/42?x=1&id=7', 'echo', { id: '42' }],
  ['POST', '/echo/42#frag', 'echo', { id: '42' }],
  ['POST', '/echo/a%20b', 'echo', { id: 'a b' }],
  ['POST', '/echo/a%2Fb', 'echo', { id: 'a/b' }],
  ['POST', '/echo/%E2%82%AC', 'echo', { id: '€' }],
  ['POST', '/echo/%zz', 'echo', { id: '%zz' }],
  ['POST', '/ECHO/42', 'echo', { id: '42' }],
  ['POST', '/%65cho/42', 'echo', { id: '42' }],
  ['POST', '/x/../echo/42', 'echo', { id: '42' }],
  ['POST', '/x/%2e%2e/echo/./42', 'echo', { id: '42' }],
  ['POST', 'http://gate.internal:7080/echo/42?q', 'echo', { id: '42' }],
  ['POST', '/echo', null],
  ['POST', '/echo/', null],
  ['POST', '/echo/42/more', null],
  ['GET', '/echo/42', null],
  ['PATCH', '/echo/42', null],
  ['OPTIONS', '/echo/42', null],
  ['post', '/echo/42', null],
  ['POST', '/payments/acme/wire', 'wire', { account: 'acme' }],
  ['PUT', '/payments/acme/wire', 'wire', { account: 'acme' }],
  ['POST', '/payments/acme/refund', 'wire-any', { account: 'acme', op: 'refund' }],
  ['PUT', '/payments/acme/refund', null],
  ['GET', '/files', 'files', { '*': '' }],
  ['GET', '/files/', 'files', { '*': '' }],
  ['GET', '/files/a/b%20c/d', 'files', { '*': 'a/b c/d' }],
  ['HEAD', '/files/a', 'files', { '*': 'a' }],
  ['GET', '/filesx/a', null],
  ['DELETE', '/', 'root', {}],
  ['DELETE', '', 'root', {}],
  ['DELETE', '/?all=1', 'root', {}],
  ['DELETE', '/x', null],
  ['GET', '/exports/now', 'export', {}],
  ['GET', '/EXPORTS/NOW/', 'export', {}],
  ['GET', '*', null],
];

for (const [method, path, expected, params] of cases) {
  const match = matchRoute(table, method, path);
  t.equal(match?.route.name ?? null, expected, `${method} ${path} → ${expected ?? 'no match'}`);
  if (params !== undefined) t.same({ ...match?.params }, params, `${method} ${path} params`);
}

t.test('first match in configuration order wins', async (t) => {
  const ordered = parseProxyConfig({
    upstream: 'http://u',
    authority: { url: 'http://a', api_key: 'k' },
    organization: 'o',
    routes: [route('general', 'POST', '/a/:x'), route('specific', 'POST', '/a/b'), route('wild', 'POST', '/a/*')],
  });
  const orderedTable = compileRouteTable(ordered.routes);
  t.equal(matchRoute(orderedTable, 'POST', '/a/b')?.route.name, 'general');
  t.equal(matchRoute(orderedTable, 'POST', '/a/b/c')?.route.name, 'wild');
  t.equal(matchRoute(orderedTable, 'POST', '/a')?.route.name, 'wild');
});

t.test('params objects have no prototype to pollute', async (t) => {
  const polluting = compileRouteTable(
    parseProxyConfig({
      upstream: 'http://u',
      authority: { url: 'http://a', api_key: 'k' },
      organization: 'o',
      routes: [route('p', 'GET', '/p/:__proto__/:constructor')],
    }).routes,
  );
  const match = matchRoute(polluting, 'GET', '/p/x/y');
  t.equal(match?.params.__proto__, 'x');
  t.equal(match?.params.constructor, 'y');
  t.equal(({} as Record<string, unknown>).x, undefined);
});

t.test('pattern parsing', async (t) => {
  t.same(parsePathPattern('/payments/:account/wire'), {
    source: '/payments/:account/wire',
    segments: [
      { kind: 'literal', value: 'payments' },
      { kind: 'param', name: 'account' },
      { kind: 'literal', value: 'wire' },
    ],
    wildcard: false,
    params: ['account'],
  });
  for (const [bad, message] of [
    ['echo', /starts with \//],
    ['/a?b', /query string/],
    ['/a%20b', /decoded/],
    ['/a/*/b', /last segment/],
    ['/a/:', /parameter/],
    ['/a/:1x', /parameter/],
    ['/a/b:c', /begin a whole segment/],
    ['/a/../b', /\.\./],
  ] as const) {
    const result = parsePathPattern(bad);
    t.ok('error' in result && message.test(result.error), `${bad} refused`);
  }
  t.same(splitPath('/a//b/./c/../d?x#y'), ['a', 'b', 'd']);
  t.same(splitPath('/../../a'), ['a'], 'no climbing above the root');
});
