/**
 * The words of the MCP gate's refusals: a `GateRefusal` (gate.ts) turned into what an agent reads
 * in the tool result (`isError: true`), with the remediation, and the refusals the MCP gate makes
 * before any permit is looked at (a method it does not understand, a tool it blocks or does not list).
 *
 * @example
 *   const answer = refusalAnswer(decision, { tool: 'issue_refund', actionType: 'agent.tool.invoke',
 *     target: 'helpdesk/issue_refund', digest: 'ab12…' });
 *   toolErrorResult(message.id, answer); // jsonrpc.ts
 */
import type { GateRefusal } from '../gate.js';
import { PERMIT_META_KEY, type RefusalAnswer } from './jsonrpc.js';

/** What the remediation names: the call as it must be evaluated. */
export interface CallDescription {
  tool: string;
  actionType: string;
  /** The target id the permit must bind. */
  target: string;
  /** The arguments digest the permit must bind; undefined when the arguments have none. */
  digest: string | undefined;
}

export function refusalAnswer(refusal: GateRefusal, call: CallDescription | undefined): RefusalAnswer {
  return { reason: refusal.reason, error: refusal.code, status: refusal.status, text: `${sentence(refusal.detail)} ${remediation(refusal, call)}` };
}

function remediation(refusal: GateRefusal, call: CallDescription | undefined): string {
  if (refusal.status === 503) return 'Nothing ran and no permit was used; send the call again shortly.';
  if (call === undefined) return '';
  const evaluate =
    `Evaluate this exact call (action ${call.actionType}, target {type: tool, id: ${call.target}}` +
    (call.digest !== undefined ? `, arguments_digest ${call.digest}` : '') +
    `) and send it again with the permit in params._meta["${PERMIT_META_KEY}"].`;
  switch (refusal.reason) {
    case 'TOOL_BLOCKED':
    case 'TOOL_NOT_CONFIGURED':
      return 'No permit can open it here; do the task another way or hand it to a person.';
    case 'MISSING_PERMIT':
      return `This tool call needs a permit. ${evaluate}`;
    case 'PERMIT_ALREADY_USED':
      return `A permit runs one call. ${evaluate}`;
    default:
      return `The permit does not cover this call. ${evaluate}`;
  }
}

function sentence(text: string): string {
  const trimmed = text.trim();
  if (trimmed === '') return '';
  const first = trimmed[0]!.toUpperCase() + trimmed.slice(1);
  return /[.!?]$/.test(first) ? first : `${first}.`;
}

/** A refusal the MCP gate decides before any permit: `reason`, with the detail for the record and the client. */
export function mcpRefusal(reason: string, detail: string, status: 403 | 503 = 403): GateRefusal {
  return { status, code: status === 503 ? 'gate_unavailable' : 'forbidden', reason, verifyCode: null, detail };
}
