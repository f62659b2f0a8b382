/**
 * Which listed tools the policy denies the caller whatever the call's arguments, for `tools/list`
 * on a route with `hide_denied_tools` (tool-list.ts). Each candidate tool is evaluated at the
 * authority as the caller inline's actor names (caller-identity.ts), with the gate's own key, as
 * its calls would be: the tool entry's action type, actor, and `context.target` the tool's target
 * (the only fact a call binds that its arguments cannot change).
 *
 * The evaluation is `POST /v1/evaluate` with `shadow: true` and `explain: true`: a shadow
 * evaluation issues no permit and opens no approval request or escalation, so a listed tool that
 * would be held does not put an approval in anyone's inbox. (AuthZEN's evaluations endpoint opens
 * both for a hold or an escalate, and its answer carries no rule trace.) It is still an evaluation:
 * one `evaluation.decided` audit event (mode `shadow`) and one token of the organization's evaluate
 * rate limit per tool per `tools/list`.
 *
 * A tool is hidden only on a `deny` whose rule trace shows that no argument could change it: the
 * class was chosen by conditions (`match.when`) that read nothing but `action`, `actor` and
 * `context.target`, and then no class matched, the class does not authorize the actor, a deny rule
 * reading only those matched, or no rule matched and none reads anything else (the class's default
 * deny). A deny that rests on other facts (an amount, say: the call's arguments bring them), on
 * `now`, `risk` or `approvals`, or on a condition that failed, a hold, an escalate and an allow
 * keep the tool listed. Conditions are read as text, conservatively: one that cannot be read with
 * certainty (escapes, triple quotes, comments) counts as reading everything.
 *
 * A caller without a credential is not asked about (its calls are refused with a 401 anyway): the
 * list is filtered as without the option. Decisions that cannot be established (the authority
 * unreachable, failing, rate limiting or refusing the gate's key; the issuer's keys unavailable)
 * are `unavailable`: tool-list.ts refuses the list in enforce.
 *
 * @example
 *   const verdict = await policyDeniedTools({ runtime, headers: req.headers, requestId, logger,
 *     tools: [{ name: 'drop_table', actionType: 'db.admin', target: { type: 'tool', id: 'db/drop_table' } }] });
 *   if (verdict.kind === 'hide') verdict.names; // Set { 'drop_table' } when the policy denies it to this caller
 */
import type { IncomingHttpHeaders } from 'node:http';
import type { Logger } from 'pino';
import type { EvaluateResponse } from '../../shared/wire/evaluate.js';
import type { GateRefusal } from '../gate.js';
import { mcpRefusal } from './answers.js';
import { evaluationFailure, type InlineRuntime } from './inline.js';

/** A listed tool as its calls would be evaluated. */
export interface ListedTool {
  name: string;
  actionType: string;
  target: { type: string; id: string };
}

export type PolicyHiding = { kind: 'hide'; names: ReadonlySet<string> } | { kind: 'unavailable'; refusal: GateRefusal };

export interface PolicyQuestion {
  /** The route's inline runtime (inline.ts): who the caller is, and the gate's client to ask with. */
  runtime: InlineRuntime;
  headers: IncomingHttpHeaders;
  tools: readonly ListedTool[];
  requestId: string;
  logger: Logger;
}

/** Evaluations in flight at once for one list: enough to keep a list of a few dozen tools quick. */
const CONCURRENCY = 8;

export async function policyDeniedTools(question: PolicyQuestion): Promise<PolicyHiding> {
  const { tools, requestId, logger } = question;
  if (tools.length === 0) return { kind: 'hide', names: new Set() };
  const caller = await question.runtime.identify(question.headers);
  if (caller.kind === 'unauthenticated') return { kind: 'hide', names: new Set() };
  if (caller.kind === 'unavailable') return { kind: 'unavailable', refusal: mcpRefusal('JWKS_UNAVAILABLE', caller.detail, 503) };
  const hidden = new Set<string>();
  try {
    const client = await question.runtime.client();
    let next = 0;
    let failed = false;
    const worker = async () => {
      // After a failure the list is refused whatever the others answer: ask nothing more.
      while (next < tools.length && !failed) {
        const index = next++;
        const tool = tools[index]!;
        const evaluation = await client.evaluate({
          action_type: tool.actionType,
          actor_id: caller.actorId,
          context: { target: tool.target },
          request_id: listEntryRequestId(requestId, index),
          shadow: true,
          explain: true,
        });
        if (deniedWhateverTheArguments(evaluation)) hidden.add(tool.name);
      }
    };
    const guarded = () => worker().catch((error: unknown) => {
      failed = true;
      throw error;
    });
    await Promise.all(Array.from({ length: Math.min(CONCURRENCY, tools.length) }, guarded));
  } catch (error) {
    const refusal = evaluationFailure(error, 'the listed tools');
    logger.warn({ request_id: requestId, err: error, reason: refusal.reason }, 'tools/list: the policy could not be asked about the listed tools');
    return { kind: 'unavailable', refusal };
  }
  return { kind: 'hide', names: hidden };
}

/** Within evaluate's request-id bound (128), in its alphabet, one per listed tool. */
function listEntryRequestId(requestId: string, index: number): string {
  const base = requestId.replace(/[^A-Za-z0-9._:-]/g, '_').slice(0, 100);
  return `${base}:tools-list:${index}`;
}

/** One step of the policy's rule trace (`decisionObject.explanation`). */
interface TraceStep {
  rule: string;
  condition: string | null;
  matched: boolean;
  decision: string | null;
  error: string | null;
}

/**
 * A deny the rule trace shows no argument could change: the class was chosen (or none was) by
 * conditions on the tool and the actor alone, and then the actor is not authorized, or a deny
 * rule on the tool and the actor matched (deny outweighs every other rule), or no rule matched
 * and none reads the call, so the class's default deny stands.
 */
export function deniedWhateverTheArguments(evaluation: EvaluateResponse): boolean {
  if (evaluation.decision !== 'deny') return false;
  const steps = traceSteps(evaluation.decisionObject.explanation);
  if (steps === undefined) return false;
  const certain = (step: TraceStep) => step.error === null && (step.condition === null || readsOnlyTheTool(step.condition));
  const classes = steps.filter((step) => step.rule.startsWith('class:'));
  if (!classes.every(certain)) return false;
  if (!classes.some((step) => step.matched)) return true; // no class for this action, whatever the call
  if (steps.some((step) => step.rule === 'authority' && !step.matched)) return true;
  const rules = steps.filter((step) => step.rule.startsWith('rule:'));
  if (rules.some((step) => step.matched && step.decision === 'deny' && certain(step))) return true;
  return steps.some((step) => step.rule === 'default' && step.decision === 'deny') && rules.every((step) => !step.matched && certain(step));
}

/** The trace's steps, or undefined when there is none (a repeated request id is answered without it) or it is not one. */
function traceSteps(trace: unknown): TraceStep[] | undefined {
  if (!Array.isArray(trace)) return undefined;
  const steps: TraceStep[] = [];
  for (const step of trace) {
    if (typeof step !== 'object' || step === null) return undefined;
    const { rule, condition, matched, decision, error } = step as Record<string, unknown>;
    if (typeof rule !== 'string' || typeof matched !== 'boolean') return undefined;
    if (!(condition === null || typeof condition === 'string') || !(decision === null || typeof decision === 'string') || !(error === null || typeof error === 'string')) return undefined;
    steps.push({ rule, condition, matched, decision, error });
  }
  return steps;
}

/** CEL variables a call's arguments, the clock or approvals can change. */
const CALL_VARIABLES = new Set(['context', 'now', 'risk', 'approvals']);

/**
 * Whether a CEL condition reads nothing but `action`, `actor` and `context.target`. Conservative:
 * anything it cannot be sure of (a string with escapes, triple quotes, a comment, `context` read
 * any other way) counts as reading the call.
 */
export function readsOnlyTheTool(condition: string): boolean {
  if (/[\\`]|'''|"""|\/\//.test(condition)) return false;
  // Without escapes, a string literal holds no quote of its own kind; its words are not variables.
  const code = condition.replace(/"[^"\n]*"|'[^'\n]*'/g, ' _ ');
  if (/["']/.test(code)) return false;
  for (const match of code.matchAll(/[A-Za-z_][A-Za-z0-9_]*/g)) {
    const name = match[0];
    if (!CALL_VARIABLES.has(name)) continue;
    if (name !== 'context') return false;
    const after = code.slice(match.index + name.length);
    if (!/^\s*\.\s*target\b/.test(after)) return false;
  }
  return true;
}
