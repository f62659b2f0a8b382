/**
 * Policy source text → a value plus a way to point back into the text: the line and column of
 * the node at a document path, and of a character inside a string scalar (where a CEL error
 * is). YAML goes through `yaml`'s Document API with a LineCounter; JSON is checked with
 * JSON.parse (so YAML-only syntax is refused) and then read as YAML, its superset, for positions.
 *
 * Text being written (the default purpose) is held to the API's input rules once parsed
 * (shared/wire/recordable-value.ts): escapes such as `"\uDE00\uD83D"` or `"\0"` make lone
 * surrogates and NUL only then, and a YAML tag can make a value JSON has no form for. Such a
 * document could be neither stored nor exported, so it is an error with its path and position,
 * like a syntax error. So is a mapping key that is not text (`1:`, `~:`, `? [a, b]`), which
 * would otherwise become whatever text the parser makes of it. A stored version is read as it
 * was accepted.
 *
 * @example
 *   const parsed = parseSource('version: 1\naction_classes: []\n', 'yaml');
 *   parsed.errors;                               // []
 *   parsed.locate(['action_classes'], 'value');  // { line: 2, column: 17 }
 *   parseSource('version: 1\nname: "\\0"\n', 'yaml').errors[0]; // { path: 'name', message: 'text must not contain NUL', line: 2, column: 7 }
 */
import { isMap, isNode, isScalar, isSeq, LineCounter, parseDocument } from 'yaml';
import type { Document, Node } from 'yaml';
import { textProblem } from '../../shared/wire/recordable-text.js';
import { DEFAULT_MAX_JSON_DEPTH, valueProblem } from '../../shared/wire/recordable-value.js';
import type { PolicyError } from './types.js';

export interface ParseOptions {
  /** 'write' (default): text being written, validated or tested; 'stored': a version already accepted. */
  purpose?: 'write' | 'stored';
}

/** The API's default bound for JSON bodies; a valid policy nests about six levels. */
const MAX_POLICY_DEPTH = DEFAULT_MAX_JSON_DEPTH;
const KEY_NOT_TEXT = 'a key must be text: quote keys that YAML reads otherwise, such as 1, true or ~';

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

const positionIn =
  (counter: LineCounter) =>
  (offset: number): Position => {
    const { line, col } = counter.linePos(offset);
    return { line, column: col };
  };

function fromDocument(text: string, doc: Document, counter: LineCounter, value: unknown, errors: PolicyError[]): ParsedSource {
  const position = positionIn(counter);
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

/**
 * Mapping keys that are not text and nesting past MAX_POLICY_DEPTH, found in the document's
 * nodes: before they become values, since turning a list key into text is all a parser can do
 * with it, and the walk stops at the depth bound. Aliases are not followed.
 */
function structureErrors(doc: Document, position: (offset: number) => Position): PolicyError[] {
  const errors: PolicyError[] = [];
  const report = (node: Node | null, path: Path, message: string) => {
    const at = node?.range ? position(node.range[0]) : null;
    errors.push({ path: formatPath(path), message, line: at?.line ?? null, column: at?.column ?? null });
  };
  const visit = (node: unknown, path: Path, depth: number): void => {
    if (!isMap(node) && !isSeq(node)) return;
    if (depth >= MAX_POLICY_DEPTH) return report(node, path, `nested deeper than ${MAX_POLICY_DEPTH} levels`);
    if (isSeq(node)) return node.items.forEach((item, index) => visit(item, [...path, index], depth + 1));
    for (const { key, value } of node.items) {
      if (isScalar(key) && typeof key.value === 'string') visit(value, [...path, key.value], depth + 1);
      else report(isNode(key) ? key : node, [...path, String(isScalar(key) ? key.value : key)], KEY_NOT_TEXT);
    }
  };
  visit(doc.contents, [], 0);
  return errors;
}

function parseYaml(
  text: string,
  label: 'YAML' | 'JSON',
  checkStructure: boolean,
): { doc: Document; counter: LineCounter; value: unknown; errors: PolicyError[] } {
  const counter = new LineCounter();
  const doc = parseDocument(text, { lineCounter: counter, prettyErrors: true, uniqueKeys: true });
  // Nesting past what the parser's stack can follow is one error, however many places report it.
  const reported = doc.errors.filter((error, index, all) => error.code !== 'RESOURCE_EXHAUSTION' || all.findIndex((e) => e.code === error.code) === index);
  const errors: PolicyError[] = reported.map((error) => {
    const at = error.linePos?.[0];
    return {
      path: '',
      message:
        error.code === 'RESOURCE_EXHAUSTION'
          ? `${label} nested too deeply to read (a policy nests at most ${MAX_POLICY_DEPTH} levels)`
          : `${label} syntax error: ${firstLine(error.message)}`,
      line: at?.line ?? null,
      column: at?.col ?? null,
    };
  });
  if (errors.length === 0 && checkStructure) errors.push(...structureErrors(doc, positionIn(counter)));
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

/** The first problem of the parsed value under the API's input rules, as the parse's only error. */
function withInputRules(parsed: ParsedSource): ParsedSource {
  if (parsed.errors.length > 0) return parsed;
  const problem = valueProblem(parsed.value, MAX_POLICY_DEPTH);
  if (!problem) return parsed;
  const at = parsed.locate(problem.path, problem.inKey ? 'key' : 'value');
  const message = problem.inKey ? `a key: ${problem.message}` : problem.message;
  return { ...parsed, value: null, errors: [{ path: formatPath(problem.path), message, line: at?.line ?? null, column: at?.column ?? null }] };
}

/** NUL (a file can hold it; the API refuses it in `source`) or lone surrogates in the text itself. */
function textError(text: string): PolicyError | null {
  const problem = textProblem(text);
  if (problem === null) return null;
  const nul = text.indexOf('\u0000');
  const at = nul >= 0 ? lineColumnOf(text, nul) : null;
  return { path: '', message: `the policy text: ${problem}`, line: at?.line ?? null, column: at?.column ?? null };
}

export function parseSource(text: string, format: 'yaml' | 'json', options: ParseOptions = {}): ParsedSource {
  const write = options.purpose !== 'stored';
  const unrecordable = write ? textError(text) : null;
  if (unrecordable) return noPositions(null, [unrecordable]);
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
    // JSON's keys are always text: the value alone is checked.
    const yaml = parseYaml(text, 'JSON', false);
    let parsed: ParsedSource;
    // JSON.parse's value is authoritative; YAML only lends positions, when it reads the text too.
    if (yaml.errors.length > 0) {
      const duplicate = yaml.doc.errors.find((e) => e.code === 'DUPLICATE_KEY');
      if (duplicate) return noPositions(null, yaml.errors);
      parsed = noPositions(value, []);
    } else {
      parsed = fromDocument(text, yaml.doc, yaml.counter, value, []);
    }
    return write ? withInputRules(parsed) : parsed;
  }
  const yaml = parseYaml(text, 'YAML', write);
  const parsed = fromDocument(text, yaml.doc, yaml.counter, yaml.errors.length > 0 ? null : yaml.value, yaml.errors);
  return write ? withInputRules(parsed) : parsed;
}
