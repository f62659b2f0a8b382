/**
 * No import cycles in the product's code, type imports included: a module's dependencies must
 * be understandable without the module itself, and a cycle through a type import is still a
 * cycle for the reader (and becomes a runtime one the day the import loses its `type`).
 *
 * Imports are read with TypeScript's own pre-processor (`import`, `import type`, `export … from`,
 * dynamic `import()`), relative specifiers only: packages cannot import us back.
 */
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import t from 'tap';
import ts from 'typescript';
import { REPO_ROOT, repoPath } from '../helpers/repo.js';

const PRODUCT_FOLDERS = ['authority', 'proxy', 'shared', 'bin', join('console', 'src')];

function sourceFiles(folder: string, into: string[] = []): string[] {
  for (const entry of readdirSync(folder)) {
    const path = join(folder, entry);
    if (statSync(path).isDirectory()) sourceFiles(path, into);
    else if (/\.tsx?$/.test(entry) && !entry.endsWith('.d.ts')) into.push(path);
  }
  return into;
}

/** The module a relative specifier names: `./x.js` is `./x.ts` (or `.tsx`) in the sources. */
function resolveSpecifier(from: string, specifier: string, known: ReadonlySet<string>): string | undefined {
  const base = resolve(dirname(from), specifier).replace(/\.(m?js|jsx)$/, '');
  return [`${base}.ts`, `${base}.tsx`, join(base, 'index.ts'), join(base, 'index.tsx')].find((candidate) => known.has(candidate));
}

/** Strongly connected components of more than one module (or a module importing itself): Tarjan's algorithm. */
function cyclesOf(graph: ReadonlyMap<string, string[]>): string[][] {
  let next = 0;
  const index = new Map<string, number>();
  const low = new Map<string, number>();
  const stack: string[] = [];
  const onStack = new Set<string>();
  const cycles: string[][] = [];
  const visit = (module: string): void => {
    index.set(module, next);
    low.set(module, next);
    next++;
    stack.push(module);
    onStack.add(module);
    for (const dependency of graph.get(module) ?? []) {
      if (!index.has(dependency)) {
        visit(dependency);
        low.set(module, Math.min(low.get(module)!, low.get(dependency)!));
      } else if (onStack.has(dependency)) {
        low.set(module, Math.min(low.get(module)!, index.get(dependency)!));
      }
    }
    if (low.get(module) !== index.get(module)) return;
    const component: string[] = [];
    let member: string;
    do {
      member = stack.pop()!;
      onStack.delete(member);
      component.push(member);
    } while (member !== module);
    if (component.length > 1 || graph.get(module)!.includes(module)) cycles.push(component.sort());
  };
  for (const module of graph.keys()) if (!index.has(module)) visit(module);
  return cycles;
}

t.test('the product has no import cycles, type imports included', async (t) => {
  const files = PRODUCT_FOLDERS.flatMap((folder) => sourceFiles(repoPath(folder)));
  const known = new Set(files);
  const graph = new Map<string, string[]>();
  for (const file of files) {
    const { importedFiles } = ts.preProcessFile(readFileSync(file, 'utf8'), true, true);
    const dependencies = importedFiles
      .map(({ fileName }) => fileName)
      .filter((specifier) => specifier.startsWith('.'))
      .map((specifier) => resolveSpecifier(file, specifier, known))
      .filter((module): module is string => module !== undefined);
    graph.set(file, dependencies);
  }
  t.ok(graph.size > 100, `read the product's modules (${graph.size})`);
  const cycles = cyclesOf(graph).map((cycle) => cycle.map((module) => relative(REPO_ROOT, module)).join(' <-> '));
  t.same(cycles, [], 'no module reaches itself through its imports');
});

t.test('the cycle finder names each cycle once, and not the modules that merely reach one', async (t) => {
  const graph = new Map([
    ['a', ['b']],
    ['b', ['c']],
    ['c', ['a']],
    ['d', ['a']],
  ]);
  t.same(cyclesOf(graph), [['a', 'b', 'c']]);
});
