/**
 * How to switch a route to enforce: the mode lives in the proxy's configuration, not in the
 * authority, so the page shows the change to make there (docs/proxy.md, docs/shadow-to-enforce.md,
 * proxy/config.ts: a route's own `mode`, else the top-level `mode`), and how it takes effect.
 */

/** The route's entry in proxy.yaml with its mode switched; the rest of the entry stays as it is. */
export function switchSnippet(route: string): string {
  return ['routes:', `  - name: ${route}`, '    mode: enforce'].join('\n');
}

export function SwitchRoute({ route, ready }: { route: string | null; ready: boolean }) {
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
        The proxy reloads its configuration when the file changes (or on <code>SIGHUP</code>), without a restart. Afterwards{' '}
        <code>{`countersign_proxy_route_mode{route="${route}", mode="enforce"}`}</code> is 1 on every replica.
        {!ready && ' Until the route is ready, enforce would refuse requests like the would-blocks counted above.'}
      </p>
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
