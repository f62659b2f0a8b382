/**
 * The request targets the proxy refuses as ambiguous (proxy/paths.ts), the `**` subtree patterns
 * and protectedPrefix (proxy/routes.ts), and that every target accepted is forwarded unchanged.
 */
import fc from 'fast-check';
import t from 'tap';
import { parseProxyConfig } from '../../proxy/config.js';
import { checkedTarget, pathProblem } from '../../proxy/paths.js';
import { compileRouteTable, matchRoute, parsePathPattern, protectedPrefix } from '../../proxy/routes.js';
import { echoFacts } from '../helpers/proxy-harness.js';

t.test('ambiguous paths are refused with 400 invalid_request AMBIGUOUS_PATH', async (t) => {
  for (const target of [
    '//echo/1',
    '/echo//1',
    '/echo/1//',
    '/./echo/1',
    '/echo/1/.',
    '/x/../echo/1',
    '/x/%2e%2e/echo/1',
    '/x/%2E./echo/1',
    '/echo/%2e/1',
    '/echo%2f1',
    '/echo%2F1',
    '/echo%5c1',
    '/echo%5C1',
    '/echo/1%00',
    '/echo\\1',
    '/echo/1;a=b',
    '/echo;jsessionid=x/1',
    '/echo/1#f',
    '/echo/%',
    '/echo/%zz',
    '/echo/%E0%A4%A',
    '/echo/%C0%AE',
    'http://host/x/../echo/1',
    'http://host//echo/1',
    '*',
    'echo/1',
    '',
  ]) {
    const checked = checkedTarget(target, {});
    t.ok('error' in checked, `${JSON.stringify(target)} refused`);
    if ('error' in checked) {
      t.equal(checked.error.status, 400);
      t.equal(checked.error.code, 'invalid_request');
      t.match(checked.error.reason, /^(AMBIGUOUS_PATH|INVALID_TARGET)$/);
    }
  }
});

t.test('plain paths pass unchanged: what is matched is what is forwarded', async (t) => {
  for (const [target, forwarded] of [
    ['/echo/1', '/echo/1'],
    ['/echo/1/', '/echo/1/'],
    ['/', '/'],
    ['/ECHO/1', '/ECHO/1'],
    ['/%65cho/a%20b', '/%65cho/a%20b'],
    ['/echo/1?x=/../y&z=%2f', '/echo/1?x=/../y&z=%2f'],
    ['/files/report.v2.pdf', '/files/report.v2.pdf'],
    ['/a/...', '/a/...'],
    ['http://host/echo/1?x=1', '/echo/1?x=1'],
    ['http://host', '/'],
    ['http://host?x=1', '/?x=1'],
  ] as const) {
    t.same(checkedTarget(target, {}), { target: forwarded }, target);
  }
});

t.test('method overrides are refused on any request: headers and the _method query parameter', async (t) => {
  for (const name of ['x-http-method-override', 'x-http-method', 'x-method-override']) {
    const checked = checkedTarget('/public', { [name]: 'POST' });
    t.ok('error' in checked && checked.error.reason === 'METHOD_OVERRIDE', name);
  }
  for (const target of ['/public?_method=POST', '/public?a=1&_METHOD=delete', '/public?%5Fmethod=POST', '/public?_method']) {
    const checked = checkedTarget(target, {});
    t.ok('error' in checked && checked.error.reason === 'METHOD_OVERRIDE', target);
  }
  t.same(checkedTarget('/public?method=POST&x_method=1', {}), { target: '/public?method=POST&x_method=1' }, 'other names are fine');
});

t.test('property: a path with no problem has no //, dot segment, encoded separator, ; or \\', async () => {
  const piece = fc.constantFrom('a', 'B', '%41', '.', '..', '%2e', '%2E%2e', '%2f', '%5c', '%00', ';x', '\\', '', '...', '%', '%zz', '~');
  fc.assert(
    fc.property(fc.array(piece, { minLength: 1, maxLength: 6 }), (pieces) => {
      const path = `/${pieces.join('/')}`;
      if (pathProblem(path) !== null) return true;
      const decoded = path.split('/').slice(1).map((segment) => decodeURIComponent(segment));
      const inner = decoded.slice(0, -1);
      return (
        !/[;\\]/.test(path) &&
        !/%(2f|5c|00)/i.test(path) &&
        decoded.every((segment) => segment !== '.' && segment !== '..' && !segment.includes('/')) &&
        inner.every((segment) => segment !== '')
      );
    }),
    { numRuns: 2000 },
  );
});

t.test('** patterns: the route matches without it, and its subtree is protected for every method', async (t) => {
  t.match(parsePathPattern('/echo/:id/**'), { source: '/echo/:id/**', params: ['id'], wildcard: false, subtree: true });
  t.match(parsePathPattern('/echo/**/x'), { error: /last segment/ });
  t.match(parsePathPattern('/echo/*/**'), { error: /last segment/ });
  const config = parseProxyConfig({
    upstream: 'http://127.0.0.1:9',
    authority: { url: 'http://127.0.0.1:7070', api_key: 'cs_test_unused' },
    organization: 'org',
    routes: [
      { name: 'refund', match: { method: 'POST', path: '/payments/:account/refund' }, action_type: 'payment.refund', facts: echoFacts({ path: 'account' }) },
      { name: 'payments', match: { method: 'POST', path: '/payments/**' }, action_type: 'payment.any', facts: echoFacts({ const: 'all' }) },
      { name: 'echo', match: { method: 'POST', path: '/echo/:id/**' }, action_type: 'demo.echo', facts: echoFacts() },
    ],
  });
  const table = compileRouteTable(config.routes);
  t.equal(matchRoute(table, 'POST', '/echo/1')?.route.name, 'echo');
  t.equal(matchRoute(table, 'POST', '/echo/1/extra'), null, 'the subtree is not the route');
  t.equal(matchRoute(table, 'POST', '/payments/acme/refund')?.route.name, 'refund', 'a route listed first still matches');
  t.equal(matchRoute(table, 'POST', '/payments')?.route.name, 'payments');
  for (const [method, path, prefix] of [
    ['POST', '/echo/1/extra', '/echo/:id/**'],
    ['GET', '/echo/1', '/echo/:id/**'],
    ['OPTIONS', '/ECHO/1/a/b?x=1', '/echo/:id/**'],
    ['POST', '/echo/', '/echo/:id/**'],
    ['GET', '/payments', '/payments/**'],
    ['DELETE', '/payments/acme/refund/x', '/payments/**'],
    ['POST', '/echo', null],
    ['POST', '/echoes/1', null],
    ['GET', '/public', null],
  ] as const) {
    t.equal(protectedPrefix(table, path)?.source ?? null, prefix, `${method} ${path}`);
  }
  t.same(compileRouteTable([]).protectedPrefixes, [], 'no ** routes: nothing protected beyond the routes');
});
