/**
 * How to switch a route, or one tool of an MCP route, to enforce: the mode lives in the proxy's
 * configuration, not in the authority, so the page shows the change to make there (docs/proxy.md,
 * docs/shadow-to-enforce.md, docs/mcp.md; proxy/config.ts: a route's own `mode`, else the
 * top-level `mode`; proxy/mcp/config.ts: a tool entry's own `mode`, else the route's), and how it
 * takes effect.
 */

/** The route's entry in proxy.yaml with its mode switched; the rest of the entry stays as it is. */
export function switchSnippet(route: string): string {
  return ['routes:', `  - name: ${route}`, '    mode: enforce'].join('\n');
}

/** A tool name as a YAML scalar: plain when it is safe so, else double-quoted (JSON's quoting is YAML's). */
function yamlName(name: string): string {
  return /^[A-Za-z0-9_][A-Za-z0-9_./-]*$/.test(name) ? name : JSON.stringify(name);
}

/** The tool's entry in the MCP route's tool table with its mode switched; the rest stays as it is. */
export function switchToolSnippet(route: string, tool: string): string {
  return ['routes:', `  - name: ${route}`, '    mcp:', '      tools:', `        - name: ${yamlName(tool)}`, '          mode: enforce'].join('\n');
}

function Reload() {
  return (
    <>
      The proxy reloads its configuration when the file changes (or on <code>SIGHUP</code>), without a restart.
    </>
  );
}

export function SwitchTool({ route, tool, ready }: { route: string; tool: string; ready: boolean }) {
  return (
    <>
      <p>
        In the proxy’s configuration, give this tool’s entry in the route’s tool table (<code>mcp.tools</code>) <code>mode: enforce</code>, and keep its other
        keys (<code>action_type</code>, <code>target</code>, <code>facts</code>) as they are:
      </p>
      <pre class="command" data-testid="switch-tool-snippet" data-route={route} data-tool={tool}>
        <code>{switchToolSnippet(route, tool)}</code>
      </pre>
      <p class="hint">
        The first entry whose name matches the tool decides: if that is a prefix such as <code>tickets.*</code> or <code>"*"</code>, its mode is every
        matching tool’s, so add an entry for this tool above it to switch it alone. <Reload />
        {!ready && ' Until the tool is ready, enforce would refuse calls like the would-blocks counted above.'}
      </p>
    </>
  );
}

export function SwitchRoute({ route, ready, mcp = false }: { route: string | null; ready: boolean; mcp?: boolean }) {
  if (route === null) {
    return <p>This gate is not a proxy route: switch it to enforce where it is configured.</p>;
  }
  return (
    <>
      <p>
        In the proxy’s configuration (<code>proxy.yaml</code>, or <code>countersignProxy.routes</code> in the application chart’s values), set this route’s{' '}
        <code>mode</code> to <code>enforce</code>, and keep its other keys (<code>match</code>, <code>action_type</code>, <code>facts</code>) as they are:
      </p>
      <pre class="command" data-testid="switch-snippet" data-route={route}>
        <code>{switchSnippet(route)}</code>
      </pre>
      <p class="hint">
        <Reload /> Afterwards{' '}
        <code>{`countersign_proxy_route_mode{route="${route}", mode="enforce"}`}</code> is 1 on every replica.
        {!ready && ' Until the route is ready, enforce would refuse requests like the would-blocks counted above.'}
      </p>
      {mcp && (
        <p class="hint">
          On this MCP route the route’s mode is that of every tool without a <code>mode</code> of its own in the tool table; to switch tools one at a time,
          use each tool’s guidance above instead.
        </p>
      )}
    </>
  );
}

/** What holds for every route, said once below them. */
export function SwitchingNotes() {
  return (
    <section aria-labelledby="switching-heading" class="switching-notes">
      <h2 id="switching-heading">Before and after switching</h2>
      <ul>
        <li>
          A route without a <code>mode</code> of its own follows the top-level <code>mode</code>. Setting <code>mode: enforce</code> at the top switches every
          such route at once, and unless <code>unmatched</code> is set, requests that match no route are then refused (<code>unmatched</code> defaults to{' '}
          <code>deny</code> in enforce, <code>pass</code> in shadow).
        </li>
        <li>
          Check first that <code>{'countersign_proxy_verifications_total{result="unavailable"}'}</code> is zero: in enforce mode those requests are answered
          503.
        </li>
        <li>
          With the sidecar chart, <code>helm upgrade</code> updates the proxy’s ConfigMap in place; each pod picks the change up within about a minute or two,
          with no restart. To roll back, set the route’s mode back to <code>shadow</code> the same way.
        </li>
        <li>
          The whole procedure is in <code>docs/shadow-to-enforce.md</code>.
        </li>
      </ul>
    </section>
  );
}
