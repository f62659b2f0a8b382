/**
 * A policy test file (`*.tests.yaml`, written beside the policy it tests) → a checked suite: the
 * policy compiled with the same compiler `PUT /v1/policies` uses, and every case's input checked
 * with the same schema as a `POST /v1/evaluate` body. A file that is not a valid suite, or whose
 * policy does not compile, is a `PolicyTestFileError` listing every problem with its path in the
 * file and, when known, its line and column: the caller's mistake, not a failing test.
 *
 * Policy tests decide the policy alone, offline: no database, so facts that the authority would
 * look up are written into the case (`approvals`: the approvals it would have accepted) and the
 * clock is fixed (`now`) so change windows decide the same way on every run.
 *
 * @example
 *   const suite = await loadTestSuite('config/policies/default.tests.yaml');
 *   suite.cases.length;          // 10
 *   suite.policy.decide({ ... }); // the compiled policy named by the file's `policy:`
 */
import { readFile } from 'node:fs/promises';
import { dirname, extname, isAbsolute, join } from 'node:path';
import { z } from 'zod';
import { parseEvaluateRequest, type EvaluateWireRequest } from '../../../shared/wire/evaluate.js';
import { compilePolicy } from '../compile.js';
import { formatPath, parseSource, type ParsedSource } from '../source.js';
import type { CheckedApproval, CompiledPolicy } from '../types.js';

/** An ISO 8601 instant; YAML timestamps (read as Date by some schemas) are accepted too. */
const Instant = z.union([
  z.iso.datetime({ offset: true, message: 'an ISO 8601 timestamp such as 2026-01-05T10:00:00Z' }),
  z.date().transform((date) => date.toISOString()),
]);

const Approval = z
  .object({
    id: z.string().min(1).optional(),
    kind: z.enum(['approval', 'escalation']).default('approval'),
    approved_by: z.array(z.string().min(1)).default([]),
  })
  .strict();

const Expectation = z
  .object({
    decision: z.enum(['allow', 'deny', 'hold', 'escalate']),
    /** These reason codes must all be present (others may be too). */
    reasons: z.array(z.string().min(1)).optional(),
    /** Exactly these reason codes, in this order (most important first). */
    reasons_exactly: z.array(z.string().min(1)).optional(),
    /** The action class that governs the request; null: no class matched. */
    action_class: z.string().min(1).nullable().optional(),
    /** Bounds on the risk score (0 to 1), inclusive. */
    risk: z
      .object({
        min: z.number().min(0).max(1).optional(),
        max: z.number().min(0).max(1).optional(),
        band: z.enum(['low', 'medium', 'high', 'critical']).optional(),
      })
      .strict()
      .refine((risk) => risk.min === undefined || risk.max === undefined || risk.min <= risk.max, { message: 'risk.min is above risk.max' })
      .optional(),
  })
  .strict()
  .refine((expect) => expect.reasons === undefined || expect.reasons_exactly === undefined, {
    message: 'give either reasons (a subset) or reasons_exactly, not both',
  });

const Case = z
  .object({
    name: z.string().min(1),
    /** A POST /v1/evaluate body (wire or agent form); checked with the same schema. */
    input: z.record(z.string(), z.unknown()),
    /** The approvals the authority would have accepted for this request (looked up in the database otherwise). */
    approvals: z.array(Approval).default([]),
    now: Instant.optional(),
    expect: Expectation,
  })
  .strict();

const SuiteFile = z
  .object({
    /** The policy file, relative to the tests file. */
    policy: z.string().min(1),
    description: z.string().optional(),
    now: Instant.optional(),
    cases: z.array(Case).min(1, { message: 'a test file needs at least one case' }),
  })
  .strict();

export type Expectation = z.infer<typeof Expectation>;

export interface TestCase {
  name: string;
  /** Index in the file's `cases`, for locating it. */
  index: number;
  /** 1-based line of the case in the file, when known. */
  line: number | null;
  request: EvaluateWireRequest;
  approvals: CheckedApproval[];
  /** Null: the clock at run time. */
  now: Date | null;
  expect: Expectation;
}

export interface TestSuite {
  /** The tests file, as given. */
  file: string;
  /** The policy file, resolved against the tests file's folder. */
  policyFile: string;
  description: string | null;
  policy: CompiledPolicy;
  cases: TestCase[];
}

export interface SuiteProblem {
  /** Dotted path in the tests file (`cases.2.expect.decision`), or in the policy for a compile error. */
  path: string;
  message: string;
  line: number | null;
  column: number | null;
}

/** The tests file cannot be run: unreadable, not a valid suite, or its policy does not compile. */
export class PolicyTestFileError extends Error {
  readonly code = 'POLICY_TEST_FILE_INVALID';
  constructor(
    readonly file: string,
    readonly problems: SuiteProblem[],
    readonly summary: string,
  ) {
    super(`${summary}\n${problems.map((p) => `  ${describeProblem(file, p)}`).join('\n')}`);
  }
}

function describeProblem(file: string, problem: SuiteProblem): string {
  const where = problem.line !== null ? `${file}:${problem.line}${problem.column !== null ? `:${problem.column}` : ''}` : file;
  return `${where} ${problem.path ? `${problem.path}: ` : ''}${problem.message}`;
}

function valueAt(root: unknown, path: ReadonlyArray<string | number>): unknown {
  let value = root;
  for (const segment of path) {
    if (typeof value !== 'object' || value === null || !Object.hasOwn(value, segment)) return undefined;
    value = (value as Record<string | number, unknown>)[segment];
  }
  return value;
}

/** zod says "expected string, received undefined"; a person reads "missing required key". */
const isMissing = (issue: z.core.$ZodIssue, root: unknown, path: ReadonlyArray<string | number>): boolean =>
  (issue.code === 'invalid_type' || issue.code === 'invalid_value' || issue.code === 'invalid_union') && path.length > 0 && valueAt(root, path) === undefined;

function issuesToProblems(issues: readonly z.core.$ZodIssue[], parsed: ParsedSource, prefix: ReadonlyArray<string | number> = []): SuiteProblem[] {
  return issues.flatMap((issue) => {
    const base = [...prefix, ...issue.path.map((segment) => (typeof segment === 'number' ? segment : String(segment)))];
    const keys = issue.code === 'unrecognized_keys' ? issue.keys : [null];
    return keys.map((key) => {
      const path = key === null ? base : [...base, key];
      const at = parsed.locate(path, key === null ? 'value' : 'key');
      return {
        path: formatPath(path),
        message: key !== null ? `unknown key "${key}"` : isMissing(issue, parsed.value, path) ? `missing required key "${String(path.at(-1))}"` : issue.message,
        line: at?.line ?? null,
        column: at?.column ?? null,
      };
    });
  });
}

function toApproval(approval: z.infer<typeof Approval>, index: number): CheckedApproval {
  return { id: approval.id ?? `test-approval-${index + 1}`, kind: approval.kind, approvedBy: approval.approved_by };
}

/** Parses and checks a tests file's text; `file` names it in errors and anchors the policy path. */
export async function parseTestSuite(file: string, text: string): Promise<TestSuite> {
  const parsed = parseSource(text, extname(file) === '.json' ? 'json' : 'yaml');
  if (parsed.errors.length > 0) throw new PolicyTestFileError(file, parsed.errors, `${file} cannot be parsed`);
  const checked = SuiteFile.safeParse(parsed.value);
  if (!checked.success) throw new PolicyTestFileError(file, issuesToProblems(checked.error.issues, parsed), `${file} is not a valid policy test file`);

  const problems: SuiteProblem[] = [];
  const cases: TestCase[] = [];
  checked.data.cases.forEach((entry, index) => {
    const request = parseEvaluateRequest(entry.input);
    if (!request.success) {
      problems.push(...issuesToProblems(request.error.issues, parsed, ['cases', index, 'input']));
      return;
    }
    cases.push({
      name: entry.name,
      index,
      line: parsed.locate(['cases', index], 'value')?.line ?? null,
      request: request.data,
      approvals: entry.approvals.map(toApproval),
      now: entry.now ? new Date(entry.now) : checked.data.now ? new Date(checked.data.now) : null,
      expect: entry.expect,
    });
  });
  const names = new Map<string, number>();
  checked.data.cases.forEach((entry, index) => {
    const first = names.get(entry.name);
    if (first === undefined) names.set(entry.name, index);
    else {
      const at = parsed.locate(['cases', index, 'name'], 'value');
      problems.push({ path: `cases.${index}.name`, message: `the same name as cases.${first}`, line: at?.line ?? null, column: at?.column ?? null });
    }
  });
  if (problems.length > 0) throw new PolicyTestFileError(file, problems, `${file} is not a valid policy test file`);

  // Relative to the tests file, and spelled relative to where the command runs when that is how
  // the tests file was named: reports then show paths a reader can open.
  const policyFile = isAbsolute(checked.data.policy) ? checked.data.policy : join(dirname(file), checked.data.policy);
  const policy = await compilePolicyFile(policyFile);
  return { file, policyFile, description: checked.data.description ?? null, policy, cases };
}

/** Reads and checks one tests file. */
export async function loadTestSuite(file: string): Promise<TestSuite> {
  let text: string;
  try {
    text = await readFile(file, 'utf8');
  } catch (error) {
    throw new PolicyTestFileError(file, [], `cannot read ${file}: ${(error as Error).message}`);
  }
  return parseTestSuite(file, text);
}

/**
 * Compiles a policy file as `PUT /v1/policies` would (YAML, or strict JSON for `.json`); a policy
 * that would be refused there is a PolicyTestFileError with every compile error and its position.
 */
export async function compilePolicyFile(policyFile: string): Promise<CompiledPolicy> {
  let source: string;
  try {
    source = await readFile(policyFile, 'utf8');
  } catch (error) {
    throw new PolicyTestFileError(policyFile, [], `cannot read the policy ${policyFile}: ${(error as Error).message}`);
  }
  const compiled = compilePolicy(source, extname(policyFile) === '.json' ? 'json' : 'yaml');
  if (!compiled.ok) throw new PolicyTestFileError(policyFile, compiled.errors, `the policy ${policyFile} does not compile`);
  return compiled.policy;
}

