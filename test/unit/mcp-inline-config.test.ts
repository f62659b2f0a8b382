/** `mcp.inline` in proxy.yaml: its defaults, and errors that name every bad field by its path. */
import t from 'tap';
import { parseProxyConfig, ProxyConfigError } from '../../proxy/config.js';

const base = {
  upstream: 'http://127.0.0.1:7090',
  authority: { url: 'http://127.0.0.1:7070', api_key_file: './k' },
  organization: 'org_1',
};

const jwt = { issuer: 'https://idp.example/', audience: 'https://gate.example/mcp', jwks_url: 'https://idp.example/jwks.json' };
const route = (mcp: Record<string, unknown>) => ({ name: 'helpdesk', match: { path: '/mcp' }, mcp: { server: 'helpdesk', tools: [{ name: '*' }], ...mcp } });

const errorOf = (mcp: Record<string, unknown>): string => {
  try {
    parseProxyConfig({ ...base, routes: [route(mcp)] });
  } catch (error) {
    if (error instanceof ProxyConfigError) return error.message;
    throw error;
  }
  throw new Error('expected a ProxyConfigError');
};

t.test('inline compiles with its defaults', async (t) => {
  const config = parseProxyConfig({ ...base, routes: [route({ inline: { api_key_file: './gate-key', actor: { jwt } } })] });
  t.match(config.routes[0]!.mcp!.inline, {
    api_key_file: './gate-key',
    pass_token: false,
    actor: { jwt: { ...jwt, claim: 'sub', algorithms: ['RS256', 'ES256', 'EdDSA'], clock_tolerance_seconds: 5 } },
  });
  t.equal(config.routes[0]!.mcp!.inline!.console_url, undefined, "the console's address defaults to the authority's at run time");

  const header = parseProxyConfig({ ...base, routes: [route({ inline: { api_key: 'k', actor: { header: 'X-Authenticated-Agent', prefix: 'agent:' } } })] });
  t.match(header.routes[0]!.mcp!.inline!.actor, { header: 'x-authenticated-agent', prefix: 'agent:' }, 'the header name in lower case');
  t.equal(parseProxyConfig({ ...base, routes: [route({ tools: [{ name: '*' }] })] }).routes[0]!.mcp!.inline, undefined, 'no inline: callers bring permits');
});

t.test('every bad field of inline is reported by its path', async (t) => {
  t.match(errorOf({ inline: { api_key: 'k', actor: { jwt, header: 'x-agent' } } }), /routes\.0\.mcp\.inline\.actor: give exactly one of jwt/, 'both identities');
  t.match(errorOf({ inline: { api_key: 'k', actor: {} } }), /routes\.0\.mcp\.inline\.actor: give exactly one of jwt/, 'neither');
  t.match(errorOf({ inline: { actor: { jwt } } }), /routes\.0\.mcp\.inline: give exactly one of api_key_file and api_key/, 'no key');
  t.match(errorOf({ inline: { api_key: 'k', actor: { jwt: { ...jwt, algorithms: ['HS256'] } } } }), /routes\.0\.mcp\.inline\.actor\.jwt\.algorithms\.0/, 'a shared-secret algorithm');
  t.match(errorOf({ inline: { api_key: 'k', actor: { jwt: { issuer: jwt.issuer, audience: jwt.audience } } } }), /routes\.0\.mcp\.inline\.actor\.jwt: give exactly one of jwks_url and jwks_file/, 'no keys');
  t.match(errorOf({ inline: { api_key: 'k', actor: { header: 'authorization' } } }), /routes\.0\.mcp\.inline\.actor\.header: the Authorization header is read as a JWT/);
  t.match(errorOf({ inline: { api_key: 'k', actor: { jwt }, console_url: 'console' } }), /routes\.0\.mcp\.inline\.console_url/, 'a console URL that is not one');
  t.match(errorOf({ inline: { api_key: 'k', actor: { jwt } }, actor_id: { header: 'x-actor' } }), /routes\.0\.mcp\.actor_id: with inline, the actor is the caller/, 'an actor source beside inline');
  t.match(errorOf({ inline: { api_key: 'k', actor: { jwt }, pass_tokens: true } }), /routes\.0\.mcp\.inline/, 'an unknown key');
});

t.test('hide_denied_tools: off by default, and only beside inline', async (t) => {
  t.equal(parseProxyConfig({ ...base, routes: [route({})] }).routes[0]!.mcp!.hide_denied_tools, false, 'off unless asked for');
  const on = parseProxyConfig({ ...base, routes: [route({ inline: { api_key: 'k', actor: { jwt } }, hide_denied_tools: true })] });
  t.equal(on.routes[0]!.mcp!.hide_denied_tools, true);
  t.match(errorOf({ hide_denied_tools: true }), /routes\.0\.mcp\.hide_denied_tools: needs inline/, 'without inline the gate knows neither the caller nor a key to ask with');
  t.match(errorOf({ inline: { api_key: 'k', actor: { jwt } }, hide_denied_tools: 'yes' }), /routes\.0\.mcp\.hide_denied_tools/, 'a boolean');
});
