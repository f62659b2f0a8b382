/**
 * The MCP gate deciding for clients that bring no permit (an IDE, a desktop assistant): on an
 * inline route (inline-config.ts), a `tools/call` without a permit is evaluated by the gate itself,
 * as the caller its credential identifies (caller-identity.ts), with the gate's own API key:
 * `POST {authority}/v1/evaluate` with the call's action type, target, the tool entry's facts and
 * its `arguments_digest`, and `reuse_approvals`, so that the same held call names the same
 * approval and, once approved, is allowed (once).
 *
 * - allow: the permit it returns goes back to the MCP gate (serve.ts), which verifies and consumes
 *   it like a caller's own permit, then forwards the call;
 * - deny: an `isError` tool result with the policy's reason codes and remediation (answers.ts);
 * - hold / escalate: the call does not run; the answer carries the approval's id and its page in
 *   the console, as a URL-mode elicitation (JSON-RPC error -32042) when the client declared
 *   `capabilities.elicitation.url` in the `initialize` of its session, else as an `isError` result;
 * - no credential, or one that is refused: HTTP 401 with `WWW-Authenticate: Bearer`;
 * - the issuer's keys, the gate's key or the authority unavailable: nothing runs, an `isError`
 *   result that says to send the call again (`countersign/status: 503`).
 *
 * Every refusal is recorded as `permit.rejected` through the gate (gate.ts `refuseRequest`); the
 * authority records the evaluation itself.
 *
 * The capability is remembered per `Mcp-Session-Id` in this process (a bounded map): behind several
 * replicas without sticky sessions, a call may reach one that did not see its `initialize`, and
 * gets the `isError` answer instead.
 *
 * @example
 *   const inline = createInlineGate({ dispatcher: agent, logger });
 *   const verdict = await inline.decide({ inline: mcp.inline, authorityUrl, headers: req.headers, id: 7,
 *     route: toolRoute, derived, requestId, gate });
 *   if (verdict.kind === 'permit') token = verdict.token; // then gate.checkCall as for any permit
 */
import type { IncomingHttpHeaders } from 'node:http';
import type { Logger } from 'pino';
import type { Dispatcher } from 'undici';
import { CountersignApiError, CountersignClient } from '../../shared/client/client.js';
import type { EvaluateResponse, EvaluateWireRequest } from '../../shared/wire/evaluate.js';
import type { DerivedFacts } from '../facts.js';
import type { ResponseObserver } from '../forward.js';
import type { Gate, GateDecision, GateRefusal, GateRoute } from '../gate.js';
import { readApiKey } from '../api-key-source.js';
import { approvalAnswer, denialAnswer, elicitationError, mcpRefusal, refusalAnswer, type InlineRefusal, type PendingApproval } from './answers.js';
import { callerIdentifier, type CallerIdentity } from './caller-identity.js';
import type { McpRoute } from './config.js';
import { approvalInputRequired, type McpEra } from './era.js';
import type { McpInline } from './inline-config.js';
import { errorResponse, INVALID_REQUEST, toolErrorResult, type JsonRpcId, type JsonRpcMessage, type RefusalAnswer } from './jsonrpc.js';

export interface InlineCall {
  inline: McpInline;
  /** The authority of proxy.yaml: where the gate evaluates, and the console's default home. */
  authorityUrl: string;
  headers: IncomingHttpHeaders;
  /** The `tools/call`'s JSON-RPC id. */
  id: JsonRpcId;
  /** The tool entry's route: name, mode, action type. */
  route: GateRoute;
  /** The call's facts (call-facts.ts); `actor_id` is the caller's, not among them. */
  derived: DerivedFacts;
  requestId: string;
  gate: Gate;
  /** The protocol the call speaks: a 2026-07-28 call is held with an `input_required` answer. */
  era: McpEra;
}

/** A permit to verify and consume, or an answer already decided (and recorded). */
export type InlineVerdict =
  | { kind: 'permit'; token: string }
  | { kind: 'answer'; decision: GateDecision; status: number; headers: Record<string, string>; body: unknown };

export interface InlineGate {
  decide(call: InlineCall): Promise<InlineVerdict>;
  /**
   * For an `initialize` passing through an inline route: an observer that remembers, against the
   * session id the MCP server answers with, that the client can open URL elicitations. Undefined
   * for any other message.
   */
  watchInitialize(message: JsonRpcMessage): ResponseObserver | undefined;
  /** Who calls an inline route, and the gate's client to evaluate with (tool-policy.ts asks about listed tools). */
  runtime(inline: McpInline, authorityUrl: string): InlineRuntime;
}

export interface InlineGateOptions {
  /** The proxy's pooled undici agent (server.ts): evaluate requests reuse its connections. */
  dispatcher: Dispatcher;
  logger: Logger;
  /** Sessions remembered as elicitation-capable, at most; the oldest go first. Default 10,000. */
  maxSessions?: number;
  /** The evaluate request's time limit (ms); default 5 s. */
  evaluateTimeoutMs?: number;
}

/** What one inline configuration needs at run time, made on first use (a reload makes new ones). */
export interface InlineRuntime {
  identify(headers: IncomingHttpHeaders): Promise<CallerIdentity>;
  client(): Promise<CountersignClient>;
}

/** The headers an MCP route's forwards leave out: the caller's token, unless `pass_token`. */
export function withheldHeaders(mcp: McpRoute): readonly string[] {
  return mcp.inline !== undefined && !mcp.inline.pass_token ? ['authorization'] : [];
}

export function createInlineGate(options: InlineGateOptions): InlineGate {
  const { dispatcher, logger } = options;
  const maxSessions = options.maxSessions ?? 10_000;
  const elicitingSessions = new Set<string>();
  const runtimes = new WeakMap<McpInline, InlineRuntime>();

  function runtimeOf(inline: McpInline, authorityUrl: string): InlineRuntime {
    let runtime = runtimes.get(inline);
    if (runtime !== undefined) return runtime;
    let client: Promise<CountersignClient> | undefined;
    runtime = {
      identify: callerIdentifier(inline.actor),
      client() {
        client ??= readApiKey(inline, 'mcp.inline', (message) => new Error(message)).then(
          (apiKey) => new CountersignClient({ baseUrl: authorityUrl, apiKey, dispatcher, timeoutMs: options.evaluateTimeoutMs ?? 5_000 }),
        );
        // A key file that could not be read is read again on the next call.
        client.catch(() => (client = undefined));
        return client;
      },
    };
    runtimes.set(inline, runtime);
    return runtime;
  }

  async function decide(call: InlineCall): Promise<InlineVerdict> {
    const { inline, gate, route, requestId, id } = call;
    const runtime = runtimeOf(inline, call.authorityUrl);
    const refuse = async (refusal: GateRefusal, answer: (decision: GateDecision & GateRefusal) => { status: number; headers?: Record<string, string>; body: unknown }) => {
      const decision = await gate.refuseRequest({ route, requestId, refusal });
      logger.info({ request_id: requestId, route: route.name, reason: refusal.reason, detail: refusal.detail }, 'inline tool call refused');
      const refused = { ...decision, ...refusal };
      const { status, headers, body } = answer(refused);
      return { kind: 'answer' as const, decision, status, headers: headers ?? {}, body };
    };
    const asToolError = (refused: GateRefusal, answer: RefusalAnswer = refusalAnswer(refused, undefined)) => ({ status: 200, body: toolErrorResult(id, answer) });
    const inlineAnswer = ({ refusal, answer }: InlineRefusal) => refuse(refusal, () => asToolError(refusal, answer));

    const caller = await runtime.identify(call.headers);
    if (caller.kind === 'unauthenticated') {
      return refuse(mcpRefusal('UNAUTHENTICATED', caller.detail), (refused) => ({
        status: 401,
        headers: { 'www-authenticate': bearerChallenge(inline, caller.tokenGiven) },
        body: errorResponse(id, INVALID_REQUEST, { ...refusalAnswer(refused, undefined), error: 'unauthorized', status: 401 }),
      }));
    }
    if (caller.kind === 'unavailable') return refuse(mcpRefusal('JWKS_UNAVAILABLE', caller.detail, 503), (refused) => asToolError(refused));
    if (!call.derived.ok) {
      const detail = `the call lacks the bound fact ${call.derived.missing}: ${call.derived.reason}`;
      return refuse(mcpRefusal('BINDING_MISMATCH', detail), (refused) => asToolError(refused));
    }

    let evaluation: EvaluateResponse;
    try {
      const client = await runtime.client();
      const { action_type: _action, actor_id: _actor, ...facts } = call.derived.facts;
      const body: EvaluateWireRequest & { reuse_approvals: boolean } = {
        action_type: route.action_type,
        actor_id: caller.actorId,
        context: facts,
        request_id: requestId,
        reuse_approvals: true,
      };
      evaluation = await client.evaluate(body);
    } catch (error) {
      const refusal = evaluationFailure(error);
      if (refusal.status === 503) logger.warn({ request_id: requestId, route: route.name, err: error }, 'inline evaluation impossible');
      return refuse(refusal, (refused) => asToolError(refused));
    }

    const decided = evaluation.decisionObject;
    switch (evaluation.decision) {
      case 'allow':
        if (evaluation.permit_token !== undefined) return { kind: 'permit', token: evaluation.permit_token };
        return refuse(
          mcpRefusal('NO_PERMIT_ISSUED', `the policy allowed the call (${decided.reason_codes.join(', ')}) without issuing a permit, and this gate runs a tool call only with one`),
          (refused) => asToolError(refused),
        );
      case 'deny':
        return inlineAnswer(denialAnswer(decided.reason_codes, evaluation.remediation ?? []));
      case 'hold':
      case 'escalate': {
        const pending = pendingApproval(evaluation, inline.console_url ?? `${call.authorityUrl.replace(/\/+$/, '')}/console`);
        if (pending === undefined) {
          return refuse(mcpRefusal('APPROVAL_REQUIRED', `the policy answered ${evaluation.decision} without opening an approval`), (refused) => asToolError(refused));
        }
        const held = approvalAnswer(pending);
        if (call.era === 'modern') {
          return refuse(held.refusal, () => ({ status: 200, body: approvalInputRequired(id, { approvalId: pending.id, url: pending.url, message: held.message }) }));
        }
        const session = call.headers['mcp-session-id'];
        const elicits = typeof session === 'string' && elicitingSessions.has(session);
        return refuse(held.refusal, () => (elicits ? { status: 200, body: elicitationError(id, pending, held) } : asToolError(held.refusal, held.answer)));
      }
    }
  }

  function watchInitialize(message: JsonRpcMessage): ResponseObserver | undefined {
    if (message.method !== 'initialize' || !declaresUrlElicitation(message.params)) return undefined;
    return {
      headers(headers) {
        const session = headers['mcp-session-id'];
        if (typeof session !== 'string' || session === '') return;
        elicitingSessions.delete(session);
        elicitingSessions.add(session);
        if (elicitingSessions.size > maxSessions) elicitingSessions.delete(elicitingSessions.values().next().value!);
      },
      data() {},
    };
  }

  return { decide, watchInitialize, runtime: runtimeOf };
}

/** `capabilities.elicitation.url` in an `initialize`'s params. */
function declaresUrlElicitation(params: Record<string, unknown> | undefined): boolean {
  const capabilities = params?.capabilities;
  if (typeof capabilities !== 'object' || capabilities === null) return false;
  const elicitation = (capabilities as Record<string, unknown>).elicitation;
  if (typeof elicitation !== 'object' || elicitation === null) return false;
  const url = (elicitation as Record<string, unknown>).url;
  return typeof url === 'object' && url !== null;
}

/** The approval or escalation a hold opened (or named again), with its page in the console. */
function pendingApproval(evaluation: EvaluateResponse, consoleUrl: string): PendingApproval | undefined {
  const kind = evaluation.approval_request_id !== undefined ? 'approval' : evaluation.escalation_id !== undefined ? 'escalation' : undefined;
  if (kind === undefined) return undefined;
  const id = (kind === 'approval' ? evaluation.approval_request_id : evaluation.escalation_id)!;
  // The console's inbox lists what waits for a person; the query names the one this call waits for.
  const url = new URL(`${consoleUrl.replace(/\/+$/, '')}/`);
  url.searchParams.set(kind, id);
  const lapsed = evaluation.decisionObject.approvals.find((approval) => !approval.accepted && approval.reason !== null && approval.id !== id);
  return { kind, id, url: url.href, reasonCodes: evaluation.decisionObject.reason_codes, lapsed: lapsed === undefined ? null : { id: lapsed.id, reason: lapsed.reason! } };
}

/** The authority could not decide (unreachable, failing, rate limiting: 503) or refused the gate's request (403). */
export function evaluationFailure(error: unknown, what = 'the call'): GateRefusal {
  if (!(error instanceof CountersignApiError)) {
    return mcpRefusal('AUTHORITY_UNAVAILABLE', `the gate could not evaluate ${what}: ${(error as Error).message}`, 503);
  }
  if (error.status === 0 || error.status === 429 || error.status >= 500 || error.code === 'invalid_response') {
    return mcpRefusal('AUTHORITY_UNAVAILABLE', `the authority could not evaluate ${what} (${error.code}): ${error.message}`, 503);
  }
  return mcpRefusal('EVALUATION_REFUSED', `the authority refused the gate's evaluation of ${what} (${error.code}): ${error.message}`);
}

/** RFC 6750's challenge: `invalid_token` when a token came, the protected resource metadata when configured. */
function bearerChallenge(inline: McpInline, tokenGiven: boolean): string {
  const params: string[] = [];
  if (tokenGiven) params.push('error="invalid_token"');
  if (inline.resource_metadata !== undefined) params.push(`resource_metadata="${inline.resource_metadata}"`);
  return params.length === 0 ? 'Bearer' : `Bearer ${params.join(', ')}`;
}
