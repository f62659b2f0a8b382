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
 *
 * Bounded evaluation: `matches` runs on RE2 (regex.ts) and every condition carries its
 * worst-case cost (cost.ts); whether an over-budget condition is an error or a deferred refusal
 * depends on `enforce` (policies being written vs. versions already stored).
 */
import { Environment } from '@marcbachmann/cel-js';
import type { ParseResult } from '@marcbachmann/cel-js';
import type { AstNode } from './cel-ast.js';
import { estimateCost, meterComprehensions } from './cost.js';
import { policyLimits } from './limits.js';
import { MATCHES_RE2, matchesRe2, prepareRegexes } from './regex.js';

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
      // `matches` calls are renamed to this before type checking (regex.ts): RE2, not RegExp.
      .registerFunction(`string.${MATCHES_RE2}(string): bool`, matchesRe2)
  );
}

const base = baseEnvironment();
/** Class `match.when` and risk factors: they run before the risk score exists. */
export const PRE_RISK_ENV = base.clone();
/** Rules. */
export const RULE_ENV = base.clone().registerVariable('risk', 'Risk');

export type ConditionCompilation =
  | {
      ok: true;
      program: Program;
      ast: AstNode;
      /** Worst-case cost under the configured size bounds (limits.ts). */
      cost: number;
      /** Set (only when not enforcing) for a condition over budget: it denies instead of running. */
      refusal: string | null;
    }
  | { ok: false; message: string; offset: number };

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
  const text =
    typeof shape?.summary === 'string'
      ? shape.summary
      : typeof shape?.message === 'string'
        ? (shape.message.split('\n')[0] ?? shape.message)
        : String(error);
  // The renamed `matches` (regex.ts) is an implementation detail: say what the author wrote.
  return text.replaceAll(MATCHES_RE2, 'matches');
}

/** Why a condition's worst case is refused, or null when it fits. */
function overBudget(cost: number): string | null {
  const limits = policyLimits();
  if (cost <= limits.maxConditionCost) return null;
  return (
    `the condition's worst-case cost is ${cost} units, over the limit of ${limits.maxConditionCost} ` +
    `(assuming lists of up to ${limits.maxListItems} items and strings of up to ${limits.maxStringLength} characters; ` +
    'each comprehension macro multiplies the cost of its body by the list size, and `matches` costs input length × pattern length / 32)'
  );
}

/**
 * `enforce` (the default, for a policy being written): an unsupported regular expression or a
 * worst case over the limit is an error. Otherwise (a stored version being loaded, compiled under
 * older rules or limits) the condition still compiles: an unsupported pattern fails when it runs,
 * an over-budget condition gets a `refusal`, both deny (fail closed) without stopping the load.
 */
export function compileCondition(source: string, env: Environment, enforce = true): ConditionCompilation {
  let program: Program;
  try {
    program = env.parse(source);
  } catch (error) {
    return { ok: false, message: `CEL syntax error: ${celErrorText(error)}`, offset: offsetOf(error) };
  }
  const ast = program.ast as AstNode;
  const regexProblem = prepareRegexes(ast);
  if (regexProblem && enforce) return { ok: false, message: regexProblem.message, offset: regexProblem.offset };
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
  const limits = policyLimits();
  const cost = estimateCost(ast, { list: limits.maxListItems, string: limits.maxStringLength });
  const refusal = overBudget(cost);
  if (refusal && enforce) return { ok: false, message: refusal, offset: 0 };
  // Without the runtime meter the request-size check in engine.ts still holds the bound; a
  // cel-js upgrade that drops the hook is caught by test/unit/policy-budget.test.ts.
  meterComprehensions(ast);
  return { ok: true, program, ast, cost, refusal };
}

/** Runs a compiled condition; throws on an evaluation error or a non-boolean result. */
export function runCondition(program: Program, variables: ConditionVariables): boolean {
  const value: unknown = program(variables as unknown as Record<string, unknown>);
  if (typeof value !== 'boolean') {
    throw new Error(`condition evaluated to ${value === null ? 'null' : typeof value}, not a bool`);
  }
  return value;
}
