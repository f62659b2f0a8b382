/**
 * Derives the bound facts of a matched request from the route's fact sources, in the canonical
 * form shared/permits/binding.ts hashes, so the gate's `bindingHash(org, facts)` equals the
 * hash the authority signed when the request is the one that was evaluated. A fact the gate
 * cannot derive (absent, ambiguous, or without a canonical form) is reported, never guessed: the
 * gate refuses the request.
 *
 * @example
 *   const derived = deriveFacts(route, { params: { id: '42' }, query, headers: req.headers });
 *   // { ok: true, actorFromPermit: false,
 *   //   facts: { action_type: 'demo.echo', actor_id: 'svc-a', environment: 'dev', target: { type: 'demo', id: '42' } } }
 */
import type { IncomingHttpHeaders } from 'node:http';
import { normalizeBoundFact } from '../shared/permits/binding.js';
import type { FactSource, RouteFact, TextConversion } from './fact-sources.js';
import { headerText } from './header-text.js';
import { readJsonPointer } from './json-pointer.js';

export interface FactRequest {
  /** From matchRoute. */
  params: Readonly<Record<string, string>>;
  query: URLSearchParams;
  /** node:http's headers: names in lower case, values one latin1 character per byte. */
  headers: IncomingHttpHeaders;
  /** The parsed JSON body; given only when `route.needsBody` (undefined: no or unparsable body). */
  body?: unknown;
}

export type DerivedFacts =
  | {
      ok: true;
      facts: Record<string, unknown>;
      /** `actor_id` is not in `facts`: the gate takes it from the verified permit's `sub`. */
      actorFromPermit: boolean;
    }
  | { ok: false; missing: string; reason: string };

type Resolved = { value: unknown } | { reason: string };

/** Never throws: every failure is `{ok: false}` naming the fact. */
export function deriveFacts(route: { readonly action_type: string; readonly facts: readonly RouteFact[] }, request: FactRequest): DerivedFacts {
  const facts: Record<string, unknown> = { action_type: route.action_type };
  let actorFromPermit = false;
  for (const fact of route.facts) {
    if (fact.kind === 'target') {
      const type = resolveString('target.type', fact.type, request);
      if ('reason' in type) return { ok: false, missing: 'target.type', reason: type.reason };
      const id = resolveString('target.id', fact.id, request);
      if ('reason' in id) return { ok: false, missing: 'target.id', reason: id.reason };
      facts.target = { type: type.value, id: id.value };
      continue;
    }
    if (fact.source.kind === 'permit') {
      // Sound only because every permit binds actor_id: the binding check then holds the permit
      // to its own `sub`, and the actor is whoever the authority evaluated, not a request header.
      actorFromPermit = true;
      continue;
    }
    const resolved = resolve(fact.source, request);
    if ('reason' in resolved) return { ok: false, missing: fact.name, reason: resolved.reason };
    try {
      facts[fact.name] = normalizeBoundFact(fact.name, resolved.value);
    } catch (error) {
      return { ok: false, missing: fact.name, reason: (error as Error).message };
    }
  }
  return { ok: true, facts, actorFromPermit };
}

function resolveString(name: string, source: FactSource, request: FactRequest): { value: string } | { reason: string } {
  const resolved = resolve(source, request);
  if ('reason' in resolved) return resolved;
  if (typeof resolved.value !== 'string') return { reason: `${name} must be a string, the request gave ${describe(resolved.value)}` };
  try {
    // Same rules as any other bound string (lone surrogates have no canonical form).
    return { value: normalizeBoundFact('environment', resolved.value) as string };
  } catch {
    return { reason: `${name} contains a lone UTF-16 surrogate` };
  }
}

function resolve(source: FactSource, request: FactRequest): Resolved {
  switch (source.kind) {
    case 'const':
      return { value: source.value };
    case 'path': {
      const value = Object.hasOwn(request.params, source.name) ? request.params[source.name] : undefined;
      if (value === undefined) return { reason: `path parameter :${source.name} is absent` };
      return convert(value, source.as, `path parameter :${source.name}`);
    }
    case 'query': {
      const values = request.query.getAll(source.name);
      if (values.length === 0) return { reason: `query parameter ${source.name} is absent` };
      // The upstream might read either one; bind neither.
      if (values.length > 1) return { reason: `query parameter ${source.name} appears ${values.length} times` };
      return convert(values[0]!, source.as, `query parameter ${source.name}`);
    }
    case 'header': {
      const raw = request.headers[source.name];
      if (raw === undefined) return { reason: `header ${source.name} is absent` };
      if (Array.isArray(raw) && raw.length !== 1) return { reason: `header ${source.name} appears ${raw.length} times` };
      // The same bytes bind the same fact on every front door (header-text.ts).
      const value = headerText(Array.isArray(raw) ? raw[0]! : raw);
      if (value === undefined) return { reason: `header ${source.name} is not UTF-8 text, so it has no canonical form` };
      return convert(value, source.as, `header ${source.name}`);
    }
    case 'body': {
      if (request.body === undefined) return { reason: 'the request has no JSON body' };
      const value = readJsonPointer(request.body, source.tokens);
      if (value === undefined) return { reason: `the body has nothing at ${source.pointer || '(root)'}` };
      if (source.as === 'number' && typeof value === 'string') return convert(value, 'number', `body ${source.pointer}`);
      return { value };
    }
    case 'permit':
      return { reason: 'comes from the permit' };
  }
}

const DECIMAL = /^-?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?$/;

function convert(text: string, as: TextConversion, what: string): Resolved {
  if (as === 'string') return { value: text };
  // Number('') is 0 and Number(' 1 ') is 1: accept only a plain decimal, and never NaN/Infinity.
  const value = DECIMAL.test(text) ? Number(text) : Number.NaN;
  if (!Number.isFinite(value)) return { reason: `${what} is not a number: ${JSON.stringify(text.slice(0, 64))}` };
  return { value };
}


function describe(value: unknown): string {
  if (value === null) return 'null';
  if (Array.isArray(value)) return 'an array';
  return `a ${typeof value}`;
}
