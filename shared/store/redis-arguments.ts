/**
 * How a record's fields travel to Redis: as XADD's name, value pairs, or, for the consume script,
 * as one JSON argument. ioredis encodes every argument of a command apart (its byte count and a
 * few string concatenations each), so the consume, which every enforced request sends, carries its
 * `permit.verified` record as one argument instead of two dozen.
 *
 * @example
 *   fieldPairs({ kind: 'permit.verified', mode: 'enforce' }); // ['kind', 'permit.verified', 'mode', 'enforce']
 *   recordArgument({ kind: 'permit.verified' }); // '["kind","permit.verified"]'
 */

/** A record's fields as XADD's name, value pairs. */
export function fieldPairs(fields: Record<string, string>): string[] {
  const pairs: string[] = [];
  for (const name of Object.keys(fields)) pairs.push(name, fields[name]!);
  return pairs;
}

/**
 * A record's fields as the consume script's one JSON argument, [name, value, ...], which the
 * script decodes with cjson. A lone UTF-16 surrogate becomes U+FFFD first, as it does when a value
 * is sent as an argument of its own (ioredis writes UTF-8): cjson refuses JSON's escape for it.
 */
export function recordArgument(fields: Record<string, string>): string {
  const pairs = fieldPairs(fields);
  const json = JSON.stringify(pairs);
  // JSON.stringify writes a lone surrogate as a \udXXX escape; without one, nothing to replace.
  if (!json.includes('\\ud')) return json;
  return JSON.stringify(pairs.map((text) => text.toWellFormed()));
}
