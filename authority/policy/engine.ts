/**
 * The decision engine: one compiled policy + one request's facts → one PolicyDecision. Pure and
 * deterministic: no I/O, no clock (the caller passes `now`), nothing compiled per call.
 *
 * Order of work (each step can end the decision, failing closed):
 *   1. Class: candidates are the exact-pattern classes for the action type (document order),
 *      then prefix classes whose prefix fits (longest prefix first, document order among
 *      equals). The first whose `match.when` is absent or true is the class. None → deny
 *      NO_MATCHING_CLASS.
 *   2. Authority: the actor must be in the class's `actors` (or `"*"`) or in one of its
 *      `actor_groups`. Otherwise deny ACTOR_NOT_AUTHORIZED; no further condition runs.
 *   3. Risk: base + weights of the matching factors, clamped to [0, 1], rounded to 4 decimals.
 *   4. Rules: every rule is evaluated; each match proposes its decision and the strongest wins
 *      (deny > escalate > hold > allow). No match → the class default (DEFAULT_<DECISION>).
 *
 * A condition that fails to evaluate (a missing key read without has(), a division by zero, a
 * type mismatch, a non-boolean result) makes the whole decision deny CONDITION_ERROR: an
 * unevaluable rule might have been the deny rule. The remediation names the failing condition;
 * with `explain`, the trace carries the expression and the error.
 *
 * Budget (cost.ts): a condition whose worst case, re-estimated for this request's
 * largest list and string, is over the limit is not run, and a running condition that spends its
 * budget is stopped; either makes the decision deny CONDITION_BUDGET_EXCEEDED (fail closed, as
 * above), with a message naming the condition and why.
 *
 * @example
 *   const decision = decide(model, {
 *     action_type: 'payments.wire', actor_id: 'finance-bot',
 *     context: { environment: 'production', amount_usd: 500 },
 *     approvals: [], now: new Date(), explain: false,
 *   });
 *   decision.decision; // 'allow'
 */
import { ActionFacts, ActorFacts, ApprovalFacts, celErrorText, NO_APPROVALS, RiskFacts, runCondition } from './cel.js';
import type { ConditionVariables } from './cel.js';
import { estimateCost, measureShape, type SizeBounds } from './cost.js';
import { policyLimits } from './limits.js';
import { BudgetExceededError, metered } from './meter.js';
import type { ClassModel, Condition, PolicyModel, RuleModel } from './model.js';
import { approvalRemedy, budgetRemedy, conditionErrorRemedy, defaultDenyRemedy, noClassRemedy, notAuthorizedRemedy } from './remedies.js';
import type { CheckedApproval, Decision, DecisionInput, PolicyDecision, Remediation, RiskEnvelope, RiskFactor, RuleTrace } from './types.js';

const STRENGTH: Record<Decision, number> = { allow: 0, hold: 1, escalate: 2, deny: 3 };
const DEFAULT_REASON: Record<Decision, string> = {
  allow: 'DEFAULT_ALLOW',
  deny: 'DEFAULT_DENY',
  hold: 'DEFAULT_HOLD',
  escalate: 'DEFAULT_ESCALATE',
};
const NO_GROUPS: readonly string[] = Object.freeze([]);

export function bandOf(score: number): RiskEnvelope['band'] {
  if (score < 0.25) return 'low';
  if (score < 0.5) return 'medium';
  if (score < 0.8) return 'high';
  return 'critical';
}

/** Clamped to [0, 1] first, then rounded, so 0.1 + 0.2 reports 0.3. */
export function riskScore(sum: number): number {
  const clamped = Math.min(1, Math.max(0, sum));
  return Math.round(clamped * 10_000) / 10_000;
}

function approvalFacts(approvals: readonly CheckedApproval[]): ApprovalFacts {
  if (approvals.length === 0) return NO_APPROVALS;
  const approvers: string[] = [];
  for (const approval of approvals) {
    for (const user of approval.approvedBy) if (!approvers.includes(user)) approvers.push(user);
  }
  return new ApprovalFacts(
    BigInt(approvals.length),
    approvals.map((a) => a.id),
    approvers,
    approvals.map((a) => a.kind),
  );
}

/** A condition that threw (CONDITION_ERROR) or was over its budget (CONDITION_BUDGET_EXCEEDED): it decides deny. */
class Failure {
  constructor(
    readonly label: string,
    readonly condition: Condition,
    readonly error: string,
    readonly code: 'CONDITION_ERROR' | 'CONDITION_BUDGET_EXCEEDED' = 'CONDITION_ERROR',
  ) {}
}

/**
 * The runtime meter counts a little differently from the estimate (expanded comprehension nodes,
 * not source nodes), so it gets headroom: it is there to stop what the estimate cannot see, and a
 * policy accepted at write time must not be denied for rounding.
 */
const METER_HEADROOM = 2;

/** Per decision: the request's size, measured once, on the first condition that needs it. */
class Budget {
  private shape: SizeBounds | null = null;
  constructor(private readonly variables: ConditionVariables) {}

  /** Why this request may not run `condition`, or null. */
  refusal(condition: Condition): string | null {
    if (condition.refusal) return condition.refusal;
    const limits = policyLimits();
    const { context, actor, approvals } = this.variables;
    this.shape ??= measureShape([context, actor.groups, approvals.ids, approvals.approvers, approvals.kinds]);
    const { list, string } = this.shape;
    if (list <= limits.maxListItems && string <= limits.maxStringLength && condition.cost <= limits.maxConditionCost) return null;
    // Larger than the write-time assumption: the estimate at the actual sizes decides.
    const cost = estimateCost(condition.ast, { list: Math.max(list, limits.maxListItems), string: Math.max(string, limits.maxStringLength) });
    if (cost <= limits.maxConditionCost) return null;
    return (
      `evaluation budget exceeded: with this request's context (largest list ${list} items, longest string ${string} ` +
      `characters) the condition could cost ${cost} units, over the limit of ${limits.maxConditionCost}`
    );
  }
}

/** Runs one condition; records it in the trace; a thrown error or a spent budget becomes a Failure. */
function evaluate(
  condition: Condition,
  variables: ConditionVariables,
  where: string,
  trace: RuleTrace[] | null,
  decision: Decision | null,
  budget: Budget,
): boolean | Failure {
  let matched: boolean;
  try {
    const refused = budget.refusal(condition);
    if (refused) throw new BudgetExceededError(refused);
    matched = metered(policyLimits().maxConditionCost * METER_HEADROOM, () => runCondition(condition.program, variables));
  } catch (thrown) {
    const overBudget = budgetError(thrown);
    const error = overBudget ?? celErrorText(thrown);
    trace?.push({ rule: where, condition: condition.source, matched: false, decision: null, error });
    return new Failure(where, condition, error, overBudget ? 'CONDITION_BUDGET_EXCEEDED' : 'CONDITION_ERROR');
  }
  trace?.push({ rule: where, condition: condition.source, matched, decision: matched ? decision : null, error: null });
  return matched;
}

const baseRisk = (base: number): RiskEnvelope => {
  const score = riskScore(base);
  return { score, base, factors: [], band: bandOf(score) };
};

interface Outcome {
  decision: Decision;
  reasonCodes: string[];
  matchedRules: string[];
  risk: RiskEnvelope;
  remediation: Remediation[];
}

function assemble(model: PolicyModel, cls: ClassModel | null, outcome: Outcome, trace: RuleTrace[] | null): PolicyDecision {
  return {
    decision: outcome.decision,
    reasonCodes: outcome.reasonCodes,
    actionClass: cls?.id ?? null,
    matchedRules: outcome.matchedRules,
    mode: cls?.mode ?? 'live',
    permit: cls
      ? { required: cls.permit.required, lifetimeSeconds: cls.permit.lifetimeSeconds, bind: [...cls.permit.bind] }
      : { required: model.fallbackPermit.required, lifetimeSeconds: model.fallbackPermit.lifetimeSeconds, bind: [] },
    risk: outcome.risk,
    remediation: outcome.remediation,
    escalation: cls && outcome.decision === 'escalate' ? { ...cls.escalation } : null,
    hold: cls && outcome.decision === 'hold' ? { ...cls.hold } : null,
    explanation: trace,
  };
}

/** The budget message when `thrown` is (or wraps, as cel-js does for function errors) a BudgetExceededError. */
function budgetError(thrown: unknown): string | null {
  for (let error = thrown, depth = 0; error instanceof Error && depth < 5; error = error.cause, depth++) {
    if (error instanceof BudgetExceededError) return error.reason;
  }
  return null;
}

const conditionError = (failure: Failure, risk: RiskEnvelope, matchedRules: string[] = []): Outcome => ({
  decision: 'deny',
  reasonCodes: [failure.code],
  matchedRules,
  risk,
  remediation: [
    failure.code === 'CONDITION_BUDGET_EXCEEDED'
      ? budgetRemedy(failure.condition.path, failure.label, failure.error)
      : conditionErrorRemedy(failure.condition.path, failure.label, failure.error),
  ],
});

function selectClass(
  model: PolicyModel,
  actionType: string,
  variables: ConditionVariables,
  trace: RuleTrace[] | null,
  budget: Budget,
): ClassModel | Failure | null {
  const consider = (cls: ClassModel): boolean | Failure => {
    if (!cls.when) {
      trace?.push({ rule: `class:${cls.id}`, condition: null, matched: true, decision: null, error: null });
      return true;
    }
    return evaluate(cls.when, variables, `class:${cls.id}`, trace, null, budget);
  };
  for (const cls of model.exact.get(actionType) ?? []) {
    const result = consider(cls);
    if (result === true) return cls;
    if (result instanceof Failure) return result;
  }
  for (const cls of model.prefixed) {
    if (!actionType.startsWith(cls.prefix ?? '\u0000')) continue;
    const result = consider(cls);
    if (result === true) return cls;
    if (result instanceof Failure) return result;
  }
  return null;
}

function computeRisk(cls: ClassModel, variables: ConditionVariables, trace: RuleTrace[] | null, budget: Budget): RiskEnvelope | Failure {
  let sum = cls.riskBase;
  let failure: Failure | null = null;
  const matched: RiskFactor[] = [];
  for (const factor of cls.factors) {
    const result = evaluate(factor.when, variables, `risk:${factor.name}`, trace, null, budget);
    if (result === true) {
      sum += factor.weight;
      matched.push({ name: factor.name, weight: factor.weight, description: factor.description });
    } else if (result instanceof Failure) {
      failure ??= result;
    }
  }
  if (failure) return failure;
  const score = riskScore(sum);
  return { score, base: cls.riskBase, factors: matched, band: bandOf(score) };
}

/** Reason codes, most important first: the winning rules', then the others' by strength. */
function reasonsOf(matched: readonly RuleModel[], winner: Decision): string[] {
  const ordered = [...matched].sort((a, b) => {
    const aw = a.decision === winner ? 1 : 0;
    const bw = b.decision === winner ? 1 : 0;
    return bw - aw || STRENGTH[b.decision] - STRENGTH[a.decision];
  });
  return [...new Set(ordered.map((rule) => rule.reason))];
}

function remediationOf(cls: ClassModel, matched: readonly RuleModel[], decision: Decision, byDefault: boolean): Remediation[] {
  const remedies: Remediation[] = [];
  if (decision === 'hold' || decision === 'escalate') remedies.push(approvalRemedy(decision, cls.escalation, cls.hold));
  if (decision === 'deny' && byDefault) remedies.push(defaultDenyRemedy(cls.id));
  for (const rule of matched) {
    if (rule.decision !== decision || !rule.remediation) continue;
    if (remedies.some((r) => r.code === rule.remediation?.code)) continue;
    remedies.push({ code: rule.remediation.code, message: rule.remediation.message });
  }
  return remedies;
}

export function decide(model: PolicyModel, input: DecisionInput): PolicyDecision {
  const trace: RuleTrace[] | null = input.explain ? [] : null;
  const variables: ConditionVariables = {
    action: new ActionFacts(input.action_type),
    actor: new ActorFacts(input.actor_id, model.groupsOf.get(input.actor_id) ?? NO_GROUPS),
    context: input.context,
    approvals: approvalFacts(input.approvals),
    now: input.now,
  };

  const budget = new Budget(variables);
  const selected = selectClass(model, input.action_type, variables, trace, budget);
  if (selected === null || selected instanceof Failure) {
    const risk = baseRisk(0);
    const outcome: Outcome = selected
      ? conditionError(selected, risk)
      : { decision: 'deny', reasonCodes: ['NO_MATCHING_CLASS'], matchedRules: [], risk, remediation: [noClassRemedy(input.action_type)] };
    return assemble(model, null, outcome, trace);
  }
  const cls = selected;

  const authorized = cls.anyActor || cls.authorized.has(input.actor_id);
  trace?.push({ rule: 'authority', condition: null, matched: authorized, decision: authorized ? null : 'deny', error: null });
  if (!authorized) {
    return assemble(
      model,
      cls,
      {
        decision: 'deny',
        reasonCodes: ['ACTOR_NOT_AUTHORIZED'],
        matchedRules: [],
        risk: baseRisk(cls.riskBase),
        remediation: [notAuthorizedRemedy(input.actor_id, cls.id)],
      },
      trace,
    );
  }

  const risk = computeRisk(cls, variables, trace, budget);
  if (risk instanceof Failure) return assemble(model, cls, conditionError(risk, baseRisk(cls.riskBase)), trace);
  variables.risk = new RiskFacts(
    risk.score,
    risk.band,
    risk.factors.map((f) => f.name),
  );

  const matched: RuleModel[] = [];
  let failure: Failure | null = null;
  for (const rule of cls.rules) {
    const result = rule.when ? evaluate(rule.when, variables, `rule:${rule.id}`, trace, rule.decision, budget) : true;
    if (!rule.when) trace?.push({ rule: `rule:${rule.id}`, condition: null, matched: true, decision: rule.decision, error: null });
    if (result === true) matched.push(rule);
    else if (result instanceof Failure) failure ??= result;
  }
  const matchedRules = matched.map((rule) => rule.id);
  if (failure) return assemble(model, cls, conditionError(failure, risk, matchedRules), trace);

  if (matched.length === 0) {
    const decision = cls.defaultDecision;
    trace?.push({ rule: 'default', condition: null, matched: true, decision, error: null });
    return assemble(
      model,
      cls,
      { decision, reasonCodes: [DEFAULT_REASON[decision]], matchedRules, risk, remediation: remediationOf(cls, matched, decision, true) },
      trace,
    );
  }
  let decision: Decision = 'allow';
  for (const rule of matched) if (STRENGTH[rule.decision] > STRENGTH[decision]) decision = rule.decision;
  return assemble(
    model,
    cls,
    { decision, reasonCodes: reasonsOf(matched, decision), matchedRules, risk, remediation: remediationOf(cls, matched, decision, false) },
    trace,
  );
}
