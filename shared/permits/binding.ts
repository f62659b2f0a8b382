/**
 * The permit binding: which facts of an action a permit is bound to, their canonical form, and
 * the binding hash `bnd` = base64url(SHA-256(JCS({v: 1, org, ...bound facts}))), no padding.
 * The authority (when it signs) and every gate (when it verifies) call these same functions, so
 * a fact can never be canonicalized two ways.
 *
 * Bound facts: `action_type`, `actor_id`, whichever of `environment`, `target`, `amount_usd`,
 * `account_code` the context holds, and the context keys the action class lists in `bind`.
 *
 * Canonical form of each fact (anything else throws `BindingFactError`, code
 * `INVALID_BOUND_FACT`; nothing is coerced, so the gate must derive the same JSON types the
 * evaluation saw):
 * - `action_type`, `actor_id`: non-empty strings.
 * - `environment`, `account_code`: strings (empty allowed).
 * - `target`: an object with string `type` and string `id` (empty allowed); only those two keys
 *   are bound (other keys are dropped, matching the permit's `tgt` claim).
 * - `amount_usd`: a finite number >= 0 (`-0` is bound as `0`); never a numeric string.
 * - keys from `bind`: any JSON value (null, boolean, finite number, well-formed string, dense
 *   array, plain object) up to 32 levels deep; no NaN, Infinity, undefined, BigInt, functions,
 *   class instances (Date, Map...) or lone UTF-16 surrogates.
 * A fact is present when the context has it as an own property whose value is not `undefined`.
 * The names `v`, `org` (they belong to the hash envelope) and `__proto__` cannot be bound.
 *
 * @example
 *   const { facts, keys } = boundFacts(
 *     { action_type: 'payment.wire', actor_id: 'svc-billing', context: { amount_usd: 1200, memo: 'x' } },
 *     [],
 *   ); // keys: ['action_type', 'actor_id', 'amount_usd']
 *   const bnd = bindingHash('org_1', facts); // 43 base64url characters
 *   bindingHashesEqual(bnd, claims.bnd);
 */
import { hash, timingSafeEqual } from 'node:crypto';
import { canonicalJson } from '../canonical-json.js';

export const STANDARD_BOUND_FACTS = [
  'action_type',
  'actor_id',
  'environment',
  'target',
  'amount_usd',
  'account_code',
] as const;

export type StandardBoundFact = (typeof STANDARD_BOUND_FACTS)[number];

/** The standard facts bound only when the context holds them. */
export const OPTIONAL_STANDARD_FACTS = ['environment', 'target', 'amount_usd', 'account_code'] as const;

/** Version of the hash envelope; a new canonical form would get a new `v`. */
export const BINDING_VERSION = 1;

/** `v` and `org` would overwrite the envelope; `__proto__` would vanish into a prototype. */
const RESERVED_FACT_NAMES: ReadonlySet<string> = new Set(['v', 'org', '__proto__']);
const MAX_FACT_DEPTH = 32;

/** A fact that has no canonical form, or a name that cannot be bound. */
export class BindingFactError extends Error {
  readonly code = 'INVALID_BOUND_FACT' as const;
  /** The fact's name. */
  readonly fact: string;

  constructor(fact: string, message: string) {
    super(`bound fact ${JSON.stringify(fact)}: ${message}`);
    this.name = 'BindingFactError';
    this.fact = fact;
  }
}

export interface BindingInput {
  action_type: string;
  actor_id: string;
  context: Record<string, unknown>;
}

/**
 * Selects and canonicalizes the bound facts of an action. `keys` is sorted and is what the
 * permit carries as `bkeys`.
 *
 * A key in `extraKeys` that the context does not hold is simply not bound: whether its absence
 * is acceptable is the policy's decision (a rule can require it), not the binding's. Extra keys
 * naming a standard fact change nothing; `action_type` and `actor_id` always come from `input`,
 * never from the context.
 */
export function boundFacts(
  input: BindingInput,
  extraKeys: readonly string[],
): { facts: Record<string, unknown>; keys: string[] } {
  const facts: Record<string, unknown> = {
    action_type: normalizeBoundFact('action_type', input.action_type),
    actor_id: normalizeBoundFact('actor_id', input.actor_id),
  };
  const context = input.context;
  for (const name of [...OPTIONAL_STANDARD_FACTS, ...extraKeys]) {
    assertBindableName(name);
    if (name === 'action_type' || name === 'actor_id') continue;
    const value = factOf(context, name);
    if (value !== undefined) facts[name] = normalizeBoundFact(name, value);
  }
  const keys = Object.keys(facts).sort();
  return { facts, keys };
}

/**
 * The binding hash of `facts` for organization `org`. Facts are canonicalized first (see the
 * module comment), so `bindingHash(org, facts)` equals the hash of `boundFacts(...).facts`
 * whichever side derived them. Throws `BindingFactError` for facts without a canonical form.
 */
export function bindingHash(org: string, facts: Record<string, unknown>): string {
  if (typeof org !== 'string' || org.length === 0) {
    throw new BindingFactError('org', 'the organization must be a non-empty string');
  }
  // One-shot: no Hash object per request on the gate's path.
  return hash('sha256', bindingCanonicalJson(org, facts), 'base64url');
}

/** The exact JCS text that `bindingHash` hashes (for golden vectors and debugging). */
export function bindingCanonicalJson(org: string, facts: Record<string, unknown>): string {
  const normalized: Record<string, unknown> = {};
  for (const name of Object.keys(facts)) {
    assertBindableName(name);
    const value = facts[name];
    // Same presence rule as boundFacts: an undefined fact is an absent fact.
    if (value !== undefined) normalized[name] = normalizeBoundFact(name, value);
  }
  for (const required of ['action_type', 'actor_id']) {
    if (!(required in normalized)) throw new BindingFactError(required, 'is always bound and must be given');
  }
  normalized['v'] = BINDING_VERSION;
  normalized['org'] = checkedString('org', org);
  return canonicalJson(normalized);
}

/** Constant-time equality of two binding hashes; false (not an exception) on different lengths. */
export function bindingHashesEqual(a: string, b: string): boolean {
  const left = Buffer.from(a, 'utf8');
  const right = Buffer.from(b, 'utf8');
  if (left.length !== right.length) return false;
  return timingSafeEqual(left, right);
}

/** The canonical form of one fact (see the module comment), or a `BindingFactError`. */
export function normalizeBoundFact(name: string, value: unknown): unknown {
  switch (name) {
    case 'action_type':
    case 'actor_id':
      if (typeof value !== 'string' || value.length === 0) throw new BindingFactError(name, 'must be a non-empty string');
      return checkedString(name, value);
    case 'environment':
    case 'account_code':
      if (typeof value !== 'string') throw new BindingFactError(name, 'must be a string');
      return checkedString(name, value);
    case 'target': {
      if (!isPlainObject(value)) throw new BindingFactError(name, 'must be an object {type, id}');
      const { type, id } = value;
      if (typeof type !== 'string' || typeof id !== 'string') {
        throw new BindingFactError(name, 'must have string fields type and id');
      }
      return { type: checkedString(name, type), id: checkedString(name, id) };
    }
    case 'amount_usd':
      if (typeof value !== 'number' || !Number.isFinite(value) || value < 0) {
        throw new BindingFactError(name, 'must be a finite number >= 0');
      }
      return value === 0 ? 0 : value;
    default:
      checkJsonValue(name, value, 0);
      return value;
  }
}

/** Whether the context holds `name` (own property, not undefined); its value or undefined. */
export function factOf(context: Record<string, unknown>, name: string): unknown {
  return Object.hasOwn(context, name) ? context[name] : undefined;
}

function assertBindableName(name: string): void {
  if (typeof name !== 'string' || name.length === 0) throw new BindingFactError(String(name), 'a fact name must be a non-empty string');
  if (RESERVED_FACT_NAMES.has(name)) throw new BindingFactError(name, 'this name is reserved and cannot be bound');
  checkedString(name, name);
}

function checkedString(name: string, value: string): string {
  if (!value.isWellFormed()) throw new BindingFactError(name, 'contains a lone UTF-16 surrogate');
  return value;
}

function checkJsonValue(name: string, value: unknown, depth: number): void {
  if (depth > MAX_FACT_DEPTH) throw new BindingFactError(name, `is nested deeper than ${MAX_FACT_DEPTH} levels`);
  if (value === null || typeof value === 'boolean') return;
  if (typeof value === 'string') {
    checkedString(name, value);
    return;
  }
  if (typeof value === 'number') {
    if (!Number.isFinite(value)) throw new BindingFactError(name, `holds ${value}, which JSON cannot represent`);
    return;
  }
  if (Array.isArray(value)) {
    for (let i = 0; i < value.length; i++) {
      // A hole or undefined would silently become null in JSON.
      if (!Object.hasOwn(value, i) || value[i] === undefined) throw new BindingFactError(name, 'holds an undefined array element');
      checkJsonValue(name, value[i], depth + 1);
    }
    return;
  }
  if (isPlainObject(value)) {
    for (const key of Object.keys(value)) {
      checkedString(name, key);
      const member = value[key];
      if (member === undefined) throw new BindingFactError(name, `holds undefined at key ${JSON.stringify(key)}`);
      checkJsonValue(name, member, depth + 1);
    }
    return;
  }
  throw new BindingFactError(name, `holds a ${describe(value)}, which is not a JSON value`);
}

function isPlainObject(value: unknown): value is Record<string, unknown> {
  if (typeof value !== 'object' || value === null || Array.isArray(value)) return false;
  const proto: unknown = Object.getPrototypeOf(value);
  return proto === Object.prototype || proto === null;
}

function describe(value: unknown): string {
  if (typeof value === 'object' && value !== null) return value.constructor?.name ?? 'object';
  return typeof value;
}
