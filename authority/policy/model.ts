/**
 * The compiled form of a policy document: what compile.ts builds once and engine.ts reads on
 * every decision. Everything a decision needs is precomputed here (defaults resolved, actor
 * sets flattened, classes indexed by action type) so that `decide` only runs CEL programs.
 *
 * @example
 *   const model: PolicyModel = buildModel(document, programs); // compile.ts
 *   decide(model, input);                                      // engine.ts
 */
import type { Program } from './cel.js';
import type { AstNode } from './cel-ast.js';
import type { Decision, EscalationSettings, HoldSettings, Mode } from './types.js';

export interface Condition {
  /** The CEL text as written, for explanations. */
  source: string;
  /** Dotted document path of the expression, e.g. `action_classes.1.rules.0.when`. */
  path: string;
  program: Program;
  /** The checked AST, re-estimated when a request is larger than the write-time size bounds. */
  ast: AstNode;
  /** Worst-case cost under the size bounds in force when compiled (cost.ts). */
  cost: number;
  /** Non-null: over budget (a stored version under a lower limit); the condition denies unrun. */
  refusal: string | null;
}

export interface FactorModel {
  name: string;
  weight: number;
  description: string;
  when: Condition;
}

export interface RuleModel {
  id: string;
  /** Null: the rule always matches. */
  when: Condition | null;
  decision: Decision;
  reason: string;
  remediation: { code: string; message: string } | null;
}

export interface ClassModel {
  id: string;
  /** `deploy.production` for an exact pattern, else null. */
  exact: string | null;
  /** `deploy.` for the pattern `deploy.*`, else null. */
  prefix: string | null;
  when: Condition | null;
  anyActor: boolean;
  /** The class's `actors` plus every member of its `actor_groups`. */
  authorized: ReadonlySet<string>;
  mode: Mode;
  permit: { required: boolean; lifetimeSeconds: number; bind: readonly string[] };
  riskBase: number;
  factors: readonly FactorModel[];
  rules: readonly RuleModel[];
  defaultDecision: Decision;
  escalation: Readonly<EscalationSettings>;
  hold: Readonly<HoldSettings>;
}

export interface PolicyModel {
  /** Classes with an exact pattern, by action type, in document order. */
  exact: ReadonlyMap<string, readonly ClassModel[]>;
  /** Classes with a prefix pattern: longest prefix first, document order among equals. */
  prefixed: readonly ClassModel[];
  /** Actor id → names of the actor groups containing it (document order). */
  groupsOf: ReadonlyMap<string, readonly string[]>;
  /** The permit settings reported when no class matched (the document's defaults). */
  fallbackPermit: { required: boolean; lifetimeSeconds: number };
}
