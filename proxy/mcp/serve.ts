/**
 * The MCP gate: one request to an MCP route (mcp/config.ts) on the Streamable HTTP transport,
 * decided per JSON-RPC message and forwarded by the proxy's own forwarding (server.ts), so
 * streaming answers (JSON or server-sent events, progress notifications included) reach the client
 * as they come. Permits are verified, consumed and recorded by the one gate (gate.ts).
 *
 * - `GET` (the server's event stream) and `DELETE` (a session's end) pass.
 * - `POST`: the body is read up to `max_body_bytes` and parsed. Methods that do not act
 *   (jsonrpc.ts) pass; a `tools/call` is decided by its tool entry; any other method, a body the
 *   gate cannot read, a batch holding anything but passing messages, or `Mcp-Method` / `Mcp-Name`
 *   headers the body contradicts are refused in enforce mode (a would-block in shadow), and recorded.
 * - A call's permit comes in `params._meta["countersign/permit"]` or in the permit header (the
 *   same one, if both); it is taken out of `_meta` before the MCP server sees the call.
 * - Refusals are JSON-RPC (jsonrpc.ts): a refused call is an `isError` tool result, anything else
 *   a JSON-RPC error, answered 200 (400 or 413 for a body the gate cannot read); when the gate cannot
 *   verify (the store down) the result says so under `_meta` (`countersign/status: 503`).
 * - A permitted call gets its `execution.observed` record, which says whether the tool answered
 *   with `isError` (tool-outcome.ts).
 * - On an inline route (`mcp.inline`), a call without a permit is evaluated by the gate itself
 *   (inline.ts); the permit it gets goes through the same verification and consume as a caller's.
 * - `tools/list` is filtered (tool-list.ts), with `hide_denied_tools` by the policy too (tool-policy.ts).
 *
 * @example
 *   if (route.mcp !== undefined) return serveMcp(context, req, res, { route, mcp: route.mcp, target, requestId, started });
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Readable } from 'node:stream';
import type { Logger } from 'pino';
import type { ProxyRoute } from '../config.js';
import { recordExecution, type ExecutionRecords } from '../execution-records.js';
import type { ExecutionOutcome, ResponseObserver } from '../forward.js';
import type { Gate, GateDecision, GateRefusal, GateRoute } from '../gate.js';
import { abortedWhenGone, bufferedBody, firstOf, queryOf, readBounded, streamedBody } from '../http-messages.js';
import { countVerification, type ProxyMetrics, type RequestOutcome } from '../metrics.js';
import { mcpRefusal, refusalAnswer } from './answers.js';
import { callFacts } from './call-facts.js';
import { ARGUMENTS_DIGEST_FACT, DEFAULT_TOOL_ACTION_TYPE, toolEntry, type McpRoute } from './config.js';
import { decodedHeaderValue, forEra, messageEra, protocolVersionContradiction, withoutGateInput } from './era.js';
import type { InlineGate } from './inline.js';
import { errorResponse, HEADER_MISMATCH, INVALID_REQUEST, messageKind, metaPermit, PARSE_ERROR, parseMessages, toolErrorResult, withoutPermit, type JsonRpcMessage } from './jsonrpc.js';
import { serveToolList, toolHiding, type ToolHiding, type ToolListContext } from './tool-list.js';
import { policyDeniedTools } from './tool-policy.js';
import { toolOutcome, watchToolResult } from './tool-outcome.js';

/** What the forwarding server lends the MCP gate. */
export interface McpServeContext extends ToolListContext {
  gate: Gate;
  metrics: ProxyMetrics;
  logger: Logger;
  executionRecords: ExecutionRecords;
  /** The permit header, lower case. */
  permitHeader: string;
  /** Decides the calls of inline routes (inline.ts), with the authority of proxy.yaml. */
  inline: InlineGate;
  authorityUrl: string;
  /**
   * The server's forward: the request to the upstream, its answer to the client. A Buffer body is
   * sent with its own length (the gate may have rewritten the message).
   */
  forward(body: Readable | Buffer | undefined, added: Record<string, string>, observer?: ResponseObserver): Promise<ForwardedCall>;
  observe(route: string, outcome: RequestOutcome, started: number): void;
}

/** What the server's forward reports: the upstream's outcome, as the execution record says it. */
export type ForwardedCall = ExecutionOutcome & { durationMs: number };

export interface McpRequest {
  route: ProxyRoute;
  mcp: McpRoute;
  target: string;
  requestId: string;
  started: number;
}

export async function serveMcp(context: McpServeContext, req: IncomingMessage, res: ServerResponse, request: McpRequest): Promise<void> {
  const { route, started } = request;
  const mode = { 'x-countersign-mode': route.mode };
  if (req.method !== 'POST') {
    const result = await context.forward(streamedBody(req), mode);
    return context.observe(route.name, result.status === null ? 'upstream_error' : 'passthrough', started);
  }
  const read = await readBounded(req, route.max_body_bytes);
  if (read === null) return; // the client went away; nothing to answer
  const forwardAsSent = async (outcome: RequestOutcome, observer?: ResponseObserver) => {
    const result = await context.forward(bufferedBody(req, read), mode, observer);
    context.observe(route.name, result.status === null ? 'upstream_error' : outcome, started);
  };
  const routeLevel: GateRoute = { name: route.name, mode: route.mode, action_type: DEFAULT_TOOL_ACTION_TYPE };
  /** A refusal of the whole request: recorded; answered `answer` in enforce, forwarded as sent in shadow. */
  const refuseRequest = async (refusal: GateRefusal, answer: (decision: GateRefusal) => { status: number; body: unknown }) => {
    const decision = await context.gate.refuseRequest({ route: routeLevel, requestId: request.requestId, refusal });
    countVerification(context.metrics, route, decision);
    if (decision.action === 'forward') {
      context.logger.info({ request_id: request.requestId, route: route.name, reason: refusal.reason }, 'shadow: would have blocked');
      return forwardAsSent('would_block');
    }
    context.logger.info({ request_id: request.requestId, route: route.name, reason: refusal.reason, detail: refusal.detail }, 'MCP request blocked');
    const { status, body } = answer(decision);
    sendJson(res, request.requestId, status, forEra(messageEra(req.headers, undefined), body));
    context.observe(route.name, 'blocked', started);
  };

  if (read.tooLarge) {
    const refusal = mcpRefusal('BODY_TOO_LARGE', `the request is larger than max_body_bytes (${route.max_body_bytes}), so the gate cannot read it`, 503);
    return refuseRequest(refusal, (r) => ({ status: 413, body: errorResponse(null, INVALID_REQUEST, refusalAnswer(r, undefined)) }));
  }
  const parsed = parseMessages(Buffer.concat(read.chunks));
  if (parsed.kind === 'invalid') {
    const refusal = mcpRefusal('MCP_UNREADABLE', `the body is not a JSON-RPC message the gate can read (${parsed.reason})`);
    return refuseRequest(refusal, (r) => ({ status: 400, body: errorResponse(null, PARSE_ERROR, refusalAnswer(r, undefined)) }));
  }
  const { messages } = parsed;
  const contradiction = headerContradiction(req, messages, parsed.batch);
  if (contradiction !== undefined) {
    const refusal = mcpRefusal('MCP_HEADER_MISMATCH', contradiction);
    return refuseRequest(refusal, (r) => ({ status: 400, body: errorResponse(messages[0]!.id ?? null, HEADER_MISMATCH, refusalAnswer(r, undefined)) }));
  }
  if (parsed.batch) {
    const acting = messages.filter((message) => messageKind(message) !== 'pass');
    if (acting.length === 0) return forwardAsSent('passthrough');
    const names = [...new Set(acting.map((message) => message.method ?? 'a response'))].join(', ');
    const refusal = mcpRefusal('MCP_BATCH_REFUSED', `a JSON-RPC batch holding ${names} is refused: the gate decides tool calls one by one; send them in requests of their own`);
    return refuseRequest(refusal, (r) => ({
      status: 200,
      body: messages.filter((m) => m.id !== undefined && m.method !== undefined).map((m) => errorResponse(m.id!, INVALID_REQUEST, refusalAnswer(r, undefined))),
    }));
  }
  const message = messages[0]!;
  const kind = messageKind(message);
  if (kind === 'pass') {
    const hiding = message.method === 'tools/list' ? toolHiding(request.mcp, route.mode, policyAsker(context, req, request)) : undefined;
    if (hiding === undefined) return forwardAsSent('passthrough', request.mcp.inline === undefined ? undefined : context.inline.watchInitialize(message));
    const send = (status: number, body: unknown) => sendJson(res, request.requestId, status, forEra(messageEra(req.headers, message), body));
    return serveToolList(context, res, { route, requestId: request.requestId, started, send }, message, Buffer.concat(read.chunks), hiding);
  }
  if (kind === 'unknown') {
    const what = message.id === undefined ? `the notification ${message.method}` : `the method ${message.method}`;
    const refusal = mcpRefusal('MCP_METHOD_NOT_ALLOWED', `${what} is not one the gate lets pass or decides`);
    return refuseRequest(refusal, (r) => ({ status: 200, body: errorResponse(message.id ?? null, INVALID_REQUEST, refusalAnswer(r, undefined)) }));
  }
  return serveToolCall(context, req, res, request, message, refuseRequest);
}

async function serveToolCall(
  context: McpServeContext,
  req: IncomingMessage,
  res: ServerResponse,
  request: McpRequest,
  message: JsonRpcMessage,
  refuseRequest: (refusal: GateRefusal, answer: (decision: GateRefusal) => { status: number; body: unknown }) => Promise<void>,
): Promise<void> {
  const { route, mcp, requestId, started } = request;
  const id = message.id!;
  const name = message.params?.name;
  const args = message.params?.arguments ?? {};
  if (typeof name !== 'string' || typeof args !== 'object' || args === null || Array.isArray(args)) {
    const refusal = mcpRefusal('MCP_UNREADABLE', 'a tools/call names its tool in params.name and gives its arguments as an object');
    return refuseRequest(refusal, (r) => ({ status: 200, body: errorResponse(id, INVALID_REQUEST, refusalAnswer(r, undefined)) }));
  }
  const entry = toolEntry(mcp, name);
  const toolRoute: GateRoute = { name: route.name, mode: entry?.mode ?? route.mode, action_type: entry?.action_type ?? DEFAULT_TOOL_ACTION_TYPE, tool: name };
  const derived = entry === undefined ? undefined : callFacts(mcp, entry, name, args as Record<string, unknown>, req.headers, new URLSearchParams(queryOf(request.target)));
  const facts = derived?.ok === true ? derived.facts : undefined;
  const call = {
    tool: name,
    actionType: toolRoute.action_type,
    target: entry?.target.id ?? `${mcp.server}/${name}`,
    digest: facts?.[ARGUMENTS_DIGEST_FACT] as string | undefined,
    inline: false,
  };
  let decision: GateDecision;
  if (entry === undefined || entry.block) {
    const refusal =
      entry === undefined
        ? mcpRefusal('TOOL_NOT_CONFIGURED', `the tool ${name} is not in this gate's tool table`)
        : mcpRefusal('TOOL_BLOCKED', `the tool ${name} is blocked at this gate`);
    decision = await context.gate.refuseRequest({ route: toolRoute, requestId, refusal });
  } else {
    let token = permitOf(req, context.permitHeader, message);
    if (token === undefined && mcp.inline !== undefined && toolRoute.mode === 'enforce') {
      // No permit: the gate evaluates the call itself, then checks its permit as any other.
      const era = messageEra(req.headers, message);
      const verdict = await context.inline.decide({ inline: mcp.inline, authorityUrl: context.authorityUrl, headers: req.headers, id, route: toolRoute, derived: derived!, requestId, gate: context.gate, era });
      if (verdict.kind === 'answer') {
        countVerification(context.metrics, route, verdict.decision);
        sendJson(res, requestId, verdict.status, forEra(era, verdict.body), verdict.headers);
        return context.observe(route.name, 'blocked', started);
      }
      token = verdict.token;
      call.inline = true;
    }
    decision = await context.gate.checkCall({
      route: toolRoute,
      token,
      tokenSource: `the ${context.permitHeader} header and params._meta`,
      derived: derived!,
      required: [ARGUMENTS_DIGEST_FACT],
      requestId,
      signal: abortedWhenGone(res),
    });
  }
  countVerification(context.metrics, route, decision);
  if (decision.action === 'block') {
    context.logger.info({ request_id: requestId, route: route.name, tool: name, reason: decision.reason, detail: decision.detail }, 'tool call blocked');
    sendJson(res, requestId, 200, forEra(messageEra(req.headers, message), toolErrorResult(id, refusalAnswer(decision, call))));
    return context.observe(route.name, 'blocked', started);
  }
  if (decision.wouldBlock !== null) {
    context.logger.info({ request_id: requestId, route: route.name, tool: name, reason: decision.wouldBlock.reason }, 'shadow: would have blocked');
  }
  const permitted = decision.wouldBlock === null && decision.permitId !== null;
  const added: Record<string, string> = { 'x-countersign-mode': decision.mode };
  if (permitted) added['x-countersign-permit-id'] = decision.permitId!;
  // The permit and the answers to the gate's own input requests are for the gate alone.
  const body = Buffer.from(JSON.stringify(withoutGateInput(withoutPermit(message))));
  const watch = watchToolResult(id);
  const result = await context.forward(body, added, permitted ? watch.observer : undefined);
  context.observe(route.name, result.status === null ? 'upstream_error' : decision.wouldBlock !== null ? 'would_block' : 'forwarded', started);
  if (!permitted) return;
  recordExecution(context.executionRecords, { route: toolRoute, decision, requestId, result, outcome: toolOutcome(result, watch.outcome) });
}

/** How a `tools/list` on an inline route asks the policy about the caller's tools (tool-policy.ts); undefined elsewhere. */
function policyAsker(context: McpServeContext, req: IncomingMessage, request: McpRequest): ToolHiding['policy'] {
  const { inline } = request.mcp;
  if (inline === undefined) return undefined;
  const runtime = context.inline.runtime(inline, context.authorityUrl);
  return (tools) => policyDeniedTools({ runtime, headers: req.headers, tools, requestId: request.requestId, logger: context.logger });
}

/** The call's permit: from `_meta` or the header, undefined when neither, null when ambiguous or not a string. */
function permitOf(req: IncomingMessage, permitHeader: string, message: JsonRpcMessage): string | undefined | null {
  const raw = req.headers[permitHeader];
  if (Array.isArray(raw) && raw.length > 1) return null;
  const header = firstOf(raw);
  const meta = metaPermit(message);
  if (meta === null) return null;
  if (meta !== undefined && header !== undefined && header !== meta) return null;
  return meta ?? header;
}

/** Why the `Mcp-Method` / `Mcp-Name` / `MCP-Protocol-Version` headers contradict the body, or undefined when they agree (or are absent). */
function headerContradiction(req: IncomingMessage, messages: readonly JsonRpcMessage[], batch: boolean): string | undefined {
  const method = req.headers['mcp-method'];
  const name = req.headers['mcp-name'];
  if (method === undefined && name === undefined) return batch ? undefined : protocolVersionContradiction(req.headers, messages[0]!);
  if (Array.isArray(method) || Array.isArray(name)) return 'the Mcp-Method or Mcp-Name header appears more than once';
  if (batch) return 'a batch cannot carry Mcp-Method or Mcp-Name headers';
  const message = messages[0]!;
  if (method !== undefined && method !== message.method) return `the Mcp-Method header says ${method}, the body ${message.method ?? 'a response'}`;
  if (name !== undefined) {
    const params = message.params;
    const named = message.method === 'resources/read' ? params?.uri : params?.name;
    if (decodedHeaderValue(name) !== named) return `the Mcp-Name header says ${name}, the body ${typeof named === 'string' ? named : 'nothing'}`;
  }
  return protocolVersionContradiction(req.headers, message);
}

function sendJson(res: ServerResponse, requestId: string, status: number, body: unknown, extra: Record<string, string> = {}): void {
  if (res.headersSent || res.destroyed) {
    res.destroy();
    return;
  }
  const text = JSON.stringify(body);
  const headers: Record<string, string | number> = {
    'content-type': 'application/json',
    'content-length': Buffer.byteLength(text),
    'cache-control': 'no-store',
    'x-request-id': requestId,
    ...extra,
  };
  if (!res.req.complete) headers.connection = 'close';
  res.writeHead(status, headers);
  res.end(text);
}
