/**
 * Runs policy test suites: every case decided by the suite's compiled policy (decideAsEvaluate,
 * the evaluate path's decision), compared with what the case expects. Returns structured results;
 * report.ts turns them into text, JSON or JUnit XML.
 *
 * @example
 *   const results = runSuites([await loadTestSuite('config/policies/default.tests.yaml')]);
 *   results.failed; // 0
 */
import { performance } from 'node:perf_hooks';
import type { Decision, PolicyDecision } from '../types.js';
import { decideAsEvaluate } from '../../evaluate/decide.js';
import type { Expectation, TestCase, TestSuite } from './suite.js';

export interface ActualOutcome {
  decision: Decision;
  reasons: string[];
  action_class: string | null;
  matched_rules: string[];
  risk: { score: number; band: PolicyDecision['risk']['band']; factors: string[] };
}

export interface CaseResult {
  name: string;
  index: number;
  line: number | null;
  passed: boolean;
  /** One line per unmet expectation: `decision: expected hold, got allow`. */
  failures: string[];
  expected: Expectation;
  actual: ActualOutcome;
  /** Seconds, for JUnit. */
  time: number;
}

export interface SuiteResult {
  file: string;
  policyFile: string;
  cases: CaseResult[];
  passed: number;
  failed: number;
  time: number;
}

export interface RunResults {
  suites: SuiteResult[];
  passed: number;
  failed: number;
}

const list = (codes: readonly string[]): string => `[${codes.join(', ')}]`;

/** Every unmet expectation of `expect` by `actual`, as readable lines; empty when it passes. */
export function compareOutcome(expect: Expectation, actual: ActualOutcome): string[] {
  const failures: string[] = [];
  if (actual.decision !== expect.decision) failures.push(`decision: expected ${expect.decision}, got ${actual.decision}`);
  if (expect.reasons) {
    const missing = expect.reasons.filter((code) => !actual.reasons.includes(code));
    if (missing.length > 0) failures.push(`reasons: expected to include ${list(missing)}, got ${list(actual.reasons)}`);
  }
  if (expect.reasons_exactly) {
    const same = expect.reasons_exactly.length === actual.reasons.length && expect.reasons_exactly.every((code, i) => actual.reasons[i] === code);
    if (!same) failures.push(`reasons: expected exactly ${list(expect.reasons_exactly)}, got ${list(actual.reasons)}`);
  }
  if (expect.action_class !== undefined && expect.action_class !== actual.action_class) {
    failures.push(`action_class: expected ${expect.action_class ?? 'none'}, got ${actual.action_class ?? 'none'}`);
  }
  const risk = expect.risk;
  if (risk?.min !== undefined && actual.risk.score < risk.min) failures.push(`risk: expected at least ${risk.min}, got ${actual.risk.score}`);
  if (risk?.max !== undefined && actual.risk.score > risk.max) failures.push(`risk: expected at most ${risk.max}, got ${actual.risk.score}`);
  if (risk?.band !== undefined && actual.risk.band !== risk.band) failures.push(`risk band: expected ${risk.band}, got ${actual.risk.band}`);
  return failures;
}

function outcomeOf(decided: PolicyDecision): ActualOutcome {
  return {
    decision: decided.decision,
    reasons: decided.reasonCodes,
    action_class: decided.actionClass,
    matched_rules: decided.matchedRules,
    risk: { score: decided.risk.score, band: decided.risk.band, factors: decided.risk.factors.map((factor) => factor.name) },
  };
}

export function runCase(suite: TestSuite, testCase: TestCase, clock: () => Date = () => new Date()): CaseResult {
  const started = performance.now();
  const decided = decideAsEvaluate(suite.policy, testCase.request, {
    accepted: testCase.approvals,
    // Offline, every approval the case lists is one the authority accepted.
    statuses: testCase.approvals.map((approval) => ({ id: approval.id, accepted: true, reason: null })),
    now: testCase.now ?? clock(),
  });
  const actual = outcomeOf(decided);
  const failures = compareOutcome(testCase.expect, actual);
  return {
    name: testCase.name,
    index: testCase.index,
    line: testCase.line,
    passed: failures.length === 0,
    failures,
    expected: testCase.expect,
    actual,
    time: (performance.now() - started) / 1000,
  };
}

export function runSuite(suite: TestSuite, clock?: () => Date): SuiteResult {
  const cases = suite.cases.map((testCase) => runCase(suite, testCase, clock));
  const passed = cases.filter((result) => result.passed).length;
  return {
    file: suite.file,
    policyFile: suite.policyFile,
    cases,
    passed,
    failed: cases.length - passed,
    time: cases.reduce((sum, result) => sum + result.time, 0),
  };
}

export function runSuites(suites: readonly TestSuite[], clock?: () => Date): RunResults {
  const results = suites.map((suite) => runSuite(suite, clock));
  return {
    suites: results,
    passed: results.reduce((sum, suite) => sum + suite.passed, 0),
    failed: results.reduce((sum, suite) => sum + suite.failed, 0),
  };
}
