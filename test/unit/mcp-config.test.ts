/** MCP routes in proxy.yaml: the compiled tool table, its defaults, and errors that name every bad field. */
import t from 'tap';
import { loadProxyConfig, parseProxyConfig, ProxyConfigError } from '../../proxy/config.js';
import { toolEntry } from '../../proxy/mcp/config.js';

const base = {
  upstream: 'http://127.0.0.1:7090',
  authority: { url: 'http://127.0.0.1:7070', api_key_file: './k' },
  organization: 'org_1',
};

const errorOf = (routes: unknown[]): string => {
  try {
    parseProxyConfig({ ...base, routes });
  } catch (error) {
    if (error instanceof ProxyConfigError) return error.message;
    throw error;
  }
  throw new Error('expected a ProxyConfigError');
};

t.test('an MCP route compiles to a tool table with its defaults', async (t) => {
  const config = parseProxyConfig({
    ...base,
    mode: 'shadow',
    routes: [
      {
        name: 'helpdesk',
        match: { path: '/mcp' },
        mode: 'enforce',
        mcp: {
          server: 'helpdesk',
          tools: [
            { name: 'issue_refund', facts: { amount_usd: { argument: '/amount', as: 'number' } } },
            { name: 'tickets.*', mode: 'shadow', action_type: 'tickets.write', target: { type: 'ticket-tool' } },
            { name: 'drop_*', block: true },
          ],
        },
      },
    ],
  });
  const route = config.routes[0]!;
  t.same(route.methods, ['POST', 'GET', 'DELETE'], 'the Streamable HTTP methods');
  const mcp = route.mcp!;
  const refund = toolEntry(mcp, 'issue_refund')!;
  t.match(refund, { action_type: 'agent.tool.invoke', mode: 'enforce', block: false, target: { type: 'tool', id: undefined } });
  t.same(
    refund.facts.map((fact) => fact.name),
    ['actor_id', 'amount_usd'],
    'actor_id (from the permit by default) first, then the arguments',
  );
  t.match(refund.facts[1], { source: { kind: 'body', pointer: '/amount', as: 'number' } });
  t.match(toolEntry(mcp, 'tickets.close'), { action_type: 'tickets.write', mode: 'shadow', target: { type: 'ticket-tool' } });
  t.match(toolEntry(mcp, 'drop_tables'), { block: true });
  t.equal(toolEntry(mcp, 'tickets'), undefined, 'a prefix pattern needs its prefix');
  t.equal(toolEntry(mcp, 'other'), undefined);
});

t.test('every bad field of an MCP route is reported by its path', async (t) => {
  const message = errorOf([
    {
      name: 'helpdesk',
      match: { path: '/mcp', method: 'POST' },
      mcp: {
        server: 'help desk',
        tools: [
          { name: 'a*b' },
          { name: 'x', facts: { arguments_digest: { const: 'x' }, target: { const: 'y' }, id: { path: 'id' } } },
          { name: 'y', bogus: true },
        ],
      },
    },
  ]);
  t.match(message, 'routes.0.match');
  t.match(message, 'routes.0.mcp.server');
  t.match(message, 'routes.0.mcp.tools.0.name');
  t.match(message, 'routes.0.mcp.tools.1.facts.arguments_digest: always bound');
  t.match(message, 'routes.0.mcp.tools.1.facts.target: set with target');
  t.match(message, 'routes.0.mcp.tools.1.facts.id.path: no such parameter in /mcp');
  t.match(message, 'routes.0.mcp.tools.2');
});

t.test('the MCP route of the example config/proxy.yaml gates the demo MCP server', async (t) => {
  const config = await loadProxyConfig('config/proxy.yaml', {});
  const route = config.routes.find((candidate) => candidate.name === 'helpdesk-mcp');
  t.match(route, { path: '/mcp', mcp: { server: 'helpdesk' } });
  t.same(
    route!.mcp!.tools.map((tool) => [tool.name, tool.block]),
    [
      ['get_ticket', false],
      ['issue_refund', false],
      ['send_email', false],
      ['drop_*', true],
    ],
  );
});
