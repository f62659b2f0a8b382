/**
 * CEL `matches` on a linear-time engine with RE2 semantics: re2js, a pure-JS port of
 * RE2/J. The JavaScript RegExp that cel-js uses backtracks, so `^(a+)+$` on 30 characters takes
 * seconds; re2js takes microseconds (numbers and the choice against re2-wasm and the native `re2`
 * binding: docs/policies.md, test/bench/regex-engines.mjs).
 *
 * cel-js refuses a second `string.matches(string)` overload, so each parsed condition has its
 * `matches` calls renamed to MATCHES_RE2 (registered in cel.ts) before it is type-checked: the
 * built-in never runs. Literal patterns are compiled when the policy is written, so syntax RE2
 * does not have (backreferences, lookaround) is refused then, with the condition's path; a
 * pattern computed at evaluation is compiled then, and an unsupported one fails the condition.
 */
import { LRUCache } from 'lru-cache';
import { RE2JS } from 're2js';
import { visitAst, type AstNode } from './cel-ast.js';
import { charge } from './meter.js';

/** The internal name `matches` calls are renamed to; error texts map it back (cel.ts). */
export const MATCHES_RE2 = 'matches_re2';

const compiled = new LRUCache<string, RE2JS>({ max: 2_000 });

/** Thrown for a pattern RE2 cannot run; the message says why. */
export class RegexNotSupportedError extends Error {}

export function compileRegex(pattern: string): RE2JS {
  const cached = compiled.get(pattern);
  if (cached) return cached;
  let regex: RE2JS;
  try {
    regex = RE2JS.compile(pattern);
  } catch (error) {
    const why = error instanceof Error ? error.message : String(error);
    throw new RegexNotSupportedError(
      `regular expression ${JSON.stringify(pattern)} is not supported: ${why} (conditions use RE2 syntax, ` +
        'which has no backreferences or lookaround, so that matching stays linear in the input)',
    );
  }
  compiled.set(pattern, regex);
  return regex;
}

/**
 * Characters × pattern length per cost unit. RE2's worst case is input × pattern steps, and one
 * such step (about 1 ns in re2js, test/bench/regex-engines.mjs) is some 30–100 times cheaper than
 * the unit (one interpreted CEL node), so charging a unit per step would refuse ordinary policies
 * (`tags.exists(t, t.matches('^prod-'))`) while buying no safety.
 */
const STEPS_PER_UNIT = 32;

/** Work charged for matching `input` against `pattern`, in cost units. */
export const regexCost = (inputLength: number, patternLength: number): number =>
  1 + Math.ceil((inputLength * Math.max(1, patternLength)) / STEPS_PER_UNIT);

/** The MATCHES_RE2 function: CEL `matches` is a search (any part of the input), as RE2's test. */
export function matchesRe2(input: string, pattern: string): boolean {
  // A pattern computed at evaluation costs its compilation too (cached ones are free, but cheap to over-charge).
  charge(regexCost(input.length, pattern.length) + regexCost(pattern.length, 1), 'regular expression');
  return compileRegex(pattern).test(input);
}

export interface RegexProblem {
  message: string;
  /** Offset of the pattern in the expression. */
  offset: number;
}

/**
 * Renames every `x.matches(p)` in a parsed (not yet checked) condition to MATCHES_RE2 and compiles
 * each literal pattern; returns the first pattern RE2 refuses, or null.
 */
export function prepareRegexes(root: AstNode): RegexProblem | null {
  let problem: RegexProblem | null = null;
  visitAst(root, (node) => {
    if (node.op !== 'rcall') return;
    const args = node.args as unknown as [string, AstNode, AstNode[]];
    if (args[0] !== 'matches') return;
    args[0] = MATCHES_RE2;
    const pattern = args[2][0];
    if (problem || args[2].length !== 1 || !pattern || pattern.op !== 'value' || typeof pattern.args !== 'string') return;
    try {
      compileRegex(pattern.args);
    } catch (error) {
      problem = { message: error instanceof Error ? error.message : String(error), offset: pattern.start };
    }
  });
  return problem;
}
