/**
 * The words of the MCP gate's refusals: a `GateRefusal` (gate.ts) turned into what an agent reads
 * in the tool result (`isError: true`), with the remediation, and the refusals the MCP gate makes
 * before any permit is looked at (a method it does not understand, a tool it blocks or does not list).
 *
 * For calls the gate decides itself (inline.ts), the remediation is never "bring a permit": a
 * denial carries the policy's reason codes and remediation, a hold the approval's id and the link
 * to it in the console, with "call again once it is approved".
 *
 * @example
 *   const answer = refusalAnswer(decision, { tool: 'issue_refund', actionType: 'agent.tool.invoke',
 *     target: 'helpdesk/issue_refund', digest: 'ab12…' });
 *   toolErrorResult(message.id, answer); // jsonrpc.ts
 *   const { refusal, answer: held } = approvalAnswer({ kind: 'approval', id: 'a-1', url: 'https://…/console/?approval=a-1', reasonCodes: ['REFUND_NEEDS_APPROVAL'], lapsed: null });
 */
import type { GateRefusal } from '../gate.js';
import { PERMIT_META_KEY, type JsonRpcId, type RefusalAnswer } from './jsonrpc.js';

/** What the remediation names: the call as it must be evaluated. */
export interface CallDescription {
  tool: string;
  actionType: string;
  /** The target id the permit must bind. */
  target: string;
  /** The arguments digest the permit must bind; undefined when the arguments have none. */
  digest: string | undefined;
  /** The gate evaluated the call itself (inline.ts): the caller has no permit to fix. */
  inline?: boolean;
}

export function refusalAnswer(refusal: GateRefusal, call: CallDescription | undefined): RefusalAnswer {
  return { reason: refusal.reason, error: refusal.code, status: refusal.status, text: `${sentence(refusal.detail)} ${remediation(refusal, call)}` };
}

function remediation(refusal: GateRefusal, call: CallDescription | undefined): string {
  if (refusal.status === 503) return 'Nothing ran and no permit was used; send the call again shortly.';
  if (call === undefined) return '';
  if (call.inline === true && refusal.reason !== 'TOOL_BLOCKED' && refusal.reason !== 'TOOL_NOT_CONFIGURED') {
    return "Nothing ran. The gate's own permit for this call was refused, which a retry will not change; tell the gate's operator (the policy must bind arguments_digest for this action).";
  }
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

/** A hold or an escalation the gate met evaluating a call: what waits for a person, and where. */
export interface PendingApproval {
  kind: 'approval' | 'escalation';
  id: string;
  /** The console page where it is decided. */
  url: string;
  /** The policy's reasons for the hold. */
  reasonCodes: readonly string[];
  /** An earlier approval of this same call that can no longer be used, and why (APPROVAL_REJECTED, APPROVAL_EXPIRED). */
  lapsed: { id: string; reason: string } | null;
}

/** A refusal to record and the answer to send, for a call the gate evaluated itself. */
export interface InlineRefusal {
  refusal: GateRefusal;
  answer: RefusalAnswer;
}

/** The policy denied the call: its reason codes, and its remediation in words the model can act on. */
export function denialAnswer(reasonCodes: readonly string[], remediation: ReadonlyArray<{ code: string; message: string }>): InlineRefusal {
  const codes = reasonCodes.length > 0 ? reasonCodes.join(', ') : 'no reason given';
  const refusal = mcpRefusal('POLICY_DENIED', `the policy denied this call (${codes})`);
  const advice = remediation.map((item) => sentence(item.message)).join(' ');
  const text = `${sentence(refusal.detail)} Nothing ran. ${advice === '' ? 'Do the task another way or hand it to a person.' : advice}`;
  return { refusal, answer: { reason: refusal.reason, error: refusal.code, status: refusal.status, text, meta: { 'countersign/reason_codes': [...reasonCodes], 'countersign/remediation': [...remediation] } } };
}

/** The call waits for a person: recorded as a refusal (the lapsed approval's reason, if one lapsed), answered with the link. */
export function approvalAnswer(pending: PendingApproval): InlineRefusal & { message: string } {
  const what = pending.kind === 'approval' ? 'an approval' : 'an escalation vote';
  const earlier = pending.lapsed === null ? '' : ` The earlier approval ${pending.lapsed.id} of this call can no longer be used (${pending.lapsed.reason}); a new one is open.`;
  const message = `This tool call waits for ${what} by a person (${pending.id}): ${pending.url}.${earlier} Once it is approved, make the same call again, with the same arguments: it then runs, once.`;
  const refusal = mcpRefusal(pending.lapsed?.reason ?? 'APPROVAL_REQUIRED', `the call waits for ${pending.kind} ${pending.id} (${pending.reasonCodes.join(', ')})`);
  const meta = { 'countersign/reason_codes': [...pending.reasonCodes], 'countersign/approval_id': pending.id, 'countersign/approval_url': pending.url };
  return { refusal, message, answer: { reason: refusal.reason, error: refusal.code, status: refusal.status, text: message, meta } };
}

/** MCP's "URL elicitation required" error code (2025-11-25). */
export const URL_ELICITATION_REQUIRED = -32042;

/** The hold as a URL-mode elicitation, for a client that declared it can open one. */
export function elicitationError(id: JsonRpcId, pending: PendingApproval, held: InlineRefusal & { message: string }): Record<string, unknown> {
  return {
    jsonrpc: '2.0',
    id,
    error: {
      code: URL_ELICITATION_REQUIRED,
      message: held.message,
      data: {
        elicitations: [{ mode: 'url', elicitationId: pending.id, url: pending.url, message: held.message }],
        reason: held.answer.reason,
        ...held.answer.meta,
      },
    },
  };
}
