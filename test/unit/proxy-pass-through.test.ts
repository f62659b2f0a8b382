/**
 * pass_through: with `unmatched: deny` (the enforce default), the requests an operator declares
 * non-consequential go through without a permit, and nothing else the gate cannot place does. An
 * entry never opens a route or a protected subtree.
 */
import t from 'tap';
import { parseProxyConfig, ProxyConfigError } from '../../proxy/config.js';
import { passesThrough } from '../../proxy/pass-through.js';
import { proxyState } from '../../proxy/server.js';

const minimal = {
  upstream: 'http://127.0.0.1:7090',
  authority: { url: 'http://127.0.0.1:7070', api_key_file: './k' },
  organization: 'org_1',
};

t.test('declared requests pass, others do not', async (t) => {
  const config = parseProxyConfig({ ...minimal, pass_through: [{ path: '/healthz' }, { methods: ['GET', 'OPTIONS'], path: '/public/*' }] });
  t.equal(config.unmatched, 'deny', 'enforce still denies what it cannot place');
  const { passThrough } = proxyState(config);
  t.ok(passesThrough(passThrough, 'GET', '/healthz'), 'any method by default');
  t.ok(passesThrough(passThrough, 'DELETE', '/healthz'));
  t.ok(passesThrough(passThrough, 'GET', '/public/css/site.css?v=1'), 'a trailing * takes the rest');
  t.ok(passesThrough(passThrough, 'HEAD', '/public/a'), 'HEAD follows GET');
  t.ok(passesThrough(passThrough, 'OPTIONS', '/public/a'), 'a CORS preflight when listed');
  t.notOk(passesThrough(passThrough, 'POST', '/public/a'), 'not another method');
  t.notOk(passesThrough(passThrough, 'GET', '/healthz/extra'), 'not a longer path');
  t.notOk(passesThrough(passThrough, 'GET', '/payments'), 'not an undeclared path');
});

t.test('a subtree pattern or a bad path is refused with its field', async (t) => {
  for (const [entry, message] of [
    [{ path: '/echo/**' }, /trailing \*/],
    [{ path: 'healthz' }, /starts with \//],
    [{ path: '/x', methods: ['TRACE'] }, /methods/],
  ] as const) {
    t.throws(() => parseProxyConfig({ ...minimal, pass_through: [entry] }), ProxyConfigError);
    try {
      parseProxyConfig({ ...minimal, pass_through: [entry] });
    } catch (error) {
      t.match((error as Error).message, /pass_through\.0/, `${JSON.stringify(entry)}: the field is named`);
      t.match((error as Error).message, message);
    }
  }
});
