/**
 * Policy source text → a value plus a way to point back into the text: the line and column of
 * the node at a document path, and of a character inside a string scalar (where a CEL error
 * is). YAML goes through `yaml`'s Document API with a LineCounter; JSON is checked with
 * JSON.parse (so YAML-only syntax is refused) and then read as YAML, its superset, for positions.
 *
 * @example
 *   const parsed = parseSource('version: 1\naction_classes: []\n', 'yaml');
 *   parsed.errors;                               // []
 *   parsed.locate(['action_classes'], 'value');  // { line: 2, column: 17 }
 */
import { isMap, isScalar, isSeq, LineCounter, parseDocument } from 'yaml';
import type { Document, Node } from 'yaml';
import type { PolicyError } from './types.js';

export type Path = ReadonlyArray<string | number>;
export interface Position {
  line: number;
  column: number;
}

export interface ParsedSource {
  /** Null when the text could not be parsed (see errors). */
  value: unknown;
  errors: PolicyError[];
  /** The position of the value at `path` (or its key), else of its closest existing ancestor. */
  locate(path: Path, what: 'value' | 'key'): Position | null;
  /** The position of character `offset` of the string scalar at `path`. */
  locateInString(path: Path, offset: number): Position | null;
}

export const formatPath = (path: ReadonlyArray<PropertyKey>): string => path.map(String).join('.');

const firstLine = (message: string): string =>
  (message.split('\n')[0] ?? message).replace(/ at line \d+, column \d+:?$/, '');

interface Found {
  node: Node | null;
  key: Node | null;
  exact: boolean;
}

function walk(doc: Document, path: Path): Found {
  let node: Node | null = (doc.contents as Node | null) ?? null;
  let key: Node | null = null;
  for (const segment of path) {
    if (isMap(node)) {
      const pair = node.items.find((item) => isScalar(item.key) && String(item.key.value) === String(segment));
      if (!pair) return { node, key, exact: false };
      key = (pair.key as Node | null) ?? null;
      node = (pair.value as Node | null) ?? key;
    } else if (isSeq(node) && typeof segment === 'number') {
      const item = node.items[segment] as Node | undefined;
      if (!item) return { node, key, exact: false };
      key = null;
      node = item;
    } else {
      return { node, key, exact: false };
    }
  }
  return { node, key, exact: true };
}

/**
 * Finds where the expression's character at `offset` sits in the raw text of its scalar: the
 * expression's line is searched for verbatim (plain, quoted without escapes, block literal);
 * when it is not there (escapes, folding) the scalar's own start is returned.
 */
function offsetInScalar(text: string, start: number, end: number, value: string, offset: number): number {
  const raw = text.slice(start, end);
  const lines = value.split('\n');
  let cursor = 0;
  let remaining = Math.max(0, Math.min(offset, value.length));
  for (const line of lines) {
    const found = line.length > 0 ? raw.indexOf(line, cursor) : -1;
    if (remaining <= line.length) {
      if (found >= 0) return start + found + remaining;
      const tail = value.slice(offset, offset + 24).split('\n')[0]?.trim() ?? '';
      const near = tail.length > 0 ? raw.indexOf(tail, cursor) : -1;
      return start + (near >= 0 ? near : cursor);
    }
    if (found >= 0) cursor = found + line.length;
    remaining -= line.length + 1;
  }
  return start;
}

function fromDocument(text: string, doc: Document, counter: LineCounter, value: unknown, errors: PolicyError[]): ParsedSource {
  const position = (offset: number): Position => {
    const { line, col } = counter.linePos(offset);
    return { line, column: col };
  };
  return {
    value,
    errors,
    locate(path, what) {
      const found = walk(doc, path);
      const target = found.exact && what === 'key' && found.key ? found.key : found.node;
      return target?.range ? position(target.range[0]) : null;
    },
    locateInString(path, offset) {
      const found = walk(doc, path);
      const node = found.node;
      if (!node?.range) return null;
      if (!found.exact || !isScalar(node) || typeof node.value !== 'string') return position(node.range[0]);
      return position(offsetInScalar(text, node.range[0], node.range[1], node.value, offset));
    },
  };
}

export const noPositions = (value: unknown, errors: PolicyError[] = []): ParsedSource => ({
  value,
  errors,
  locate: () => null,
  locateInString: () => null,
});

function lineColumnOf(text: string, offset: number): Position {
  const before = text.slice(0, Math.max(0, Math.min(offset, text.length)));
  const lastBreak = before.lastIndexOf('\n');
  return { line: before.split('\n').length, column: offset - lastBreak };
}

function parseYaml(text: string, label: 'YAML' | 'JSON'): { doc: Document; counter: LineCounter; value: unknown; errors: PolicyError[] } {
  const counter = new LineCounter();
  const doc = parseDocument(text, { lineCounter: counter, prettyErrors: true, uniqueKeys: true });
  const errors: PolicyError[] = doc.errors.map((error) => {
    const at = error.linePos?.[0];
    return {
      path: '',
      message: `${label} syntax error: ${firstLine(error.message)}`,
      line: at?.line ?? null,
      column: at?.col ?? null,
    };
  });
  let value: unknown = null;
  if (errors.length === 0) {
    try {
      value = doc.toJS({ maxAliasCount: 100 });
    } catch (error) {
      errors.push({ path: '', message: `YAML error: ${firstLine((error as Error).message)}`, line: null, column: null });
    }
  }
  return { doc, counter, value, errors };
}

export function parseSource(text: string, format: 'yaml' | 'json'): ParsedSource {
  if (format === 'json') {
    let value: unknown;
    try {
      value = JSON.parse(text);
    } catch (error) {
      const message = (error as Error).message;
      const at = /position (\d+)/.exec(message);
      const where = at?.[1] !== undefined ? lineColumnOf(text, Number(at[1])) : null;
      return noPositions(null, [
        { path: '', message: `JSON syntax error: ${message}`, line: where?.line ?? null, column: where?.column ?? null },
      ]);
    }
    const yaml = parseYaml(text, 'JSON');
    // JSON.parse's value is authoritative; YAML only lends positions, when it reads the text too.
    if (yaml.errors.length > 0) {
      const duplicate = yaml.doc.errors.find((e) => e.code === 'DUPLICATE_KEY');
      return duplicate ? noPositions(null, yaml.errors) : noPositions(value, []);
    }
    return fromDocument(text, yaml.doc, yaml.counter, value, []);
  }
  const yaml = parseYaml(text, 'YAML');
  return fromDocument(text, yaml.doc, yaml.counter, yaml.errors.length > 0 ? null : yaml.value, yaml.errors);
}
