/**
 * The policy engine's contract: a compiled, versioned policy document decides one action.
 * The engine is pure (no I/O, no clock of its own): the caller supplies the facts, including
 * approvals it has already checked, and records the decision.
 */

export type Decision = 'allow' | 'deny' | 'hold' | 'escalate';
export type Mode = 'live' | 'shadow';
export type Quorum = 'single_approver' | 'simple_majority' | 'two_thirds' | 'unanimous';

/** An approval the caller has verified (approved, unexpired, same org, same binding, unused). */
export interface CheckedApproval {
  id: string;
  kind: 'approval' | 'escalation';
  /** Who approved: user ids. */
  approvedBy: string[];
}

export interface DecisionInput {
  action_type: string;
  actor_id: string;
  /** The request's context: environment, target {type,id}, amount_usd, account_code, approvals, and any action-specific keys. */
  context: Record<string, unknown>;
  approvals: CheckedApproval[];
  /** The evaluation instant, for time-based conditions (change windows). */
  now: Date;
  explain: boolean;
}

export interface RiskFactor {
  name: string;
  weight: number;
  description: string;
}

export interface RiskEnvelope {
  /** base + matched factors, clamped to [0, 1], rounded to 4 decimals. */
  score: number;
  base: number;
  factors: RiskFactor[];
  band: 'low' | 'medium' | 'high' | 'critical';
}

export interface Remediation {
  /** Stable: APPROVAL_REQUIRED, REDUCE_AMOUNT, USE_CHANGE_WINDOW, REQUEST_AUTHORITY, … */
  code: string;
  message: string;
}

export interface RuleTrace {
  rule: string;
  condition: string | null;
  matched: boolean;
  decision: Decision | null;
  error: string | null;
}

export interface EscalationSettings {
  quorum: Quorum;
  approverPoolSize: number | null;
  minApprovers: number | null;
  timeoutMs: number;
  fallbackDecision: 'approve' | 'reject';
}

export interface HoldSettings {
  timeoutMs: number;
}

export interface PolicyDecision {
  decision: Decision;
  /**
   * Stable codes, most important first. Fail-closed codes: NO_MATCHING_CLASS,
   * ACTOR_NOT_AUTHORIZED, CONDITION_ERROR, CONDITION_BUDGET_EXCEEDED. Otherwise the matched rules' reason codes (e.g.
   * AMOUNT_OVER_HOLD_THRESHOLD) or DEFAULT_ALLOW / DEFAULT_DENY for a class's default.
   */
  reasonCodes: string[];
  actionClass: string | null;
  matchedRules: string[];
  mode: Mode;
  permit: {
    required: boolean;
    /** 1–300 s; 60 by default. */
    lifetimeSeconds: number;
    /** Extra context keys bound into the permit besides the standard facts. */
    bind: string[];
  };
  risk: RiskEnvelope;
  /** Present on deny (and on hold/escalate): what would make the request acceptable. */
  remediation: Remediation[];
  /** Set when decision is escalate. */
  escalation: EscalationSettings | null;
  /** Set when decision is hold. */
  hold: HoldSettings | null;
  /** Only when input.explain: every class and rule considered, in order. */
  explanation: RuleTrace[] | null;
}

export interface PolicyError {
  /** Dotted path in the document, e.g. `action_classes.2.rules.0.when`. */
  path: string;
  message: string;
  /** 1-based position in the source text, when known. */
  line: number | null;
  column: number | null;
}

/** What a policy names, for the searches that enumerate candidates (AuthZEN subject and action search). */
export interface PolicyVocabulary {
  /** The action types of exact-pattern classes, in document order, without repeats. */
  exactActionTypes: readonly string[];
  /** Every actor a class or actor group names (`*` aside), in document order, without repeats. */
  actors: readonly string[];
}

export interface CompiledPolicy {
  /** The document as parsed (what GET /v1/policies returns). */
  document: unknown;
  vocabulary: PolicyVocabulary;
  decide(input: DecisionInput): PolicyDecision;
}

export type CompileResult = { ok: true; policy: CompiledPolicy } | { ok: false; errors: PolicyError[] };
