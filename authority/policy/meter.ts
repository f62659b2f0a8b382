/**
 * The evaluation-time budget: work done by a running condition is charged here and the condition
 * is stopped (BudgetExceededError) when it passes its allowance. Evaluation is synchronous, so one
 * module-level meter is enough: nothing else runs while a condition does.
 */

/** Thrown when a condition would exceed its budget; decide() turns it into CONDITION_BUDGET_EXCEEDED. */
export class BudgetExceededError extends Error {
  constructor(readonly reason: string) {
    super(reason);
    this.name = 'BudgetExceededError';
  }
}

let remaining = Number.POSITIVE_INFINITY;

/** Charges `units` of work to the running condition; throws when its budget is spent. */
export function charge(units: number, what: string): void {
  remaining -= units;
  if (remaining < 0) {
    remaining = Number.NEGATIVE_INFINITY;
    throw new BudgetExceededError(`evaluation budget exceeded (${what})`);
  }
}

/** Runs `fn` with a budget of `limit` units; restores the outer budget afterwards (nesting is safe). */
export function metered<T>(limit: number, fn: () => T): T {
  const outer = remaining;
  remaining = limit;
  try {
    return fn();
  } finally {
    remaining = outer;
  }
}
