/**
 * What the MCP server answered to a forwarded `tools/call`, for its `execution.observed` record:
 * the tool result's `isError`, read from a copy of the answer as it streams to the client (the
 * client's bytes are never held back). The answer is a JSON body or a `text/event-stream` whose
 * events carry JSON-RPC messages (progress notifications, then the result); the copy stops at
 * `MAX_OBSERVED_BYTES`, after which the outcome is unknown.
 *
 * @example
 *   const watch = watchToolResult(7);
 *   await forwardRequest(agent, res, { ..., observer: watch.observer });
 *   watch.outcome(); // { isError: false } | { isError: true } | { isError: undefined, why: '…' }
 *   recordExecution(records, { ..., result, outcome: toolOutcome(result, watch.outcome) });
 */
import { isPlainObject } from '../fact-sources.js';
import type { ExecutionOutcome, ResponseObserver } from '../forward.js';
import type { JsonRpcId } from './jsonrpc.js';

/** Tool results past this size are not read for `isError` (the record then says it is unknown). */
export const MAX_OBSERVED_BYTES = 1024 * 1024;

export type ToolOutcome = { isError: boolean } | { isError: undefined; why: string };

export interface ToolResultWatch {
  observer: ResponseObserver;
  outcome(): ToolOutcome;
}

export function watchToolResult(id: JsonRpcId): ToolResultWatch {
  let contentType = '';
  const chunks: Buffer[] = [];
  let size = 0;
  let overflow = false;
  return {
    observer: {
      headers(headers) {
        const value = headers['content-type'];
        contentType = (Array.isArray(value) ? value[0] : value)?.toLowerCase() ?? '';
      },
      data(chunk) {
        if (overflow) return;
        size += chunk.length;
        if (size > MAX_OBSERVED_BYTES) {
          overflow = true;
          chunks.length = 0;
        } else {
          chunks.push(chunk);
        }
      },
    },
    outcome() {
      if (overflow) return { isError: undefined, why: `the answer is larger than ${MAX_OBSERVED_BYTES} bytes` };
      const text = Buffer.concat(chunks).toString('utf8');
      const messages = contentType.startsWith('text/event-stream') ? eventMessages(text) : jsonMessages(text);
      for (const message of messages) {
        if (!isPlainObject(message) || message.id !== id) continue;
        if (Object.hasOwn(message, 'error')) return { isError: true };
        const result = message.result;
        if (isPlainObject(result)) return { isError: result.isError === true };
      }
      return { isError: undefined, why: 'the answer holds no result for the call' };
    },
  };
}

/**
 * What the call's `execution.observed` record says of it: the forward's code when the answer is
 * missing or cut short (undefined: the forward's own), else what the tool result said.
 */
export function toolOutcome(result: ExecutionOutcome, outcome: () => ToolOutcome): { code: string; reason: string } | undefined {
  if (result.upstream !== 'answered' || result.code !== '') return undefined;
  const read = outcome();
  if ('why' in read) return { code: 'TOOL_RESULT_UNKNOWN', reason: read.why };
  return read.isError ? { code: 'TOOL_RESULT_ERROR', reason: 'the tool answered with isError: true' } : { code: '', reason: 'the tool answered with isError: false' };
}

function jsonMessages(text: string): unknown[] {
  try {
    const value: unknown = JSON.parse(text);
    return Array.isArray(value) ? value : [value];
  } catch {
    return [];
  }
}

/** The blank line between two events of an event stream; `split` keeps it (tool-list.ts puts the stream back together). */
export const EVENT_BOUNDARY = /(\r?\n\r?\n)/;

/** An event's `data:` lines, joined with newlines as the event-stream format says; empty when it has none. */
export function eventData(event: string): string {
  return event
    .split(/\r?\n/)
    .filter((line) => line.startsWith('data:'))
    .map((line) => line.slice(line.startsWith('data: ') ? 6 : 5))
    .join('\n');
}

/** The JSON of each event's data. */
function eventMessages(text: string): unknown[] {
  const messages: unknown[] = [];
  for (const event of text.split(EVENT_BOUNDARY)) {
    const data = eventData(event);
    if (data === '') continue;
    try {
      messages.push(JSON.parse(data));
    } catch {
      // Not JSON-RPC: nothing to read from this event.
    }
  }
  return messages;
}
