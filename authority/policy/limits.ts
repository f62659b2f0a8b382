/**
 * How much work one policy condition may cost (one tenant must not stall the others).
 *
 * A condition's worst case is estimated when the policy is written, assuming every list or map
 * the request presents holds at most `maxListItems` entries and every string at most
 * `maxStringLength` characters; a policy with a condition whose estimate exceeds
 * `maxConditionCost` is refused. At evaluation the same budget is enforced against the request
 * actually sent (see cost.ts), so a context larger than the assumption cannot buy more work.
 *
 * One cost unit is about one AST node visited or one character scanned: 1,000,000 units stay in
 * the low tens of milliseconds on a laptop core (test/bench/regex-engines.mjs for the regex part).
 *
 * Operators override the defaults with environment variables (read once, at start):
 *   COUNTERSIGN_POLICY_MAX_CONDITION_COST, COUNTERSIGN_POLICY_MAX_LIST_ITEMS,
 *   COUNTERSIGN_POLICY_MAX_STRING_LENGTH
 * or programmatically with `configurePolicyLimits` (before policies are compiled).
 */

export interface PolicyLimits {
  /** Largest worst-case cost a single condition may have. */
  maxConditionCost: number;
  /** Assumed largest list or map (entries) a condition iterates, for the write-time estimate. */
  maxListItems: number;
  /** Assumed longest string (characters) a condition scans, for the write-time estimate. */
  maxStringLength: number;
}

export const DEFAULT_POLICY_LIMITS: Readonly<PolicyLimits> = Object.freeze({
  maxConditionCost: 1_000_000,
  maxListItems: 1_000,
  maxStringLength: 4_096,
});

function fromEnv(name: string, fallback: number): number {
  const raw = process.env[name];
  if (raw === undefined || raw.trim() === '') return fallback;
  const value = Number(raw);
  // A typo must not silently lift the bound: refuse to start rather than guess.
  if (!Number.isSafeInteger(value) || value <= 0) throw new Error(`${name} must be a positive integer, got "${raw}"`);
  return value;
}

let current: Readonly<PolicyLimits> = Object.freeze({
  maxConditionCost: fromEnv('COUNTERSIGN_POLICY_MAX_CONDITION_COST', DEFAULT_POLICY_LIMITS.maxConditionCost),
  maxListItems: fromEnv('COUNTERSIGN_POLICY_MAX_LIST_ITEMS', DEFAULT_POLICY_LIMITS.maxListItems),
  maxStringLength: fromEnv('COUNTERSIGN_POLICY_MAX_STRING_LENGTH', DEFAULT_POLICY_LIMITS.maxStringLength),
});

export function policyLimits(): Readonly<PolicyLimits> {
  return current;
}

/** Replaces the limits (whole or in part); returns the previous ones, so tests can restore them. */
export function configurePolicyLimits(overrides: Partial<PolicyLimits>): Readonly<PolicyLimits> {
  const previous = current;
  const next = { ...current, ...overrides };
  for (const [key, value] of Object.entries(next)) {
    if (!Number.isSafeInteger(value) || value <= 0) throw new Error(`policy limit ${key} must be a positive integer`);
  }
  current = Object.freeze(next);
  return previous;
}
