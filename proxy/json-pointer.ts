/**
 * JSON Pointer (RFC 6901): where a bound fact sits in a JSON body. Pointers are parsed once, when
 * the configuration is loaded (fact-sources.ts), and read per request (facts.ts).
 *
 * @example
 *   parseJsonPointer('/a/0/b~1c'); // ['a', '0', 'b/c']
 *   readJsonPointer({ a: [{ 'b/c': 1 }] }, '/a/0/b~1c'); // 1
 *   readJsonPointer({ a: 1 }, '/constructor'); // undefined: own properties only
 */

export class JsonPointerError extends Error {
  readonly code = 'INVALID_JSON_POINTER' as const;
}

/** The unescaped reference tokens of a pointer; `''` (the whole document) is `[]`. */
export function parseJsonPointer(pointer: string): string[] {
  if (pointer === '') return [];
  if (!pointer.startsWith('/')) throw new JsonPointerError(`a JSON Pointer starts with / (got ${JSON.stringify(pointer)})`);
  return pointer
    .slice(1)
    .split('/')
    .map((token) => {
      if (/~(?![01])/.test(token)) throw new JsonPointerError(`${JSON.stringify(pointer)}: ~ must be followed by 0 or 1`);
      // ~1 first: "~01" is the token "~1", not "/".
      return token.replaceAll('~1', '/').replaceAll('~0', '~');
    });
}

const ARRAY_INDEX = /^(?:0|[1-9]\d*)$/;

/**
 * The value `pointer` refers to in `document`, or undefined when there is none (including `-`,
 * an index out of range, and inherited properties such as `constructor`). A pointer given as a
 * string is parsed first and throws `JsonPointerError` when malformed; compiled tokens never throw.
 */
export function readJsonPointer(document: unknown, pointer: string | readonly string[]): unknown {
  const tokens = typeof pointer === 'string' ? parseJsonPointer(pointer) : pointer;
  let current: unknown = document;
  for (const token of tokens) {
    if (Array.isArray(current)) {
      if (!ARRAY_INDEX.test(token)) return undefined;
      const index = Number(token);
      if (index >= current.length) return undefined;
      current = current[index];
    } else if (typeof current === 'object' && current !== null) {
      if (!Object.hasOwn(current, token)) return undefined;
      current = (current as Record<string, unknown>)[token];
    } else {
      return undefined;
    }
  }
  return current;
}
