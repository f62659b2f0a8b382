/**
 * Where a route's bound facts come from: the compiled form of a proxy route's `facts` mapping
 * (`{header: X-Actor-Id}`, `{path: id}`, `{body: /amount, as: number}`, …), checked at load time
 * against the fact's canonical shape and the route's path pattern, so a source that could never
 * produce a valid fact is a configuration error rather than a refused request. proxy/facts.ts
 * reads the compiled sources from each request.
 *
 * @example
 *   const facts = compileFacts({ actor_id: { header: 'X-Actor-Id' }, target: { type: { const: 'demo' }, id: { path: 'id' } } },
 *     parsePathPattern('/echo/:id'), (path, message) => console.error(path.join('.'), message));
 *   // [{ kind: 'single', name: 'actor_id', source: { kind: 'header', name: 'x-actor-id', as: 'string' } },
 *   //  { kind: 'target', name: 'target', type: { kind: 'const', value: 'demo' }, id: { kind: 'path', name: 'id', as: 'string' } }]
 */
import { normalizeBoundFact } from '../shared/permits/binding.js';
import { parseJsonPointer } from './json-pointer.js';
import type { PathPattern } from './routes.js';

/** How a text value (path segment, query, header; a body string) becomes the bound fact. */
export type TextConversion = 'string' | 'number';

/** Where one fact comes from, compiled. Header names are lower case (node:http's form). */
export type FactSource =
  | { readonly kind: 'const'; readonly value: unknown }
  | { readonly kind: 'path'; readonly name: string; readonly as: TextConversion }
  | { readonly kind: 'query'; readonly name: string; readonly as: TextConversion }
  | { readonly kind: 'header'; readonly name: string; readonly as: TextConversion }
  /** `as: 'number'` also accepts a numeric JSON string; without `as` the JSON value is taken as is. */
  | { readonly kind: 'body'; readonly pointer: string; readonly tokens: readonly string[]; readonly as: 'number' | undefined }
  | { readonly kind: 'permit' };

export type RouteFact =
  | { readonly kind: 'single'; readonly name: string; readonly source: FactSource }
  | { readonly kind: 'target'; readonly name: 'target'; readonly type: FactSource; readonly id: FactSource };

/** Reports one problem at a path below the thing being compiled. */
export type Report = (path: Array<string | number>, message: string) => void;

/** What a fact must canonically be, so a source that can never produce it is caught at load. */
type FactShape = 'string' | 'number' | 'target' | 'json';

const SOURCE_KEYS = ['const', 'path', 'query', 'header', 'body', 'permit'] as const;
const SOURCE_HELP = 'a fact source is one of {const: value}, {path: param}, {query: name}, {header: name}, {body: /json/pointer}, or {permit: true} for actor_id';
/** Names that cannot be bound (see shared/permits/binding.ts), or that the route supplies. */
const RESERVED_FACTS: Record<string, string> = {
  v: 'reserved by the binding hash envelope',
  org: 'reserved by the binding hash envelope (the organization is the configuration\'s)',
  __proto__: 'cannot be bound',
  action_type: "comes from the route's action_type",
};

function shapeOf(name: string): FactShape {
  switch (name) {
    case 'actor_id':
    case 'environment':
    case 'account_code':
      return 'string';
    case 'amount_usd':
      return 'number';
    case 'target':
      return 'target';
    default:
      return 'json';
  }
}

/**
 * A route's `facts` mapping compiled into sources, `actor_id` first; undefined after reporting
 * every problem (a reserved name, a source that cannot produce the fact's canonical form, a path
 * parameter the pattern lacks, a bad JSON Pointer). `pattern` is undefined when the route's own
 * pattern did not parse: path sources are then not checked.
 */
export function compileFacts(raw: Record<string, unknown>, pattern: PathPattern | undefined, report: Report): RouteFact[] | undefined {
  let ok = true;
  const fail: Report = (path, message) => {
    ok = false;
    report(path, message);
  };
  const facts: RouteFact[] = [];
  if (!Object.hasOwn(raw, 'actor_id')) {
    fail(['actor_id'], 'required: where the actor comes from, such as {header: X-Actor-Id} or {permit: true}');
  }
  for (const name of Object.keys(raw)) {
    const value = raw[name];
    if (Object.hasOwn(RESERVED_FACTS, name)) {
      fail([name], RESERVED_FACTS[name]!);
      continue;
    }
    if (name === '') {
      fail([name], 'a fact name cannot be empty');
      continue;
    }
    const shape = shapeOf(name);
    if (shape === 'target' && isPlainObject(value) && (Object.hasOwn(value, 'type') || Object.hasOwn(value, 'id'))) {
      const extra = Object.keys(value).filter((key) => key !== 'type' && key !== 'id');
      for (const key of extra) fail([name, key], 'target has only type and id');
      const type = compileSource(value.type, ['target', 'type'], 'target.type', 'string', pattern, fail);
      const id = compileSource(value.id, ['target', 'id'], 'target.id', 'string', pattern, fail);
      if (type !== undefined && id !== undefined) facts.push({ kind: 'target', name: 'target', type, id });
      continue;
    }
    const source = compileSource(value, [name], name, shape, pattern, fail);
    if (source === undefined) continue;
    const fact: RouteFact = { kind: 'single', name, source };
    if (name === 'actor_id') facts.unshift(fact);
    else facts.push(fact);
  }
  return ok ? facts : undefined;
}

function compileSource(
  raw: unknown,
  path: Array<string | number>,
  fact: string,
  shape: FactShape,
  pattern: PathPattern | undefined,
  fail: Report,
): FactSource | undefined {
  if (!isPlainObject(raw)) {
    fail(path, raw === undefined ? `required; ${SOURCE_HELP}` : SOURCE_HELP);
    return undefined;
  }
  const kinds = SOURCE_KEYS.filter((key) => Object.hasOwn(raw, key));
  const unknown = Object.keys(raw).filter((key) => key !== 'as' && !(SOURCE_KEYS as readonly string[]).includes(key));
  if (unknown.length > 0 || kinds.length !== 1) {
    for (const key of unknown) fail([...path, key], `unknown key; ${SOURCE_HELP}`);
    if (kinds.length !== 1) fail(path, kinds.length === 0 ? SOURCE_HELP : `give exactly one of ${kinds.join(', ')}`);
    return undefined;
  }
  const kind = kinds[0]!;
  const argument = raw[kind];
  const as = raw.as;
  if (as !== undefined && as !== 'number' && as !== 'string') {
    fail([...path, 'as'], 'as is number or string');
    return undefined;
  }
  if (as !== undefined && (kind === 'const' || kind === 'permit')) {
    fail([...path, 'as'], `as converts text; it does not apply to a ${kind} source`);
    return undefined;
  }
  if (as === 'number' && shape === 'string') {
    fail([...path, 'as'], `${fact} is bound as a string`);
    return undefined;
  }
  if (as === 'string' && shape === 'number') {
    fail([...path, 'as'], `${fact} is bound as a number (a numeric string never matches)`);
    return undefined;
  }
  if (shape === 'target' && (kind === 'path' || kind === 'query' || kind === 'header')) {
    fail(path, 'target is {type, id}: give target as {type: <source>, id: <source>}');
    return undefined;
  }
  // amount_usd from text must become a number; everything else stays the text it was.
  const textAs: TextConversion = (as as TextConversion | undefined) ?? (shape === 'number' ? 'number' : 'string');
  switch (kind) {
    case 'const': {
      try {
        const canonical = fact === 'target.type' || fact === 'target.id' ? normalizeBoundFact('environment', argument) : normalizeBoundFact(fact, argument);
        return { kind: 'const', value: canonical };
      } catch (error) {
        fail([...path, 'const'], `not a valid ${fact}: ${(error as Error).message.replace(/^bound fact "[^"]*": /, '')}`);
        return undefined;
      }
    }
    case 'path': {
      if (typeof argument !== 'string' || argument === '') {
        fail([...path, 'path'], 'the name of a path parameter');
        return undefined;
      }
      // Without a usable pattern its own error is reported; the parameter cannot be checked.
      if (pattern === undefined) return undefined;
      if (!pattern.params.includes(argument)) {
        fail([...path, 'path'], `no such parameter in ${pattern.source}`);
        return undefined;
      }
      return { kind: 'path', name: argument, as: textAs };
    }
    case 'query':
    case 'header': {
      if (typeof argument !== 'string' || argument === '') {
        fail([...path, kind], `the name of a ${kind === 'query' ? 'query parameter' : 'header'}`);
        return undefined;
      }
      if (kind === 'header' && !/^[!#$%&'*+.^_`|~0-9A-Za-z-]+$/.test(argument)) {
        fail([...path, 'header'], 'not an HTTP header name');
        return undefined;
      }
      return kind === 'header' ? { kind, name: argument.toLowerCase(), as: textAs } : { kind, name: argument, as: textAs };
    }
    case 'body': {
      if (as === 'string') {
        fail([...path, 'as'], 'a body value is already typed JSON; only as: number (to read a numeric string) applies');
        return undefined;
      }
      if (typeof argument !== 'string') {
        fail([...path, 'body'], 'a JSON Pointer (RFC 6901), such as /amount or /target/id');
        return undefined;
      }
      try {
        return { kind: 'body', pointer: argument, tokens: parseJsonPointer(argument), as: as === 'number' ? 'number' : undefined };
      } catch (error) {
        fail([...path, 'body'], (error as Error).message);
        return undefined;
      }
    }
    case 'permit': {
      if (fact !== 'actor_id') {
        fail([...path, 'permit'], 'only actor_id can be taken from the permit');
        return undefined;
      }
      if (argument !== true) {
        fail([...path, 'permit'], 'permit: true');
        return undefined;
      }
      return { kind: 'permit' };
    }
  }
}

/** Whether the fact comes from the JSON body, so the gate must buffer and parse it. */
export function usesBody(fact: RouteFact): boolean {
  return fact.kind === 'target' ? fact.type.kind === 'body' || fact.id.kind === 'body' : fact.source.kind === 'body';
}

export function isPlainObject(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}
