/**
 * The authority's clock. Everything that stamps or compares time takes a `Clock`, so tests can
 * move time without sleeping.
 *
 * @example
 *   const clock = systemClock; clock.now(); // ms since the epoch
 */
export interface Clock {
  now(): number;
}

export const systemClock: Clock = { now: () => Date.now() };

/** ISO 8601 UTC with milliseconds, or null. */
export function isoOrNull(value: Date | null | undefined): string | null {
  return value ? value.toISOString() : null;
}
