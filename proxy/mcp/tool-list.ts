/**
 * `tools/list` tells the truth: the MCP server's list, as it reaches the agent, holds no tool the
 * gate refuses whatever the permit, so the tools an agent sees and the calls the gate lets through
 * agree. Removed: tools whose entry has `block: true`, and tools that match no entry
 * (`TOOL_NOT_CONFIGURED`), each only where that refusal is enforced (the entry's mode, or the
 * route's for an unconfigured tool); a shadow refusal forwards the call, so the tool stays listed.
 * With `hide_denied_tools` (an inline route), also the enforced tools the policy denies this caller
 * whatever the arguments (tool-policy.ts); when the policy cannot be asked, the list is refused in
 * enforce (`AUTHORITY_UNAVAILABLE`, `EVALUATION_REFUSED` or `JWKS_UNAVAILABLE`: a JSON-RPC error
 * and a record) and passes with only the filtering above in shadow.
 *
 * The answer is read as the server sends it: a JSON body (read whole, up to `MAX_TOOL_LIST_BYTES`)
 * or an event stream, read up to the event that carries the list's result; that event is rewritten
 * and the rest of the stream passes as it comes. Everything but the removed entries passes
 * unchanged (`nextCursor` included: each page is filtered as it passes). An answer that is not a
 * 200 with JSON or an event stream holding the result, or is content-encoded, passes unchanged: it
 * holds no list the client could read. A list past the bound is refused in enforce
 * (`MCP_LIST_TOO_LARGE`, a JSON-RPC error and a record), and passes unchanged in shadow.
 *
 * @example
 *   const hiding = toolHiding(mcp, route.mode, (tools) => policyDeniedTools({ runtime, headers, tools, requestId, logger }));
 *   if (hiding !== undefined) return serveToolList(context, res, { route, requestId, started, send }, message, body, hiding);
 */
import type { ServerResponse } from 'node:http';
import type { Logger } from 'pino';
import type { ProxyRoute } from '../config.js';
import { isPlainObject } from '../fact-sources.js';
import type { Gate, GateRefusal, GateRoute } from '../gate.js';
import { firstOf, responseHeaders } from '../http-messages.js';
import { countVerification, type ProxyMetrics, type RequestOutcome } from '../metrics.js';
import type { ProxyMode } from '../modes.js';
import { mcpRefusal, refusalAnswer } from './answers.js';
import { toolTarget } from './call-facts.js';
import { DEFAULT_TOOL_ACTION_TYPE, toolEntry, type McpRoute } from './config.js';
import { errorResponse, type JsonRpcId, type JsonRpcMessage } from './jsonrpc.js';
import { eventData, EVENT_BOUNDARY } from './tool-outcome.js';
import type { ListedTool, PolicyHiding } from './tool-policy.js';

/** Lists past this size are not read: refused in enforce, passed unchanged in shadow. */
export const MAX_TOOL_LIST_BYTES = 4 * 1024 * 1024;
/** JSON-RPC's "internal error": the gate could not produce a list it can vouch for. */
const INTERNAL_ERROR = -32603;

/** The MCP server's answer, unread: what the gate rewrites. */
export interface UpstreamAnswer {
  status: number;
  headers: Record<string, string | string[] | undefined>;
  body: AsyncIterable<Buffer> & { destroy(error?: Error): unknown };
}

/** What the forwarding server lends the list's filter. */
export interface ToolListContext {
  gate: Gate;
  metrics: ProxyMetrics;
  logger: Logger;
  /**
   * Sends the message to the MCP server and hands back its answer unread, asking for no content
   * encoding; null when the server did not answer (the client has had its 502).
   */
  exchange(body: Buffer, added: Record<string, string>): Promise<UpstreamAnswer | null>;
  observe(route: string, outcome: RequestOutcome, started: number): void;
}

export interface ToolListRequest {
  route: ProxyRoute;
  requestId: string;
  started: number;
  /** Answers the client with a message the gate made (serve.ts shapes it for the request's era). */
  send(status: number, body: unknown): void;
}

/** Which listed tools to remove. */
export interface ToolHiding {
  /** Removed whoever asks: blocked in enforce, or unconfigured on an enforcing route. */
  always(name: string): boolean;
  /** Asks the policy about the enforced tools still listed (tool-policy.ts); undefined without `hide_denied_tools`. */
  policy: ((tools: ListedTool[]) => Promise<PolicyHiding>) | undefined;
  /** The tools the policy is asked about: still listed, configured, not blocked, enforced. */
  candidates(names: readonly string[]): ListedTool[];
}

/**
 * Which listed tools to remove, or undefined when this route removes none (the list then passes
 * unread): a tool whose entry blocks it in enforce, or, on an enforcing route, one no entry
 * matches; with `policy` (a route with `hide_denied_tools`), also those the policy denies the caller.
 */
export function toolHiding(mcp: McpRoute, routeMode: ProxyMode, policy: ToolHiding['policy']): ToolHiding | undefined {
  const blocks = mcp.tools.some((entry) => entry.block && entry.mode === 'enforce');
  const unconfigured = routeMode === 'enforce' && !mcp.tools.some((entry) => entry.name === '*');
  const asks = mcp.hide_denied_tools && policy !== undefined && mcp.tools.some((entry) => !entry.block && entry.mode === 'enforce');
  if (!blocks && !unconfigured && !asks) return undefined;
  return {
    always(name) {
      const entry = toolEntry(mcp, name);
      return entry === undefined ? routeMode === 'enforce' : entry.block && entry.mode === 'enforce';
    },
    policy: asks ? policy : undefined,
    candidates(names) {
      const tools: ListedTool[] = [];
      for (const name of new Set(names)) {
        const entry = toolEntry(mcp, name);
        // Only an enforced tool's calls are decided by the policy for this caller (inline.ts).
        if (entry === undefined || entry.block || entry.mode !== 'enforce') continue;
        let target: ListedTool['target'];
        try {
          target = toolTarget(mcp, entry, name);
        } catch {
          continue; // no call of it can bind its target: the policy is not what refuses it
        }
        tools.push({ name, actionType: entry.action_type, target });
      }
      return tools;
    },
  };
}

export async function serveToolList(
  context: ToolListContext,
  res: ServerResponse,
  request: ToolListRequest,
  message: JsonRpcMessage,
  body: Buffer,
  hiding: ToolHiding,
): Promise<void> {
  const { route, requestId, started } = request;
  const answer = await context.exchange(body, { 'x-countersign-mode': route.mode });
  if (answer === null) return context.observe(route.name, 'upstream_error', started);
  const kind = listKind(answer);
  const iterator = answer.body[Symbol.asyncIterator]();
  const read: Buffer[] = [];
  let outcome: RequestOutcome = 'passthrough';
  const done = () => context.observe(route.name, outcome, started);
  /** A refusal of the whole list: true when it is answered (enforce), false when the list passes (shadow). */
  const refused = async (refusal: GateRefusal, words: string): Promise<boolean> => {
    const routeLevel: GateRoute = { name: route.name, mode: route.mode, action_type: DEFAULT_TOOL_ACTION_TYPE };
    const decision = await context.gate.refuseRequest({ route: routeLevel, requestId, refusal });
    countVerification(context.metrics, route, decision);
    outcome = decision.action === 'block' ? 'blocked' : 'would_block';
    if (decision.action === 'forward') {
      context.logger.info({ request_id: requestId, route: route.name, reason: refusal.reason }, `shadow: would have blocked: ${words}`);
      return false;
    }
    context.logger.warn({ request_id: requestId, route: route.name, reason: refusal.reason }, `tools/list refused: ${words}`);
    answer.body.destroy();
    request.send(200, errorResponse(message.id!, INTERNAL_ERROR, refusalAnswer(decision, undefined)));
    done();
    return true;
  };
  /** Writes the list found, filtered, then the rest of the answer. */
  const filtered = async (list: FoundList, rest: AsyncIterator<Buffer> | undefined): Promise<void> => {
    let hidden = hiding.always;
    if (hiding.policy !== undefined) {
      const names = list.tools.flatMap((tool) => (isPlainObject(tool) && typeof tool.name === 'string' && !hiding.always(tool.name) ? [tool.name] : []));
      const verdict = await hiding.policy(hiding.candidates(names));
      if (verdict.kind === 'unavailable') {
        if (await refused(verdict.refusal, 'the policy could not be asked about the listed tools')) return;
      } else if (verdict.names.size > 0) {
        hidden = (name) => hiding.always(name) || verdict.names.has(name);
      }
    }
    const tools = list.tools.filter((tool) => !(isPlainObject(tool) && typeof tool.name === 'string' && hidden(tool.name)));
    return finish(res, answer, requestId, [Buffer.from(list.write(tools))], rest, done);
  };
  if (kind !== undefined) {
    let size = 0;
    for (;;) {
      const next = await nextChunk(iterator, res);
      if (next === null) return done(); // the client went away
      if (next.done) {
        const list = foundList(kind, Buffer.concat(read).toString('utf8'), message.id!, true);
        return list === undefined ? finish(res, answer, requestId, read, undefined, done) : filtered(list, undefined);
      }
      size += next.value.length;
      if (size > MAX_TOOL_LIST_BYTES) break;
      read.push(next.value);
      if (kind === 'events') {
        const list = foundList(kind, Buffer.concat(read).toString('utf8'), message.id!, false);
        if (list !== undefined) return filtered(list, iterator);
      }
    }
    const refusal = mcpRefusal('MCP_LIST_TOO_LARGE', `the MCP server's tools/list answer is larger than ${MAX_TOOL_LIST_BYTES} bytes, too large to filter`);
    if (await refused(refusal, 'too large to filter')) return;
  }
  return finish(res, answer, requestId, read, iterator, done);
}

type ListKind = 'json' | 'events';

function listKind(answer: UpstreamAnswer): ListKind | undefined {
  if (answer.status !== 200) return undefined;
  const encoding = firstOf(answer.headers['content-encoding']);
  if (encoding !== undefined && encoding.toLowerCase() !== 'identity') return undefined;
  const type = firstOf(answer.headers['content-type'])?.toLowerCase() ?? '';
  if (type.startsWith('application/json')) return 'json';
  if (type.startsWith('text/event-stream')) return 'events';
  return undefined;
}

/** The list result for the request found in the answer: its tools, and the answer's text with other tools in their place. */
interface FoundList {
  tools: unknown[];
  write(tools: unknown[]): string;
}

/**
 * The list result for `id` in the answer's text, or undefined when it holds none (yet: an event
 * stream is read on until its result's event is whole). `complete`: the whole answer has been
 * read (a trailing event without its blank line counts).
 */
function foundList(kind: ListKind, text: string, id: JsonRpcId, complete: boolean): FoundList | undefined {
  if (kind === 'json') {
    const value = parseJson(text);
    const tools = listedTools(value, id);
    return tools === undefined ? undefined : { tools, write: (kept) => JSON.stringify(withTools(value, kept)) };
  }
  // Events and the blank lines between them, in order; the last piece may be an event still arriving.
  const pieces = text.split(EVENT_BOUNDARY);
  const whole = complete ? pieces.length : pieces.length - 1;
  for (let index = 0; index < whole; index += 2) {
    const event = pieces[index]!;
    const value = parseJson(eventData(event));
    const tools = listedTools(value, id);
    if (tools === undefined) continue;
    return {
      tools,
      write(kept) {
        const written = [...pieces];
        written[index] = withData(event, JSON.stringify(withTools(value, kept)));
        return written.join('');
      },
    };
  }
  return undefined;
}

/** The tools of the JSON-RPC answer, or undefined when `value` is not the list result for `id`. */
function listedTools(value: unknown, id: JsonRpcId): unknown[] | undefined {
  if (!isPlainObject(value) || value.id !== id || !isPlainObject(value.result) || !Array.isArray(value.result.tools)) return undefined;
  return value.result.tools;
}

/** The list result `value` (listedTools found its tools) holding `tools` instead. */
function withTools(value: unknown, tools: unknown[]): unknown {
  const answer = value as Record<string, unknown> & { result: Record<string, unknown> };
  return { ...answer, result: { ...answer.result, tools } };
}

/** The event with its data lines replaced by one holding `data` (its other fields, `id:` and `event:`, kept in place). */
function withData(event: string, data: string): string {
  const lines = event.split(/\r?\n/);
  const at = lines.findIndex((line) => line.startsWith('data:'));
  const kept = lines.filter((line) => !line.startsWith('data:'));
  kept.splice(at, 0, `data: ${data}`);
  return kept.join('\n');
}

/** Writes the answer's head and `prefix`, then the rest of the answer as it comes. */
async function finish(
  res: ServerResponse,
  answer: UpstreamAnswer,
  requestId: string,
  prefix: Buffer[],
  rest: AsyncIterator<Buffer> | undefined,
  done: () => void,
): Promise<void> {
  if (res.destroyed) {
    answer.body.destroy();
    return done();
  }
  const headers = responseHeaders(answer.headers, requestId);
  delete headers['content-length'];
  if (rest === undefined) headers['content-length'] = String(prefix.reduce((total, chunk) => total + chunk.length, 0));
  res.writeHead(answer.status, headers);
  for (const chunk of prefix) res.write(chunk);
  if (rest !== undefined) {
    for (;;) {
      const next = await nextChunk(rest, res);
      if (next === null) {
        answer.body.destroy();
        return done();
      }
      if (next.done) break;
      if (!res.write(next.value)) await drained(res);
    }
  }
  res.end();
  done();
}

/** The next chunk of the answer, or null when the client went away first. */
async function nextChunk(iterator: AsyncIterator<Buffer>, res: ServerResponse): Promise<IteratorResult<Buffer> | null> {
  if (res.destroyed) return null;
  try {
    return await iterator.next();
  } catch {
    // The server broke off: what has been read is all there is.
    return res.destroyed ? null : { done: true, value: undefined };
  }
}

function drained(res: ServerResponse): Promise<void> {
  return new Promise((resolve) => {
    const settle = () => {
      res.off('drain', settle);
      res.off('close', settle);
      resolve();
    };
    res.on('drain', settle);
    res.on('close', settle);
  });
}

function parseJson(text: string): unknown {
  try {
    return JSON.parse(text) as unknown;
  } catch {
    return undefined;
  }
}
