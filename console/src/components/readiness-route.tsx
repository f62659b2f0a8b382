/**
 * One proxy route seen in shadow mode: READY or NOT READY (in words, the badge repeating them),
 * the API's own summary, what it verified and would have blocked over the window, the would-blocks
 * by refusal code (a table; a stacked list on a phone), for an MCP route each tool seen with its
 * own verdict (readiness-tools.tsx), and how to switch it to enforce.
 */
import { proxyRouteOf, type RouteReadinessWire } from '../readiness-api';
import { Row, When } from './parts';
import { SwitchRoute } from './readiness-switch';
import { ReadinessTools } from './readiness-tools';

function Reasons({ route }: { route: RouteReadinessWire }) {
  if (route.by_reason.length === 0) return <p data-testid="readiness-no-reasons">No would-block in the window.</p>;
  return (
    <table class="reasons" data-testid="readiness-reasons">
      <caption class="visually-hidden">Would-block requests on route {route.route} by refusal code</caption>
      <thead>
        <tr>
          <th scope="col">Reason</th>
          <th scope="col">Count</th>
          <th scope="col">Expected</th>
          <th scope="col">Last</th>
        </tr>
      </thead>
      <tbody>
        {route.by_reason.map((reason) => (
          <tr key={reason.reason} data-testid="readiness-reason" data-reason={reason.reason} data-expected={String(reason.expected)}>
            <th scope="row">
              <code>{reason.reason === '' ? '(no code)' : reason.reason}</code>
            </th>
            <td data-label="Count" data-testid="readiness-reason-count">
              {reason.count}
            </td>
            <td data-label="Expected">{reason.expected ? 'yes' : 'no'}</td>
            <td data-label="Last">
              <When at={reason.last_at} />
            </td>
          </tr>
        ))}
      </tbody>
    </table>
  );
}

export function ReadinessRoute({ route }: { route: RouteReadinessWire }) {
  const name = proxyRouteOf(route);
  const headingId = `route-${route.gate.replace(/[^A-Za-z0-9_-]/g, '-')}`;
  return (
    <article class="panel readiness-route" aria-labelledby={headingId} data-testid="readiness-route" data-route={route.route} data-ready={String(route.ready)}>
      <h3 id={headingId}>
        <span class="visually-hidden">Route </span>
        {route.route}
      </h3>
      <p class="status-line">
        <span class={`badge ${route.ready ? 'badge-ready' : 'badge-not-ready'}`} data-testid="readiness-verdict">
          {route.ready ? 'READY' : 'NOT READY'}
        </span>
        <span class="visually-hidden"> for enforce</span>
      </p>
      <p data-testid="readiness-summary">{route.summary}</p>
      <dl class="facts">
        {name === null && <Row label="Gate">{route.gate}</Row>}
        <Row label="With a valid permit" testId="readiness-verified">
          {route.verified}
        </Row>
        <Row label="Would have blocked" testId="readiness-would-block">
          {route.would_block}
        </Row>
        <Row label="Last would-block" testId="readiness-last-would-block">
          {route.last_would_block_at === null ? 'none in the window' : <When at={route.last_would_block_at} />}
        </Row>
        <Row label="Last unexpected">{route.last_unexpected_at === null ? 'none in the window' : <When at={route.last_unexpected_at} />}</Row>
        <Row label="Last seen">
          <When at={route.last_seen_at} />
        </Row>
      </dl>
      <h4>Would-block by reason</h4>
      <Reasons route={route} />
      {route.tools.length > 0 && (
        <>
          <h4>Tools</h4>
          <ReadinessTools route={name} tools={route.tools} leftOff={route.tools_left_off} />
        </>
      )}
      <h4>How to switch it to enforce</h4>
      <SwitchRoute route={name} ready={route.ready} mcp={route.tools.length > 0} />
    </article>
  );
}
