/**
 * Policy text or value → CompiledPolicy, or every error found, each with its document path and
 * (for text) its line and column. Three passes, all reported together: parse (YAML/JSON), the
 * schema (schema.ts), and every CEL expression compiled and type-checked once. Nothing is
 * compiled again when `decide` runs.
 *
 * Class matching order (see engine.ts): an exact `match.action_type` beats a prefix pattern; among
 * prefix patterns the longest wins; among equals, document order. A class whose `match.when` is
 * false hands the request to the next candidate.
 *
 * @example
 *   const result = compilePolicy(readFileSync('config/policies/default.yaml', 'utf8'));
 *   if (!result.ok) for (const e of result.errors) console.error(`${e.line}:${e.column} ${e.path}: ${e.message}`);
 *   else result.policy.decide({ action_type: 'demo.echo', actor_id: 'demo-agent', context: {}, approvals: [], now: new Date(), explain: false });
 */
import type { z } from 'zod';
import { compileCondition, PRE_RISK_ENV, RULE_ENV } from './cel.js';
import { decide } from './engine.js';
import type { ClassModel, Condition, PolicyModel } from './model.js';
import { BUILTIN_DEFAULTS, EscalationSchema, HoldSchema, PolicyDocumentSchema } from './schema.js';
import type { ActionClassDocument, EscalationDocument, PolicyDocument } from './schema.js';
import { formatPath, noPositions, parseSource } from './source.js';
import type { ParsedSource, Path } from './source.js';
import type { CompileResult, EscalationSettings, HoldSettings, PolicyError, PolicyVocabulary } from './types.js';

const isRecord = (value: unknown): value is Record<string, unknown> =>
  typeof value === 'object' && value !== null && !Array.isArray(value);

function valueAt(root: unknown, path: ReadonlyArray<PropertyKey>): unknown {
  let value = root;
  for (const segment of path) {
    if (Array.isArray(value) && typeof segment === 'number') value = value[segment];
    else if (isRecord(value) && typeof segment === 'string' && Object.hasOwn(value, segment)) value = value[segment];
    else return undefined;
  }
  return value;
}

const toPath = (path: ReadonlyArray<PropertyKey>): Array<string | number> =>
  path.map((segment) => (typeof segment === 'number' ? segment : String(segment)));

function schemaErrors(issues: readonly z.core.$ZodIssue[], parsed: ParsedSource): PolicyError[] {
  const errors: PolicyError[] = [];
  for (const issue of issues) {
    if (issue.code === 'unrecognized_keys') {
      for (const key of issue.keys) {
        const path = [...toPath(issue.path), key];
        const at = parsed.locate(path, 'key');
        errors.push({ path: formatPath(path), message: `unknown key "${key}"`, line: at?.line ?? null, column: at?.column ?? null });
      }
      continue;
    }
    const path = toPath(issue.path);
    const shapeIssue = issue.code === 'invalid_type' || issue.code === 'invalid_value' || issue.code === 'invalid_union';
    const missing = shapeIssue && path.length > 0 && valueAt(parsed.value, path) === undefined;
    const notADocument = shapeIssue && path.length === 0;
    const at = parsed.locate(path, 'value');
    errors.push({
      path: formatPath(path),
      message: missing
        ? `missing required key "${String(path[path.length - 1])}"`
        : notADocument
          ? 'a policy document is a mapping with at least version and action_classes'
          : issue.message,
      line: at?.line ?? null,
      column: at?.column ?? null,
    });
  }
  return errors;
}

/** Every CEL expression in the raw document, whatever else is wrong with it, and its environment. */
function expressionsOf(document: unknown): Array<{ path: Path; source: string; rule: boolean }> {
  const found: Array<{ path: Path; source: string; rule: boolean }> = [];
  const classes = valueAt(document, ['action_classes']);
  if (!Array.isArray(classes)) return found;
  classes.forEach((_, c) => {
    const add = (path: Path, rule: boolean) => {
      const source = valueAt(document, path);
      if (typeof source === 'string' && source.trim() !== '') found.push({ path, source, rule });
    };
    add(['action_classes', c, 'match', 'when'], false);
    const factors = valueAt(document, ['action_classes', c, 'risk', 'factors']);
    if (Array.isArray(factors)) factors.forEach((__, f) => add(['action_classes', c, 'risk', 'factors', f, 'when'], false));
    const rules = valueAt(document, ['action_classes', c, 'rules']);
    if (Array.isArray(rules)) rules.forEach((__, r) => add(['action_classes', c, 'rules', r, 'when'], true));
  });
  return found;
}

type Compiled = Omit<Condition, 'source' | 'path'>;

function compileExpressions(parsed: ParsedSource, errors: PolicyError[], enforce: boolean): Map<string, Compiled> {
  const programs = new Map<string, Compiled>();
  for (const { path, source, rule } of expressionsOf(parsed.value)) {
    const compiled = compileCondition(source, rule ? RULE_ENV : PRE_RISK_ENV, enforce);
    if (compiled.ok) {
      programs.set(formatPath(path), { program: compiled.program, ast: compiled.ast, cost: compiled.cost, refusal: compiled.refusal });
      continue;
    }
    const at = parsed.locateInString(path, compiled.offset);
    errors.push({
      path: formatPath(path),
      message: `${compiled.message} (at character ${compiled.offset + 1} of the expression)`,
      line: at?.line ?? null,
      column: at?.column ?? null,
    });
  }
  return programs;
}

const escalationSettings = (escalation: EscalationDocument): EscalationSettings => ({
  quorum: escalation.quorum,
  approverPoolSize: escalation.approver_pool_size ?? null,
  minApprovers: escalation.min_approvers ?? null,
  timeoutMs: escalation.timeout_seconds * 1000,
  fallbackDecision: escalation.fallback,
});

function buildClass(doc: PolicyDocument, cls: ActionClassDocument, index: number, programs: Map<string, Compiled>): ClassModel {
  const defaults = doc.defaults ?? {};
  const condition = (path: Path, source: string | undefined): Condition | null => {
    if (source === undefined) return null;
    const key = formatPath(path);
    const compiled = programs.get(key);
    // compileExpressions saw the same document; a gap here is a bug, not a policy error.
    if (!compiled) throw new Error(`policy compiler: no program for ${key}`);
    return { source, path: key, ...compiled };
  };
  const at = ['action_classes', index] as const;
  const pattern = cls.match.action_type;
  const authorized = new Set(cls.actors.filter((actor) => actor !== '*'));
  for (const group of cls.actor_groups) for (const member of doc.actor_groups[group] ?? []) authorized.add(member);
  const hold: HoldSettings = { timeoutMs: (cls.hold ?? defaults.hold ?? HoldSchema.parse({})).timeout_seconds * 1000 };
  return {
    id: cls.id,
    exact: pattern.endsWith('.*') ? null : pattern,
    prefix: pattern.endsWith('.*') ? pattern.slice(0, -1) : null,
    when: condition([...at, 'match', 'when'], cls.match.when),
    anyActor: cls.actors.includes('*'),
    authorized,
    mode: cls.mode ?? defaults.mode ?? BUILTIN_DEFAULTS.mode,
    permit: {
      required: cls.permit?.required ?? defaults.permit?.required ?? BUILTIN_DEFAULTS.permit.required,
      lifetimeSeconds: cls.permit?.lifetime_seconds ?? defaults.permit?.lifetime_seconds ?? BUILTIN_DEFAULTS.permit.lifetime_seconds,
      bind: Object.freeze([...cls.bind]),
    },
    riskBase: cls.risk?.base ?? 0,
    factors: (cls.risk?.factors ?? []).map((factor, f) => ({
      name: factor.name,
      weight: factor.weight,
      description: factor.description,
      when: condition([...at, 'risk', 'factors', f, 'when'], factor.when) as Condition,
    })),
    rules: cls.rules.map((rule, r) => ({
      id: rule.id,
      when: condition([...at, 'rules', r, 'when'], rule.when),
      decision: rule.decision,
      reason: rule.reason,
      remediation: rule.remediation ? { code: rule.remediation.code, message: rule.remediation.message } : null,
    })),
    defaultDecision: cls.default ?? defaults.decision ?? BUILTIN_DEFAULTS.decision,
    escalation: escalationSettings(cls.escalation ?? defaults.escalation ?? EscalationSchema.parse({})),
    hold,
  };
}

function vocabularyOf(doc: PolicyDocument): PolicyVocabulary {
  const exact = doc.action_classes.map((cls) => cls.match.action_type).filter((pattern) => !pattern.endsWith('.*'));
  const actors = [...doc.action_classes.flatMap((cls) => cls.actors), ...Object.values(doc.actor_groups).flat()].filter((actor) => actor !== '*');
  return Object.freeze({ exactActionTypes: Object.freeze([...new Set(exact)]), actors: Object.freeze([...new Set(actors)]) });
}

function buildModel(doc: PolicyDocument, programs: Map<string, Compiled>): PolicyModel {
  const groupsOf = new Map<string, string[]>();
  for (const [group, members] of Object.entries(doc.actor_groups)) {
    for (const member of members) groupsOf.set(member, [...(groupsOf.get(member) ?? []), group]);
  }
  const classes = doc.action_classes.map((cls, index) => buildClass(doc, cls, index, programs));
  const exact = new Map<string, ClassModel[]>();
  for (const cls of classes) if (cls.exact !== null) exact.set(cls.exact, [...(exact.get(cls.exact) ?? []), cls]);
  // Array.prototype.sort is stable, so document order survives among prefixes of equal length.
  const prefixed = classes.filter((cls) => cls.prefix !== null).sort((a, b) => (b.prefix?.length ?? 0) - (a.prefix?.length ?? 0));
  return {
    exact,
    prefixed,
    groupsOf: new Map([...groupsOf].map(([member, groups]) => [member, Object.freeze(groups)])),
    fallbackPermit: {
      required: doc.defaults?.permit?.required ?? BUILTIN_DEFAULTS.permit.required,
      lifetimeSeconds: doc.defaults?.permit?.lifetime_seconds ?? BUILTIN_DEFAULTS.permit.lifetime_seconds,
    },
  };
}

const byPosition = (a: PolicyError, b: PolicyError): number =>
  (a.line ?? Number.MAX_SAFE_INTEGER) - (b.line ?? Number.MAX_SAFE_INTEGER) || (a.column ?? 0) - (b.column ?? 0);

export interface CompileOptions {
  /**
   * 'write' (default): a policy being written or validated; its text is held to the API's input
   * rules (source.ts), and unsupported regular expressions and conditions over the cost limit are
   * errors. 'stored': a version already accepted, loaded to decide; it is read as it was accepted,
   * and those conditions deny when reached instead of failing the load (cel.ts).
   */
  purpose?: 'write' | 'stored';
}

function compileParsed(parsed: ParsedSource, options: CompileOptions): CompileResult {
  const errors: PolicyError[] = [];
  const checked = PolicyDocumentSchema.safeParse(parsed.value);
  if (!checked.success) errors.push(...schemaErrors(checked.error.issues, parsed));
  const programs = compileExpressions(parsed, errors, options.purpose !== 'stored');
  if (!checked.success || errors.length > 0) return { ok: false, errors: errors.sort(byPosition) };
  const model = buildModel(checked.data, programs);
  return { ok: true, policy: { document: parsed.value, vocabulary: vocabularyOf(checked.data), decide: (input) => decide(model, input) } };
}

/** Compiles policy text. `format` defaults to YAML, which also reads JSON; 'json' is strict JSON. */
export function compilePolicy(source: string, format: 'yaml' | 'json' = 'yaml', options: CompileOptions = {}): CompileResult {
  const parsed = parseSource(source, format, { purpose: options.purpose ?? 'write' });
  if (parsed.errors.length > 0) return { ok: false, errors: parsed.errors };
  return compileParsed(parsed, options);
}

/** Compiles an already-parsed document (a JSON request body, say); errors carry no line/column. */
export function compilePolicyDocument(document: unknown, options: CompileOptions = {}): CompileResult {
  return compileParsed(noPositions(document), options);
}
