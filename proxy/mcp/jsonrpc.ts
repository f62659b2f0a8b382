/**
 * The JSON-RPC 2.0 messages of the MCP Streamable HTTP transport, as far as the gate reads them:
 * a POST body parsed into messages (one, or a batch), what each asks for, and the answers the gate
 * makes itself. MCP clients read JSON-RPC, not the HTTP error envelope: a refused `tools/call` is
 * a tool result with `isError: true` (the model reads its text and can adapt), any other refused
 * request a JSON-RPC error. Reason codes go under `_meta` (`countersign/reason`, …) or `data`.
 *
 * @example
 *   const parsed = parseMessages(Buffer.from('{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"x"}}'));
 *   // { kind: 'messages', batch: false, messages: [{ id: 1, method: 'tools/call', params: { name: 'x' }, … }] }
 *   toolErrorResult(1, { reason: 'MISSING_PERMIT', error: 'permit_required', status: 403, text: 'No permit …' });
 */
import { isPlainObject } from '../fact-sources.js';

export type JsonRpcId = string | number | null;

export interface JsonRpcMessage {
  /** Undefined for a notification. */
  readonly id: JsonRpcId | undefined;
  /** Undefined for a response (a client answering the server's own request). */
  readonly method: string | undefined;
  readonly params: Record<string, unknown> | undefined;
  /** The message as parsed, to forward (with the permit taken out of `_meta`). */
  readonly raw: Record<string, unknown>;
}

export type ParsedBody =
  | { kind: 'messages'; batch: boolean; messages: JsonRpcMessage[] }
  | { kind: 'invalid'; reason: string };

/** The key under `params._meta` where a caller puts its permit. */
export const PERMIT_META_KEY = 'countersign/permit';

/** Methods that read or negotiate and never act: they pass without a permit. */
const PASSING_METHODS: ReadonlySet<string> = new Set([
  'initialize',
  'ping',
  'tools/list',
  'resources/list',
  'resources/read',
  'resources/templates/list',
  'prompts/list',
  'prompts/get',
  'completion/complete',
  'server/discover',
  // 2026-07-28: a stream of the server's change notifications, in place of the GET stream.
  'subscriptions/listen',
]);

export type MessageKind = 'pass' | 'tool_call' | 'unknown';

/** What the gate does with one message: pass it, decide it per tool, or refuse it (enforce). */
export function messageKind(message: JsonRpcMessage): MessageKind {
  const { method } = message;
  // A response answers the server's own request (sampling, elicitation, roots): it acts on nothing.
  if (method === undefined) return 'pass';
  if (method === 'tools/call') return message.id === undefined ? 'unknown' : 'tool_call';
  if (method.startsWith('notifications/')) return 'pass';
  return PASSING_METHODS.has(method) && message.id !== undefined ? 'pass' : 'unknown';
}

/** Parses a POST body; anything that is not one JSON-RPC 2.0 message or a non-empty batch of them is invalid. */
export function parseMessages(body: Buffer): ParsedBody {
  let value: unknown;
  try {
    value = JSON.parse(body.toString('utf8'));
  } catch {
    return { kind: 'invalid', reason: 'the body is not JSON' };
  }
  const batch = Array.isArray(value);
  const entries = batch ? (value as unknown[]) : [value];
  if (entries.length === 0) return { kind: 'invalid', reason: 'an empty batch' };
  const messages: JsonRpcMessage[] = [];
  for (const entry of entries) {
    const message = messageOf(entry);
    if (typeof message === 'string') return { kind: 'invalid', reason: batch ? `a batch entry: ${message}` : message };
    messages.push(message);
  }
  return { kind: 'messages', batch, messages };
}

function messageOf(value: unknown): JsonRpcMessage | string {
  if (!isPlainObject(value)) return 'a JSON-RPC message is an object';
  if (value.jsonrpc !== '2.0') return 'jsonrpc must be "2.0"';
  const id = value.id;
  if (id !== undefined && id !== null && typeof id !== 'string' && !(typeof id === 'number' && Number.isFinite(id))) return 'id must be a string or a number';
  const method = value.method;
  if (method !== undefined && typeof method !== 'string') return 'method must be a string';
  if (method === undefined && (id === undefined || (!Object.hasOwn(value, 'result') && !Object.hasOwn(value, 'error')))) {
    return 'neither a request, a notification nor a response';
  }
  const params = value.params;
  if (params !== undefined && !isPlainObject(params)) return 'params must be an object';
  return { id: id as JsonRpcId | undefined, method, params, raw: value };
}

/** The permit under `params._meta`: undefined when none, null when it is not a string. */
export function metaPermit(message: JsonRpcMessage): string | undefined | null {
  const meta = message.params?._meta;
  if (!isPlainObject(meta) || !Object.hasOwn(meta, PERMIT_META_KEY)) return undefined;
  const token = meta[PERMIT_META_KEY];
  return typeof token === 'string' ? token : null;
}

/** The message without the permit in `_meta` (and without an `_meta` it leaves empty): what the MCP server gets. */
export function withoutPermit(message: JsonRpcMessage): Record<string, unknown> {
  const params = message.params;
  const meta = params?._meta;
  if (params === undefined || !isPlainObject(meta) || !Object.hasOwn(meta, PERMIT_META_KEY)) return message.raw;
  const { [PERMIT_META_KEY]: _permit, ...rest } = meta;
  const { _meta: _old, ...otherParams } = params;
  return { ...message.raw, params: Object.keys(rest).length > 0 ? { ...otherParams, _meta: rest } : otherParams };
}

/** What a refusal tells the client, in words and codes. */
export interface RefusalAnswer {
  /** The stable reason code (MISSING_PERMIT, BINDING_MISMATCH, TOOL_BLOCKED, …). */
  reason: string;
  /** The error envelope's code the HTTP routes would answer (permit_required, permit_rejected, gate_unavailable, forbidden). */
  error: string;
  /** The HTTP status the HTTP routes would answer (403, 503). */
  status: number;
  /** For the model and the person: what happened and what to do. */
  text: string;
  /** More under the result's `_meta` (`countersign/reason_codes`, `countersign/approval_url`, …). */
  meta?: Record<string, unknown>;
}

/** A refused `tools/call`: a tool result with `isError: true`, the codes under `_meta`. */
export function toolErrorResult(id: JsonRpcId, answer: RefusalAnswer): Record<string, unknown> {
  return {
    jsonrpc: '2.0',
    id,
    result: {
      content: [{ type: 'text', text: answer.text }],
      isError: true,
      _meta: { 'countersign/reason': answer.reason, 'countersign/error': answer.error, 'countersign/status': answer.status, ...answer.meta },
    },
  };
}

/** JSON-RPC's "invalid request": what a refused request other than a tool call gets. */
export const INVALID_REQUEST = -32600;
/** JSON-RPC's "parse error". */
export const PARSE_ERROR = -32700;
/**
 * MCP's `HeaderMismatch` (2026-07-28): an `Mcp-Method`, `Mcp-Name` or `MCP-Protocol-Version`
 * header that says something other than the body, answered with HTTP 400, as MCP servers do.
 */
export const HEADER_MISMATCH = -32020;

/** A refused request that is not a tool call (or a body the gate cannot read): a JSON-RPC error. */
export function errorResponse(id: JsonRpcId, code: number, answer: RefusalAnswer): Record<string, unknown> {
  return { jsonrpc: '2.0', id, error: { code, message: answer.text, data: { reason: answer.reason, error: answer.error, status: answer.status } } };
}
