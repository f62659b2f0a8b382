/**
 * Worst-case cost of a CEL condition, estimated from its AST, and the evaluation-time
 * side of the same budget.
 *
 * The estimate assumes every list/map a condition reads holds at most `list` entries and every
 * string at most `string` characters (literals and values derived from them are sized exactly).
 * It charges 1 per node, plus: comprehension macros (all, exists, exists_one, map, filter) their
 * body times the size of the list they iterate (so nesting multiplies), `matches` input × pattern
 * length (RE2's worst case, scaled: regex.ts), string functions the length they scan, `+` the size it copies,
 * `in` the list it searches. It is an upper bound for these assumptions, not a timing.
 *
 * At evaluation, two things hold the bound (engine.ts): the request's actual largest list and
 * string are measured once (`measureShape`), and when they exceed the write-time assumption the
 * condition is re-estimated with them before it runs; and while it runs, comprehensions charge
 * their iterations and `matches` its work to the meter (meter.ts, `meterComprehensions`).
 */
import { visitAst, type AstNode } from './cel-ast.js';
import { charge } from './meter.js';
import { MATCHES_RE2, regexCost } from './regex.js';

export interface SizeBounds {
  /** Largest list or map, in entries. */
  list: number;
  /** Longest string, in UTF-16 code units (what `String.length` counts). */
  string: number;
}

/** Cost so far, and how large the value can be as a string and as a list. */
interface Estimate {
  cost: number;
  str: number;
  list: number;
}

const COMPREHENSIONS = new Set(['all', 'exists', 'exists_one', 'map', 'filter']);
/** Per iteration, the expanded comprehension runs a few nodes besides the body (see meterComprehensions). */
const ITERATION_OVERHEAD = 4;
const SCANNING_METHODS = new Set(['contains', 'startsWith', 'endsWith', 'indexOf', 'lastIndexOf']);
const COPYING_METHODS = new Set(['lowerAscii', 'upperAscii', 'trim', 'substring']);

const isNode = (value: unknown): value is AstNode => typeof value === 'object' && value !== null && 'op' in value;

function estimate(node: AstNode, bounds: SizeBounds): Estimate {
  const unknown = (cost: number): Estimate => ({ cost, str: bounds.string, list: bounds.list });
  const sum = (nodes: readonly AstNode[]): { cost: number; parts: Estimate[] } => {
    const parts = nodes.map((n) => estimate(n, bounds));
    return { cost: parts.reduce((total, part) => total + part.cost, 0), parts };
  };
  const args = node.args as unknown;
  switch (node.op) {
    case 'value': {
      if (typeof args === 'string') return { cost: 1, str: args.length, list: 0 };
      if (args instanceof Uint8Array) return { cost: 1, str: args.length, list: 0 };
      return { cost: 1, str: 0, list: 0 };
    }
    case 'id':
      return unknown(1);
    case '.':
    case '.?':
      return unknown(1 + estimate((args as [AstNode, string])[0], bounds).cost);
    case 'list': {
      const { cost, parts } = sum(args as AstNode[]);
      return { cost: cost + 1, str: Math.max(0, ...parts.map((p) => p.str)), list: parts.length };
    }
    case 'map': {
      const entries = args as Array<[AstNode, AstNode]>;
      return { cost: 1 + sum(entries.flat()).cost, str: bounds.string, list: entries.length };
    }
    case 'call':
      return estimateCall(args as [string, AstNode[]], bounds);
    case 'rcall':
      return estimateMethod(args as [string, AstNode, AstNode[]], bounds);
    case '?:': {
      const { cost, parts } = sum(args as AstNode[]);
      const [, a, b] = parts as [Estimate, Estimate, Estimate];
      return { cost: cost + 1, str: Math.max(a.str, b.str), list: Math.max(a.list, b.list) };
    }
    case '+': {
      const { cost, parts } = sum(args as AstNode[]);
      const [a, b] = parts as [Estimate, Estimate];
      const str = a.str + b.str;
      const list = a.list + b.list;
      return { cost: cost + 1 + Math.max(str, list), str, list };
    }
    case 'in': {
      const { cost, parts } = sum(args as AstNode[]);
      return { cost: cost + 1 + (parts[1]?.list ?? bounds.list), str: 0, list: 0 };
    }
    default: {
      // Logic, arithmetic, comparisons, indexing, negation: their operands plus one step.
      const children = (Array.isArray(args) ? args : [args]).filter(isNode);
      return { cost: 1 + sum(children).cost, str: bounds.string, list: bounds.list };
    }
  }
}

function estimateCall([name, callArgs]: [string, AstNode[]], bounds: SizeBounds): Estimate {
  const parts = callArgs.map((n) => estimate(n, bounds));
  const cost = 1 + parts.reduce((total, part) => total + part.cost, 0);
  if (name === 'has' || name === 'size') return { cost, str: 0, list: 0 };
  if (name === 'dyn' && parts[0]) return { ...parts[0], cost };
  // Conversions (string(x), int(s), …) read their argument once.
  return { cost: cost + parts.reduce((total, part) => total + part.str, 0), str: bounds.string, list: bounds.list };
}

function estimateMethod([name, receiver, callArgs]: [string, AstNode, AstNode[]], bounds: SizeBounds): Estimate {
  if (receiver.op === 'id' && receiver.args === 'cel' && name === 'bind' && callArgs.length === 3) {
    const [, init, body] = callArgs as [AstNode, AstNode, AstNode];
    const result = estimate(body, bounds);
    return { ...result, cost: 1 + estimate(init, bounds).cost + result.cost };
  }
  const r = estimate(receiver, bounds);
  if (COMPREHENSIONS.has(name) && callArgs.length >= 2 && callArgs[0]?.op === 'id') {
    const body = callArgs.slice(1).reduce((total, n) => total + estimate(n, bounds).cost, 0);
    return { cost: 1 + r.cost + r.list * (body + ITERATION_OVERHEAD), str: bounds.string, list: r.list };
  }
  const parts = callArgs.map((n) => estimate(n, bounds));
  const cost = 1 + r.cost + parts.reduce((total, part) => total + part.cost, 0);
  const first = parts[0];
  switch (true) {
    case name === MATCHES_RE2 && first !== undefined: {
      const literal = callArgs[0]?.op === 'value';
      return { cost: cost + regexCost(r.str, first.str) + regexCost(first.str, 1) + (literal ? 0 : first.str), str: 0, list: 0 };
    }
    case name === 'size':
      return { cost, str: 0, list: 0 };
    case name === 'split':
      return { cost: cost + r.str, str: r.str, list: r.str + 1 };
    case name === 'join':
      return { cost: cost + r.list * bounds.string, str: r.list * bounds.string, list: 0 };
    case SCANNING_METHODS.has(name):
      return { cost: cost + r.str + (first?.str ?? 0), str: 0, list: 0 };
    case COPYING_METHODS.has(name):
      return { cost: cost + r.str, str: r.str, list: 0 };
    default:
      return { cost: cost + r.str + r.list, str: Math.max(r.str, bounds.string), list: Math.max(r.list, bounds.list) };
  }
}

/** The condition's worst-case cost under `bounds`. */
export function estimateCost(root: AstNode, bounds: SizeBounds): number {
  return estimate(root, bounds).cost;
}

/** The largest list/map and string in what a condition can read; one pass over the values. */
export function measureShape(roots: readonly unknown[]): SizeBounds {
  let list = 0;
  let string = 0;
  const stack: unknown[] = [...roots];
  const seen = new Set<object>();
  while (stack.length > 0) {
    const value = stack.pop();
    if (typeof value === 'string') {
      string = Math.max(string, value.length);
    } else if (Array.isArray(value)) {
      if (seen.has(value)) continue;
      seen.add(value);
      list = Math.max(list, value.length);
      // One push per element: spreading a long array into push() overflows the call stack.
      for (const element of value) stack.push(element);
    } else if (typeof value === 'object' && value !== null && !(value instanceof Date)) {
      if (seen.has(value)) continue;
      seen.add(value);
      const keys = Object.keys(value);
      list = Math.max(list, keys.length);
      for (const key of keys) {
        string = Math.max(string, key.length);
        stack.push((value as Record<string, unknown>)[key]);
      }
    }
  }
  return { list, string };
}

const sizeOf = (value: unknown): number => {
  if (Array.isArray(value)) return value.length;
  if (value instanceof Map || value instanceof Set) return value.size;
  if (typeof value === 'object' && value !== null) return Object.keys(value).length;
  return 0;
};

/**
 * After type checking: makes every comprehension charge the meter, on entry, the number of
 * elements it will visit times the nodes its step evaluates. Returns false when this cel-js does
 * not expose the comprehension handler (then only the request-size check holds the bound).
 */
export function meterComprehensions(root: AstNode): boolean {
  let wrapped = true;
  visitAst(root, (node) => {
    if (node.op !== ('comprehension' as string)) return;
    const target = node as AstNode & { handle?: (iterable: unknown, ...rest: unknown[]) => unknown };
    const original = target.handle;
    if (typeof original !== 'function') {
      wrapped = false;
      return;
    }
    let stepNodes = 0;
    const parts = node.args as unknown as { step?: AstNode; condition?: AstNode };
    for (const part of [parts.step, parts.condition]) if (part) visitAst(part, () => stepNodes++);
    target.handle = (iterable: unknown, ...rest: unknown[]) => {
      charge(sizeOf(iterable) * Math.max(1, stepNodes), 'comprehension');
      return original(iterable, ...rest);
    };
  });
  return wrapped;
}
