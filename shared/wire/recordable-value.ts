/**
 * Values that can be recorded, canonicalized, exported and proved later: JSON values (text,
 * finite numbers, booleans, null, lists and mappings) nested at most `maxDepth` levels, whose
 * text, keys included, is recordable (recordable-text.ts). The API applies this to every request
 * (authority/http/bounded-input.ts) and the policy compiler to every policy document once its
 * YAML or JSON is parsed, since escapes such as `"\uDE00"` or `"\0"` produce NUL and lone
 * surrogates only then. Anything else a parser can produce (a YAML `!!binary` buffer, a
 * `!!timestamp` date, a `!!set`) is refused too.
 *
 * The walk builds no path until it finds a problem: it runs on every request body.
 *
 * @example
 *   valueProblem({ a: [1, 'x\u0000'] }, 32); // { path: ['a', 1], message: 'text must not contain NUL', inKey: false }
 *   valueProblem({ a: 1e999 }, 32);          // { path: ['a'], message: 'numbers must be finite', inKey: false }
 */
import { textProblem } from './recordable-text.js';

export const DEFAULT_MAX_JSON_DEPTH = 32;

export interface ValueProblem {
  /** Keys and list indexes from the root to the bad value (to the bad key itself when `inKey`). */
  path: Array<string | number>;
  message: string;
  /** The problem is in the last key of `path`, not in its value. */
  inKey: boolean;
}

const NOT_JSON = 'a value must be text, a number, a boolean, null, a list or a mapping';

/** The first problem in `value` (depth-first), or null. The walk itself stops at `maxDepth`. */
export function valueProblem(value: unknown, maxDepth: number): ValueProblem | null {
  return problemAt(value, maxDepth, 0);
}

function problemAt(value: unknown, maxDepth: number, depth: number): ValueProblem | null {
  if (typeof value === 'string') return found(textProblem(value));
  if (typeof value === 'number') return Number.isFinite(value) ? null : found('numbers must be finite');
  if (typeof value === 'boolean' || value === null || value === undefined) return null;
  if (typeof value !== 'object') return found(NOT_JSON);
  if (depth >= maxDepth) return found(`nested deeper than ${maxDepth} levels`);
  if (Array.isArray(value)) {
    for (let i = 0; i < value.length; i++) {
      const problem = problemAt(value[i], maxDepth, depth + 1);
      if (problem) return within(i, problem);
    }
    return null;
  }
  // An ordinary object, whatever its prototype (the router's params object has its own); a Buffer,
  // Date, Map or Set is what a YAML tag made.
  if (Object.prototype.toString.call(value) !== '[object Object]') return found(NOT_JSON);
  for (const [key, inner] of Object.entries(value as Record<string, unknown>)) {
    const keyProblem = textProblem(key);
    if (keyProblem) return { path: [key], message: keyProblem, inKey: true };
    const problem = problemAt(inner, maxDepth, depth + 1);
    if (problem) return within(key, problem);
  }
  return null;
}

const found = (message: string | null): ValueProblem | null => (message === null ? null : { path: [], message, inKey: false });

function within(segment: string | number, problem: ValueProblem): ValueProblem {
  problem.path.unshift(segment);
  return problem;
}
