/**
 * The MCP gate's `tools/list` exchange (tool-list.ts): the list request sent to the MCP server over
 * the proxy's pooled agent, and its answer handed back unread, in no content encoding, for the gate
 * to filter. Not the proxy's streaming forward (forward.ts): the answer's head is held back until
 * the list is rewritten. When the server does not answer, the client gets the proxy's 502 envelope
 * (as a forward's would say it), and the exchange gives null.
 *
 * @example
 *   const answer = await exchangeToolList({ dispatcher: agent, metrics, logger }, req, res, {
 *     upstream, permitHeader: 'x-service-permit', target: '/mcp', requestId, route: 'helpdesk', body, added, withheld: [] });
 *   if (answer === null) return; // the client has had its 502 (or went away)
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Logger } from 'pino';
import type { Dispatcher } from 'undici';
import { unavailableError, type Upstream } from '../forward.js';
import { abortedWhenGone, forwardHeaders, sendError, withoutHeaders } from '../http-messages.js';
import type { ProxyMetrics } from '../metrics.js';
import { classifyUpstreamFailure } from '../upstream-outcome.js';
import type { UpstreamAnswer } from './tool-list.js';

export interface ExchangeDeps {
  /** The proxy's pooled undici agent (server.ts). */
  dispatcher: Dispatcher;
  metrics: ProxyMetrics;
  logger: Logger;
}

export interface ToolListExchange {
  upstream: Upstream;
  /** The permit header, lower case: never forwarded. */
  permitHeader: string;
  target: string;
  requestId: string;
  /** The route's name, for metrics and logs. */
  route: string;
  body: Buffer;
  added: Record<string, string>;
  /** Request headers the MCP server must not get (lower case): an inline route's caller token. */
  withheld: readonly string[];
}

export async function exchangeToolList(deps: ExchangeDeps, req: IncomingMessage, res: ServerResponse, input: ToolListExchange): Promise<UpstreamAnswer | null> {
  const { metrics, logger } = deps;
  const headers = withoutHeaders(forwardHeaders(req, input.permitHeader, input.requestId, input.added), ['content-length', 'accept-encoding', ...input.withheld]);
  try {
    const answer = await deps.dispatcher.request({
      origin: input.upstream.origin,
      path: input.upstream.pathPrefix + input.target,
      method: 'POST',
      headers,
      body: input.body,
      signal: abortedWhenGone(res),
    });
    return { status: answer.statusCode, headers: answer.headers, body: answer.body };
  } catch (error) {
    if (res.destroyed) return null; // the client went away: a list has nowhere to go
    const failure = classifyUpstreamFailure(error, { dispatched: true, clientGone: false });
    metrics.upstreamErrors.inc({ route: input.route });
    logger.warn({ err: error, request_id: input.requestId, route: input.route, upstream: failure.upstream, code: failure.code }, 'upstream unavailable');
    sendError(res, input.requestId, unavailableError(failure));
    return null;
  }
}
