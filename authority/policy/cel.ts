/**
 * CEL for policy conditions: the two environments (before and after risk is known), compiling
 * one condition (parse + type check, once, at policy load) and running it.
 *
 * Variables a condition can read:
 *   action     {type}                         the requested action type
 *   actor      {id, groups}                   groups: names of the actor_groups containing the actor
 *   context    map                            the request context as sent (JSON values)
 *   approvals  {count, ids, approvers, kinds} approvals the caller already checked
 *   now        timestamp                      the evaluation instant (change windows)
 *   risk       {score, band, factors}         rules only: the class's computed risk
 *
 * Numbers: a JSON number in `context` is a CEL double whatever its value (500 and 500.5 alike),
 * so a fact has one type and comparisons with int or double literals both work
 * (`context.amount_usd > 10000`). Arithmetic on a context number needs a double literal
 * (`context.amount_usd * 1.1`, `context.count + 1.0`). Engine-made counts (`approvals.count`)
 * are ints.
 *
 * @example
 *   const compiled = compileCondition('context.amount_usd > 10000', RULE_ENV);
 *   if (compiled.ok) runCondition(compiled.program, variables); // true | false, or throws
 */
import { Environment } from '@marcbachmann/cel-js';
import type { ParseResult } from '@marcbachmann/cel-js';

export class ActionFacts {
  constructor(readonly type: string) {}
}

export class ActorFacts {
  constructor(
    readonly id: string,
    readonly groups: readonly string[],
  ) {}
}

export class ApprovalFacts {
  constructor(
    readonly count: bigint,
    readonly ids: readonly string[],
    /** Distinct user ids over all approvals, in order of first appearance. */
    readonly approvers: readonly string[],
    /** Parallel to ids: 'approval' or 'escalation'. */
    readonly kinds: readonly string[],
  ) {}
}

export class RiskFacts {
  constructor(
    readonly score: number,
    readonly band: string,
    /** Names of the matched risk factors, so rules can reuse a factor's condition by name. */
    readonly factors: readonly string[],
  ) {}
}

export const NO_APPROVALS = new ApprovalFacts(0n, Object.freeze([]), Object.freeze([]), Object.freeze([]));

/** What a condition is evaluated against; `risk` is absent for class and factor conditions. */
export interface ConditionVariables {
  action: ActionFacts;
  actor: ActorFacts;
  context: Record<string, unknown>;
  approvals: ApprovalFacts;
  now: Date;
  risk?: RiskFacts;
}

export type Program = ParseResult;

function baseEnvironment(): Environment {
  return (
    new Environment({ homogeneousAggregateLiterals: false, enableOptionalTypes: true })
      // Typed facts, so that a misspelt field (`risk.scor`) fails at policy load, not per request.
      .registerType('Action', { ctor: ActionFacts, fields: { type: 'string' } })
      .registerType('Actor', { ctor: ActorFacts, fields: { id: 'string', groups: 'list<string>' } })
      .registerType('Approvals', {
        ctor: ApprovalFacts,
        fields: { count: 'int', ids: 'list<string>', approvers: 'list<string>', kinds: 'list<string>' },
      })
      .registerType('Risk', { ctor: RiskFacts, fields: { score: 'double', band: 'string', factors: 'list<string>' } })
      .registerVariable('action', 'Action')
      .registerVariable('actor', 'Actor')
      .registerVariable('context', 'map')
      .registerVariable('approvals', 'Approvals')
      .registerVariable('now', 'google.protobuf.Timestamp')
  );
}

const base = baseEnvironment();
/** Class `match.when` and risk factors: they run before the risk score exists. */
export const PRE_RISK_ENV = base.clone();
/** Rules. */
export const RULE_ENV = base.clone().registerVariable('risk', 'Risk');

export type ConditionCompilation = { ok: true; program: Program } | { ok: false; message: string; offset: number };

interface CelErrorShape {
  summary?: unknown;
  message?: unknown;
  range?: { start?: unknown };
}

const offsetOf = (error: unknown): number => {
  const start = (error as CelErrorShape | null)?.range?.start;
  return typeof start === 'number' && start >= 0 ? start : 0;
};

/** The error's one-line text (cel-js's `message` adds a source excerpt; `summary` does not). */
export function celErrorText(error: unknown): string {
  const shape = error as CelErrorShape | null;
  if (typeof shape?.summary === 'string') return shape.summary;
  if (typeof shape?.message === 'string') return shape.message.split('\n')[0] ?? shape.message;
  return String(error);
}

export function compileCondition(source: string, env: Environment): ConditionCompilation {
  let program: Program;
  try {
    program = env.parse(source);
  } catch (error) {
    return { ok: false, message: `CEL syntax error: ${celErrorText(error)}`, offset: offsetOf(error) };
  }
  let checked: ReturnType<Program['check']>;
  try {
    checked = program.check();
  } catch (error) {
    return { ok: false, message: `CEL type error: ${celErrorText(error)}`, offset: offsetOf(error) };
  }
  if (!checked.valid) {
    return { ok: false, message: `CEL type error: ${celErrorText(checked.error)}`, offset: offsetOf(checked.error) };
  }
  if (checked.type !== 'bool' && checked.type !== 'dyn') {
    return { ok: false, message: `a condition must evaluate to bool, this one evaluates to ${checked.type}`, offset: 0 };
  }
  return { ok: true, program };
}

/** Runs a compiled condition; throws on an evaluation error or a non-boolean result. */
export function runCondition(program: Program, variables: ConditionVariables): boolean {
  const value: unknown = program(variables as unknown as Record<string, unknown>);
  if (typeof value !== 'boolean') {
    throw new Error(`condition evaluated to ${value === null ? 'null' : typeof value}, not a bool`);
  }
  return value;
}
