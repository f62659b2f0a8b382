/**
 * Walking cel-js ASTs. cel-js (v8) keeps a parsed expression as ASTNode objects {op, args}; macros
 * (all, exists, map, …) keep their call form in `args` and the expanded comprehension in
 * `meta.alternate`, whose `args` is an object {iterable, init, step, condition, …}. The walk
 * visits every node once, whichever form reaches it.
 */
import type { ASTNode } from '@marcbachmann/cel-js';

export type AstNode = ASTNode & { meta?: { alternate?: AstNode }; handle?: unknown };

const COMPREHENSION_PARTS = ['iterable', 'init', 'step', 'condition'] as const;

export function isAstNode(value: unknown): value is AstNode {
  return typeof value === 'object' && value !== null && typeof (value as { op?: unknown }).op === 'string' && 'args' in value;
}

export function visitAst(root: AstNode, visit: (node: AstNode) => void): void {
  const seen = new Set<unknown>();
  const stack: unknown[] = [root];
  while (stack.length > 0) {
    const item = stack.pop();
    if (typeof item !== 'object' || item === null || seen.has(item)) continue;
    seen.add(item);
    if (Array.isArray(item)) {
      for (const element of item) stack.push(element);
    } else if (isAstNode(item)) {
      visit(item);
      stack.push(item.args);
      if (item.meta?.alternate) stack.push(item.meta.alternate);
    } else {
      const parts = item as Record<string, unknown>;
      for (const key of COMPREHENSION_PARTS) if (key in parts) stack.push(parts[key]);
    }
  }
}
