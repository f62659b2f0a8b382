/** Proxy configuration: defaults, the example file, environment overrides, and errors that name every bad field. */
import { mkdtemp, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import t from 'tap';
import { loadProxyConfig, parseProxyConfig, ProxyConfigError, readProxyApiKey } from '../../proxy/config.js';
import { PLACEHOLDER_ORGANIZATION, requireOrganization } from '../../proxy/organization.js';

const tempFile = async (name: string, text: string) => {
  const file = join(await mkdtemp(join(tmpdir(), 'cs-proxy-config-')), name);
  await writeFile(file, text);
  return file;
};

const minimal = {
  upstream: 'http://127.0.0.1:7090',
  authority: { url: 'http://127.0.0.1:7070', api_key_file: './k' },
  organization: 'org_1',
};

const echoRoute = {
  name: 'echo',
  match: { method: 'POST', path: '/echo/:id' },
  action_type: 'demo.echo',
  facts: { actor_id: { header: 'X-Actor-Id' }, environment: { const: 'dev' }, target: { type: { const: 'demo' }, id: { path: 'id' } } },
};

const errorOf = (input: unknown): string => {
  try {
    parseProxyConfig(input);
  } catch (error) {
    if (error instanceof ProxyConfigError) {
      t.equal(error.code, 'PROXY_CONFIG_INVALID');
      return error.message;
    }
    throw error;
  }
  throw new Error('expected a ProxyConfigError');
};

t.test('defaults', async (t) => {
  const config = parseProxyConfig(minimal);
  t.same(config.listen, { host: '127.0.0.1', port: 7080 });
  t.same(config.admin_listen, { host: '127.0.0.1', port: 7081 });
  t.equal(config.issuer, 'countersign');
  t.equal(config.audience, 'countersign:gate');
  t.equal(config.mode, 'enforce');
  t.equal(config.permit_header, 'x-service-permit', 'lower case, as node:http gives header names');
  t.equal(config.unmatched, 'deny', 'enforce mode: a request the gate cannot place is refused');
  t.equal(parseProxyConfig({ ...minimal, mode: 'shadow' }).unmatched, 'pass', 'a shadow rollout forwards it');
  t.equal(parseProxyConfig({ ...minimal, unmatched: 'pass' }).unmatched, 'pass', 'pass stays available, explicitly');
  t.equal(config.max_body_bytes, 65536);
  t.equal(config.redis_url, undefined);
  t.same(config.routes, []);
});

t.test('routes inherit mode and body limit, and say whether they need the body', async (t) => {
  const config = parseProxyConfig({
    ...minimal,
    mode: 'shadow',
    max_body_bytes: 1000,
    routes: [
      echoRoute,
      {
        name: 'wire',
        match: { method: ['POST', 'PUT', 'POST'], path: '/payments/:account/wire' },
        action_type: 'payment.wire',
        mode: 'enforce',
        max_body_bytes: 20,
        facts: { actor_id: { permit: true }, amount_usd: { body: '/amount' }, account_code: { path: 'account' }, memo: { query: 'memo' } },
      },
    ],
  });
  const [echo, wire] = config.routes;
  t.equal(echo!.mode, 'shadow');
  t.equal(echo!.max_body_bytes, 1000);
  t.equal(echo!.needsBody, false);
  t.same(echo!.methods, ['POST']);
  t.equal(wire!.mode, 'enforce');
  t.equal(wire!.max_body_bytes, 20);
  t.equal(wire!.needsBody, true);
  t.same(wire!.methods, ['POST', 'PUT'], 'duplicates dropped');
  t.same(
    wire!.facts.map((fact) => fact.name),
    ['actor_id', 'amount_usd', 'account_code', 'memo'],
  );
  const amount = wire!.facts[1]!;
  t.same(amount.kind === 'single' && amount.source, { kind: 'body', pointer: '/amount', tokens: ['amount'], as: undefined });
});

t.test('the example config/proxy.yaml is valid', async (t) => {
  const config = await loadProxyConfig('config/proxy.yaml', {});
  t.equal(config.upstream, 'http://127.0.0.1:7090');
  t.same(config.authority, { url: 'http://127.0.0.1:7070', api_key_file: './.countersign/proxy.key' });
  t.equal(config.mode, 'enforce');
  t.equal(config.unmatched, 'deny');
  t.same(config.routes.map((route) => route.name), ['echo', 'helpdesk-mcp'], 'the demo echo route, and the MCP route in front of the demo MCP server');
  const echo = config.routes[0]!;
  t.equal(echo.name, 'echo');
  t.equal(echo.action_type, 'demo.echo');
  t.same(echo.methods, ['POST']);
  t.equal(echo.path, '/echo/:id/**');
  t.equal(echo.pattern.subtree, true, 'the example protects the subtree under /echo/:id');
  t.same(echo.facts, [
    { kind: 'single', name: 'actor_id', source: { kind: 'header', name: 'x-actor-id', as: 'string' } },
    { kind: 'single', name: 'environment', source: { kind: 'const', value: 'dev' } },
    { kind: 'target', name: 'target', type: { kind: 'const', value: 'demo' }, id: { kind: 'path', name: 'id', as: 'string' } },
  ]);
});

t.test("the example's placeholder organization is refused where the proxy starts and reloads, and COUNTERSIGN_PROXY_ORGANIZATION replaces it", async (t) => {
  const example = await loadProxyConfig('config/proxy.yaml', {});
  t.equal(example.organization, PLACEHOLDER_ORGANIZATION, 'the file parses (countersign start checks it before it knows the id)');
  t.throws(
    () => requireOrganization(example, 'config/proxy.yaml'),
    { code: 'PROXY_CONFIG_INVALID', message: /^config\/proxy\.yaml is invalid:\n {2}organization: still the placeholder .*set organization \(or COUNTERSIGN_PROXY_ORGANIZATION\)/ },
    'the error says what to set',
  );
  const withOrg = await loadProxyConfig('config/proxy.yaml', { COUNTERSIGN_PROXY_ORGANIZATION: '3f0c0000-0000-4000-8000-000000000001' });
  t.equal(requireOrganization(withOrg, 'config/proxy.yaml'), withOrg, 'a real organization passes unchanged');
});

t.test('the commented payments route of the example is valid too', async (t) => {
  const { readFile } = await import('node:fs/promises');
  const text = await readFile('config/proxy.yaml', 'utf8');
  const lines = text.split('\n');
  const from = lines.findIndex((line) => line.includes('- name: payments-wire'));
  t.ok(from > 0, 'the example has it');
  const uncommented = lines.map((line, i) => (i >= from && line.startsWith('  # ') ? `  ${line.slice(4)}` : line)).join('\n');
  const config = await loadProxyConfig(await tempFile('proxy.yaml', uncommented), {});
  const wire = config.routes.find((route) => route.name === 'payments-wire');
  t.equal(wire?.mode, 'shadow');
  t.equal(wire?.needsBody, true);
  t.equal(wire?.max_body_bytes, 16384);
});

t.test('environment overrides: REDIS_URL, COUNTERSIGN_PROXY_ORGANIZATION and the others', async (t) => {
  const config = await loadProxyConfig('config/proxy.yaml', {
    REDIS_URL: 'redis://r:6379',
    COUNTERSIGN_PROXY_ORGANIZATION: '3f0c0000-0000-4000-8000-000000000001',
    COUNTERSIGN_PROXY_LISTEN: '0.0.0.0:8080',
    COUNTERSIGN_PROXY_MODE: 'shadow',
    COUNTERSIGN_PROXY_AUTHORITY_URL: 'https://authority.internal',
  });
  t.equal(config.redis_url, 'redis://r:6379');
  t.equal(config.organization, '3f0c0000-0000-4000-8000-000000000001');
  t.same(config.listen, { host: '0.0.0.0', port: 8080 });
  t.equal(config.mode, 'shadow');
  t.equal(config.routes[0]!.mode, 'shadow', 'the default mode reaches routes without their own');
  t.same(config.authority, { url: 'https://authority.internal', api_key_file: './.countersign/proxy.key' });
  const file = await tempFile('proxy.yaml', 'upstream: http://u\nauthority: { url: http://a, api_key: k }\n');
  await t.rejects(loadProxyConfig(file, {}), /organization: required/);
  const viaEnv = await loadProxyConfig(file, { COUNTERSIGN_PROXY_ORGANIZATION: 'org_9', REDIS_URL: '' });
  t.equal(viaEnv.organization, 'org_9');
  t.equal(viaEnv.redis_url, undefined, 'an empty variable is unset');
  const keyFromEnv = await loadProxyConfig(file, { COUNTERSIGN_PROXY_ORGANIZATION: 'org_9', COUNTERSIGN_PROXY_API_KEY_FILE: '/run/secrets/proxy.key' });
  t.same(keyFromEnv.authority, { url: 'http://a', api_key_file: '/run/secrets/proxy.key' }, 'COUNTERSIGN_PROXY_API_KEY_FILE replaces an inline key');

  const inlineRoute = (inline: string) =>
    `upstream: http://u\norganization: org_9\nauthority: { url: http://a, api_key: k }\nroutes:\n  - name: m\n    match: { path: /mcp }\n    mcp:\n      server: s\n      inline: ${inline}\n      tools: [{ name: "*" }]\n`;
  const inlineKey = async (inline: string) =>
    (await loadProxyConfig(await tempFile('proxy.yaml', inlineRoute(inline)), { COUNTERSIGN_PROXY_MCP_API_KEY_FILE: '/run/secrets/mcp-gate.key' })).routes[0]!.mcp!.inline;
  t.match(await inlineKey('{ api_key: dev, actor: { header: x-agent-id } }'), { api_key_file: '/run/secrets/mcp-gate.key', api_key: undefined }, 'COUNTERSIGN_PROXY_MCP_API_KEY_FILE replaces an MCP route\'s inline key');
  t.match(await inlineKey('{ api_key_file: other.key, actor: { header: x-agent-id } }'), { api_key_file: '/run/secrets/mcp-gate.key' }, 'and its key file');
  const plain = await loadProxyConfig(file, { COUNTERSIGN_PROXY_ORGANIZATION: 'org_9', COUNTERSIGN_PROXY_MCP_API_KEY_FILE: '/run/secrets/mcp-gate.key' });
  t.equal(plain.routes.length, 0, 'a configuration without MCP routes is left as it was');
});

t.test('file problems', async (t) => {
  await t.rejects(loadProxyConfig('/nonexistent/proxy.yaml', {}), /cannot read/);
  await t.rejects(loadProxyConfig(await tempFile('p.yaml', 'routes: [unclosed'), {}), /not valid YAML/);
  await t.rejects(loadProxyConfig(await tempFile('p.yaml', '- a list'), {}), /must hold a mapping/);
  await t.rejects(loadProxyConfig(await tempFile('p.yaml', ''), {}), /upstream: required/);
});

t.test('every bad top-level field is reported, by path, at once', async (t) => {
  const message = errorOf({
    listen: 'nowhere',
    admin_listen: '127.0.0.1:99999',
    upstream: 'ftp://files',
    authority: { url: 'http://a', api_key: 'k', api_key_file: 'f' },
    mode: 'loud',
    unmatched: 'maybe',
    permit_header: 'not a header',
    max_body_bytes: -1,
    surprise: 1,
  });
  for (const expected of [
    /listen: expected host:port/,
    /admin_listen: port must be at most 65535/,
    /upstream: expected an http:\/\/ or https:\/\/ URL/,
    /authority: give exactly one of api_key_file and api_key/,
    /organization: required/,
    /mode: /,
    /unmatched: /,
    /permit_header: an HTTP header name/,
    /max_body_bytes: /,
    /surprise/,
  ]) {
    t.match(message, expected);
  }
  t.match(errorOf({ ...minimal, authority: undefined }), /authority: required/);
  t.match(errorOf({ ...minimal, authority: { api_key_file: 'k' } }), /authority\.url: required/);
});

t.test('every bad route field is reported, by path, at once', async (t) => {
  const message = errorOf({
    ...minimal,
    routes: [
      {
        name: 'Bad Name',
        match: { method: 'OPTIONS', path: '/echo/:id' },
        action_type: 'Demo',
        mode: 'sometimes',
        max_body_bytes: 0,
        extra: true,
        facts: { actor_id: { header: 'X-Actor-Id' }, target: { type: { const: 'demo' }, id: { path: 'nope' } } },
      },
      { name: 'p', match: { method: 'GET', path: 'no-slash' }, action_type: 'a.b', facts: { actor_id: { header: 'X' } } },
      { name: 'q', match: { method: 'GET', path: '/a/*/b' }, action_type: 'a.b', facts: { actor_id: { header: 'X' } } },
      { name: 'r', match: { method: 'GET', path: '/a/:x/:x' }, action_type: 'a.b', facts: { actor_id: { header: 'X' } } },
      {
        name: 's',
        match: { method: 'GET', path: '/a/:x' },
        action_type: 'a.b',
        facts: {
          environment: { const: 3 },
          amount_usd: { query: 'amount', as: 'string' },
          account_code: { header: 'X-Account', as: 'number' },
          limit: { permit: true },
          where: { path: 'x', query: 'y' },
          how: { cookie: 'c' },
          ptr: { body: 'amount' },
          esc: { body: '/a~2' },
          org: { const: 'x' },
          action_type: { const: 'x' },
          target: { header: 'X-Target' },
          when: 'now',
          cost: { const: -5, as: 'number' },
          neg: { const: Number.NaN },
        },
      },
      { name: 't', match: { method: 'GET', path: '/t' }, action_type: 'a.b', facts: { amount_usd: { const: -1 }, target: { type: { const: 1 }, id: { query: 'i' }, kind: { const: 'x' } } } },
    ],
  });
  for (const expected of [
    /routes\.0\.name: lowercase letters/,
    /routes\.0\.match\.method: one of GET, POST, PUT, PATCH, DELETE/,
    /routes\.0\.action_type: dotted lowercase/,
    /routes\.0\.mode: /,
    /routes\.0\.max_body_bytes: /,
    /routes\.0: Unrecognized key: "extra"/,
    /routes\.0\.facts\.target\.id\.path: no such parameter in \/echo\/:id/,
    /routes\.1\.match\.path: a path pattern starts with \//,
    /routes\.2\.match\.path: \* is only allowed as the last segment/,
    /routes\.3\.match\.path: parameter :x appears twice/,
    /routes\.4\.facts\.actor_id: required/,
    /routes\.4\.facts\.environment\.const: not a valid environment: must be a string/,
    /routes\.4\.facts\.amount_usd\.as: amount_usd is bound as a number/,
    /routes\.4\.facts\.account_code\.as: account_code is bound as a string/,
    /routes\.4\.facts\.limit\.permit: only actor_id can be taken from the permit/,
    /routes\.4\.facts\.where: give exactly one of path, query/,
    /routes\.4\.facts\.how\.cookie: unknown key/,
    /routes\.4\.facts\.ptr\.body: a JSON Pointer starts with \//,
    /routes\.4\.facts\.esc\.body: .*~ must be followed by 0 or 1/,
    /routes\.4\.facts\.org: reserved/,
    /routes\.4\.facts\.action_type: comes from the route's action_type/,
    /routes\.4\.facts\.target: target is \{type, id\}/,
    /routes\.4\.facts\.when: a fact source is one of/,
    /routes\.4\.facts\.cost\.as: as converts text/,
    /routes\.4\.facts\.neg\.const: not a valid neg/,
    /routes\.5\.facts\.actor_id: required/,
    /routes\.5\.facts\.amount_usd\.const: not a valid amount_usd: must be a finite number >= 0/,
    /routes\.5\.facts\.target\.kind: target has only type and id/,
    /routes\.5\.facts\.target\.type\.const: not a valid target\.type/,
  ]) {
    t.match(message, expected);
  }
});

t.test('duplicate route names', async (t) => {
  const message = errorOf({ ...minimal, routes: [echoRoute, { ...echoRoute, match: { method: 'GET', path: '/x' }, facts: { actor_id: { permit: true } } }, echoRoute] });
  t.match(message, /routes\.1\.name: duplicate route name \(also routes\.0\.name\)/);
  t.match(message, /routes\.2\.name: duplicate route name \(also routes\.0\.name\)/);
  t.match(
    errorOf({ ...minimal, routes: [echoRoute, { ...echoRoute, name: 'Echo' }, { ...echoRoute, facts: {} }] }),
    /routes\.2\.name: duplicate route name/,
    'reported together with the other route errors',
  );
});

t.test('a path source must name a parameter of the pattern; * names the wildcard', async (t) => {
  t.match(
    errorOf({ ...minimal, routes: [{ ...echoRoute, facts: { actor_id: { path: 'user' } } }] }),
    /routes\.0\.facts\.actor_id\.path: no such parameter in \/echo\/:id/,
  );
  const config = parseProxyConfig({
    ...minimal,
    routes: [{ name: 'files', match: { method: 'GET', path: '/files/*' }, action_type: 'data.release', facts: { actor_id: { permit: true }, path: { path: '*' } } }],
  });
  t.same(config.routes[0]!.pattern.params, ['*']);
});

t.test('the API key: from its file (first line), or inline', async (t) => {
  const file = await tempFile('proxy.key', 'ask_test_abc\n');
  t.equal(await readProxyApiKey({ url: 'http://a', api_key_file: file }), 'ask_test_abc');
  t.equal(await readProxyApiKey({ url: 'http://a', api_key: 'inline' }), 'inline');
  await t.rejects(readProxyApiKey({ url: 'http://a', api_key_file: '/nonexistent/key' }), /authority\.api_key_file: cannot read/);
  await t.rejects(readProxyApiKey({ url: 'http://a', api_key_file: await tempFile('empty.key', '\n') }), /is empty/);
});

t.test('ext_authz: the Envoy external authorizer\'s listeners, with defaults', async (t) => {
  t.equal(parseProxyConfig(minimal).ext_authz, undefined, 'off unless configured');
  const both = parseProxyConfig({ ...minimal, ext_authz: { grpc: {}, http: {} } });
  t.same(both.ext_authz, {
    grpc: { listen: { host: '127.0.0.1', port: 9191 } },
    http: { listen: { host: '127.0.0.1', port: 9192 }, path_prefix: '', check_timeout_ms: 200, max_request_headers_kb: 60 },
    only: false,
  }, "HTTP: Envoy's default timeout (200 ms) and header limit (60 KiB)");
  const chosen = parseProxyConfig({ ...minimal, ext_authz: { http: { listen: '0.0.0.0:8181', path_prefix: '/authz', check_timeout_ms: 2000, max_request_headers_kb: 96 } } });
  t.same(
    chosen.ext_authz,
    { http: { listen: { host: '0.0.0.0', port: 8181 }, path_prefix: '/authz', check_timeout_ms: 2000, max_request_headers_kb: 96 }, only: false },
    'one transport is enough',
  );
});

t.test('ext_authz.only: no forwarding listener, so no upstream needed', async (t) => {
  const { upstream: _upstream, ...withoutUpstream } = minimal;
  const only = parseProxyConfig({ ...withoutUpstream, ext_authz: { only: true, grpc: { listen: '127.0.0.1:0' } } });
  t.equal(only.upstream, undefined);
  t.equal(only.ext_authz?.only, true);
  t.same(only.ext_authz?.grpc, { listen: { host: '127.0.0.1', port: 0 } });
  t.equal(parseProxyConfig({ ...minimal, ext_authz: { only: true, grpc: {} } }).upstream, 'http://127.0.0.1:7090', 'an upstream given anyway is kept (and not used)');
  t.match(errorOf(withoutUpstream), /upstream: required: the URL of the protected system \(or ext_authz\.only: true/);
  t.match(errorOf({ ...withoutUpstream, ext_authz: { grpc: {} } }), /upstream: required/, 'ext_authz beside forwarding still needs the upstream');
});

t.test('every bad ext_authz field is reported, by path, with the others', async (t) => {
  const message = errorOf({
    ...minimal,
    mode: 'loud',
    ext_authz: {
      grpc: { listen: 'nowhere', port: 1 },
      http: { listen: '127.0.0.1:70000', path_prefix: '/authz/', check_timeout_ms: 0, max_request_headers_kb: 9000 },
      only: 'yes',
      extra: 1,
    },
  });
  for (const expected of [
    /mode: /,
    /ext_authz\.grpc\.listen: expected host:port/,
    /ext_authz\.grpc: Unrecognized key: "port"/,
    /ext_authz\.http\.listen: port must be at most 65535/,
    /ext_authz\.http\.path_prefix: empty, or a path such as \/authz/,
    /ext_authz\.http\.check_timeout_ms: /,
    /ext_authz\.http\.max_request_headers_kb: /,
    /ext_authz\.only: /,
    /ext_authz: Unrecognized key: "extra"/,
  ]) {
    t.match(message, expected);
  }
  t.match(errorOf({ ...minimal, ext_authz: {} }), /ext_authz: give grpc, http or both/);
  t.match(errorOf({ ...minimal, ext_authz: { only: true } }), /ext_authz: give grpc, http or both/);
  for (const prefix of ['authz', '/a?b', '/a//b', '/a b']) t.match(errorOf({ ...minimal, ext_authz: { http: { path_prefix: prefix } } }), /ext_authz\.http\.path_prefix/, prefix);
  const { upstream: _upstream, ...withoutUpstream } = minimal;
  const both = errorOf({ ...withoutUpstream, listen: 'nowhere' });
  t.match(both, /upstream: required/, 'a missing upstream is reported beside another bad field');
  t.match(both, /listen: expected host:port/);
});

t.test('the example files parse: config/proxy.yaml and config/proxy-ext-authz.yaml', async (t) => {
  const env = { COUNTERSIGN_PROXY_ORGANIZATION: 'org_1' };
  const example = await loadProxyConfig('config/proxy.yaml', env);
  t.equal(example.ext_authz, undefined, 'the default example forwards only');
  const extAuthz = await loadProxyConfig('config/proxy-ext-authz.yaml', env);
  t.equal(extAuthz.ext_authz?.only, true, 'the ext_authz example leaves forwarding to Envoy');
  t.same(extAuthz.ext_authz?.grpc?.listen, { host: '127.0.0.1', port: 9191 });
  t.same(extAuthz.ext_authz?.http?.listen, { host: '127.0.0.1', port: 9192 });
  t.equal(extAuthz.ext_authz?.http?.check_timeout_ms, 2000, "the HTTP service's timeout is config/envoy/envoy-http.yaml's (2s)");
  t.ok(extAuthz.routes.some((route) => route.needsBody), 'with a body-bound route, to show with_request_body');

  const { readFile } = await import('node:fs/promises');
  const lines = (await readFile('config/proxy.yaml', 'utf8')).split('\n');
  const from = lines.indexOf('# ext_authz:');
  t.ok(from > 0, 'config/proxy.yaml shows the section, commented out');
  let to = from + 1;
  while (lines[to]?.startsWith('#   ')) to++;
  const uncommented = [...lines.slice(0, from), ...lines.slice(from, to).map((line) => line.slice(2)), ...lines.slice(to)].join('\n');
  const withSection = await loadProxyConfig(await tempFile('proxy.yaml', uncommented), env);
  t.same(withSection.ext_authz, {
    only: false,
    grpc: { listen: { host: '127.0.0.1', port: 9191 } },
    http: { listen: { host: '127.0.0.1', port: 9192 }, path_prefix: '', check_timeout_ms: 200, max_request_headers_kb: 60 },
  }, 'and the commented section is valid');
});
