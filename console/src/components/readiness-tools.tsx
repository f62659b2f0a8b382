/**
 * The tools of an MCP route seen in shadow mode, under the route: each tool's verdict (READY or
 * NOT READY, in words), the API's summary, what it verified and would have blocked, by refusal
 * code, and, folded away, how to switch that tool alone to enforce in the route's tool table. One
 * compact block per tool, so that a route with many tools still reads on a phone.
 *
 * @example
 *   {route.tools.length > 0 && <ReadinessTools route="helpdesk" tools={route.tools} leftOff={route.tools_left_off} />}
 */
import type { ToolReadinessWire } from '../readiness-api';
import { When } from './parts';
import { SwitchTool } from './readiness-switch';

function ToolReasons({ tool }: { tool: ToolReadinessWire }) {
  if (tool.by_reason.length === 0) return null;
  return (
    <ul class="tool-reasons" aria-label={`Would-block calls of ${tool.tool} by refusal code`}>
      {tool.by_reason.map((reason) => (
        <li key={reason.reason} data-testid="readiness-tool-reason" data-reason={reason.reason} data-expected={String(reason.expected)}>
          <code>{reason.reason === '' ? '(no code)' : reason.reason}</code> × <span data-testid="readiness-tool-reason-count">{reason.count}</span>
          {reason.expected ? ' (expected)' : ''}, last <When at={reason.last_at} />
        </li>
      ))}
    </ul>
  );
}

function Tool({ route, tool }: { route: string | null; tool: ToolReadinessWire }) {
  return (
    <li class="readiness-tool" data-testid="readiness-tool" data-tool={tool.tool} data-ready={String(tool.ready)}>
      <p class="tool-head">
        <code class="tool-name">{tool.tool}</code>{' '}
        <span class={`badge ${tool.ready ? 'badge-ready' : 'badge-not-ready'}`} data-testid="readiness-tool-verdict">
          {tool.ready ? 'READY' : 'NOT READY'}
        </span>
        <span class="visually-hidden"> for enforce</span>
      </p>
      <p data-testid="readiness-tool-summary">{tool.summary}</p>
      <p class="tool-counts">
        <span data-testid="readiness-tool-verified">{tool.verified}</span> with a valid permit,{' '}
        <span data-testid="readiness-tool-would-block">{tool.would_block}</span> would have been blocked; last call <When at={tool.last_seen_at} />
      </p>
      <ToolReasons tool={tool} />
      {route !== null && (
        <details class="tool-switch">
          <summary>
            Switch <code>{tool.tool}</code> to enforce
          </summary>
          <SwitchTool route={route} tool={tool.tool} ready={tool.ready} />
        </details>
      )}
    </li>
  );
}

export function ReadinessTools({ route, tools, leftOff }: { route: string | null; tools: ToolReadinessWire[]; leftOff: number }) {
  return (
    <>
      <p class="hint">Each tool is judged by its own calls alone: its mode is set in the route’s tool table.</p>
      <ul class="readiness-tools" data-testid="readiness-tools">
        {tools.map((tool) => (
          <Tool key={tool.tool} route={route} tool={tool} />
        ))}
      </ul>
      {leftOff > 0 && (
        <p class="hint" data-testid="readiness-tools-left-off">
          {leftOff} more {leftOff === 1 ? 'tool was' : 'tools were'} called in shadow mode, less often than these: the route’s totals above count them.
        </p>
      )}
    </>
  );
}
