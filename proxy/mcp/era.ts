/**
 * The two eras of MCP's Streamable HTTP transport, told apart in one place, and the answers the
 * gate makes itself shaped for the era of the request they answer.
 *
 * - 2025-11-25 and earlier: an `initialize` handshake, sessions (`Mcp-Session-Id`), server-sent
 *   requests (URL-mode elicitation among them).
 * - 2026-07-28: stateless. Every request carries its protocol version (and the client's info and
 *   capabilities) in `params._meta`, and the `MCP-Protocol-Version`, `Mcp-Method` and `Mcp-Name`
 *   headers repeat what the body says. Every result carries `resultType`: `complete`, or
 *   `input_required` when the server needs input first (a multi round-trip request: the client
 *   answers `inputRequests` and sends the request again with `inputResponses`).
 *
 * A request speaks 2026-07-28 when its `_meta` claims that version (or a later one), or, without a
 * claim, when its `MCP-Protocol-Version` header names it, as the SDK's own servers classify it.
 * A claim and a header that disagree are refused (`MCP_HEADER_MISMATCH`, serve.ts).
 *
 * Every result the gate makes itself goes through `forEra`: a 2026-07-28 client rejects a result
 * without `resultType`. A `requestState` a client sends back is the MCP server's, never the gate's:
 * the gate makes none, passes one it receives to the server as sent, and never reads it, so a
 * client cannot steer a decision (which approval applies, say) with it.
 *
 * @example
 *   const era = messageEra(req.headers, message);              // 'legacy' | 'modern'
 *   sendJson(res, id, 200, forEra(era, toolErrorResult(message.id, answer)));
 *   approvalInputRequired(7, { approvalId: 'apr_1', url: 'https://console/approvals/apr_1', message: 'A person must approve this refund.' });
 */
import type { IncomingHttpHeaders } from 'node:http';
import { isPlainObject } from '../fact-sources.js';
import type { JsonRpcId, JsonRpcMessage } from './jsonrpc.js';

/** `legacy`: 2025-11-25 and earlier (sessions); `modern`: 2026-07-28 and later (stateless). */
export type McpEra = 'legacy' | 'modern';

/** The first protocol revision of the stateless era. */
export const FIRST_STATELESS_VERSION = '2026-07-28';
/** Where a 2026-07-28 request names its protocol version. */
export const PROTOCOL_VERSION_META_KEY = 'io.modelcontextprotocol/protocolVersion';
/** The prefix of the gate's own `inputRequests` keys (and so of the client's `inputResponses` to them). */
export const GATE_INPUT_PREFIX = 'countersign/';

/** Revisions are dates: a later one sorts after. */
const isStateless = (version: string) => version >= FIRST_STATELESS_VERSION;

/** The era a message speaks: by its `_meta` claim, else by the `MCP-Protocol-Version` header. */
export function messageEra(headers: IncomingHttpHeaders, message: JsonRpcMessage | undefined): McpEra {
  const claim = message === undefined ? undefined : metaVersion(message);
  if (claim !== undefined) return isStateless(claim) ? 'modern' : 'legacy';
  const header = headerVersion(headers);
  return header !== undefined && isStateless(header) ? 'modern' : 'legacy';
}

/** Why the `MCP-Protocol-Version` header contradicts the body's `_meta` claim, or undefined when they agree (or either is absent). */
export function protocolVersionContradiction(headers: IncomingHttpHeaders, message: JsonRpcMessage): string | undefined {
  const raw = headers['mcp-protocol-version'];
  if (Array.isArray(raw)) return 'the MCP-Protocol-Version header appears more than once';
  const claim = metaVersion(message);
  if (claim === undefined || raw === undefined || raw === claim) return undefined;
  return `the MCP-Protocol-Version header says ${raw}, the body's _meta ${claim}`;
}

/**
 * A header value as the 2026-07-28 transport encodes it: a value that is not plain ASCII is sent
 * as `=?base64?<base64 of its UTF-8>?=` (`Mcp-Name` for a tool with such a name, say).
 */
export function decodedHeaderValue(value: string): string {
  const match = /^=\?base64\?([A-Za-z0-9+/]*={0,2})\?=$/.exec(value);
  return match === null ? value : Buffer.from(match[1]!, 'base64').toString('utf8');
}

/**
 * An answer the gate made, shaped for the request's era: on 2026-07-28 every result (a batch's
 * included) carries `resultType: "complete"` unless it says otherwise. Errors have no result and
 * are the same in both eras.
 */
export function forEra<T>(era: McpEra, answer: T): T {
  if (era === 'legacy') return answer;
  if (Array.isArray(answer)) return answer.map((entry: unknown) => forEra(era, entry)) as T;
  if (!isPlainObject(answer) || !isPlainObject(answer.result) || Object.hasOwn(answer.result, 'resultType')) return answer;
  return { ...answer, result: { ...answer.result, resultType: 'complete' } } as T;
}

/** What a person must approve before the call runs, as `approvalInputRequired` tells the client. */
export interface ApprovalRequest {
  /** The approval's id; it also keys the input request (`countersign/approval/<id>`). */
  approvalId: string;
  /** The console's page where a person decides (an absolute http or https URL). */
  url: string;
  /** For the person at the client: what waits for whom, in a sentence or two. */
  message: string;
}

/**
 * The answer to a 2026-07-28 `tools/call` that must wait for a person: a multi round-trip
 * `input_required` result asking the client for one URL-mode elicitation (open `url`, where the
 * approval is decided). The client opens or shows the link and sends the same call again with
 * its `inputResponses`; the gate then decides the retried call afresh by its own approval record
 * (same tool, same arguments digest, same actor), never by what the client answered or echoed.
 * The gate makes no `requestState`: one on the retry is the MCP server's and passes to it as sent.
 * The gate's `inputResponses` entry is taken out before the call reaches the server
 * (`withoutGateInput`).
 *
 * @example
 *   sendJson(res, requestId, 200, approvalInputRequired(message.id!, {
 *     approvalId: 'apr_01J…', url: 'https://countersign.example/console/approvals/apr_01J…',
 *     message: 'A person must approve this refund of $740 before it runs.' }));
 */
export function approvalInputRequired(id: JsonRpcId, approval: ApprovalRequest): Record<string, unknown> {
  return {
    jsonrpc: '2.0',
    id,
    result: {
      resultType: 'input_required',
      inputRequests: {
        [`${GATE_INPUT_PREFIX}approval/${approval.approvalId}`]: {
          method: 'elicitation/create',
          params: { mode: 'url', message: approval.message, url: approval.url },
        },
      },
      _meta: { 'countersign/approval_id': approval.approvalId },
    },
  };
}

/**
 * The message the MCP server gets: without the `inputResponses` that answer the gate's own input
 * requests (keys under `countersign/`), which the server never asked for. Everything else,
 * `requestState` included, passes as sent.
 */
export function withoutGateInput(raw: Record<string, unknown>): Record<string, unknown> {
  const params = raw.params;
  if (!isPlainObject(params) || !isPlainObject(params.inputResponses)) return raw;
  const kept = Object.entries(params.inputResponses).filter(([key]) => !key.startsWith(GATE_INPUT_PREFIX));
  if (kept.length === Object.keys(params.inputResponses).length) return raw;
  const { inputResponses: _gate, ...rest } = params;
  return { ...raw, params: kept.length > 0 ? { ...rest, inputResponses: Object.fromEntries(kept) } : rest };
}

function metaVersion(message: JsonRpcMessage): string | undefined {
  const meta = message.params?._meta;
  if (!isPlainObject(meta)) return undefined;
  const version = meta[PROTOCOL_VERSION_META_KEY];
  return typeof version === 'string' ? version : undefined;
}

function headerVersion(headers: IncomingHttpHeaders): string | undefined {
  const raw = headers['mcp-protocol-version'];
  return Array.isArray(raw) ? raw[0] : raw;
}
