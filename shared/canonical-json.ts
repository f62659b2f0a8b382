/**
 * Canonical JSON (RFC 8785, JCS): keys sorted by UTF-16 code units at every depth, no
 * whitespace, strings and numbers as ECMAScript's JSON.stringify writes them (which is what JCS
 * prescribes). Used for the permit binding hash, the request fingerprint and the audit chain,
 * where the authority, the proxy and an offline verifier must produce the same bytes for the same
 * facts.
 *
 * It is written here rather than called from the `canonicalize` package because it runs on every
 * evaluation (three times) and every gated request: the package checks every string character by
 * character in JavaScript and builds an array per object. The package stays the oracle: a property
 * test (test/unit/canonical-json.test.ts) holds this writer to it, byte for byte, over arbitrary
 * JSON values and every UTF-16 code unit.
 *
 * @example
 *   canonicalJson({ b: 1, a: [true, null, 1e21] }); // '{"a":[true,null,1e+21],"b":1}'
 */

export class NotCanonicalizableError extends Error {
  readonly code = 'NOT_CANONICALIZABLE';
}

/**
 * Throws for values JSON cannot represent exactly: NaN and ±Infinity, BigInt, a lone surrogate in
 * a string or a key, a circular reference, and a top-level value with no JSON form (undefined, a
 * function, a symbol). Inside objects and arrays those three behave as in JSON.stringify: the
 * member is left out, the array element is null. `toJSON` is honoured, as JSON.stringify does.
 */
export function canonicalJson(value: unknown): string {
  const text = write(value, []);
  if (text === undefined) throw new NotCanonicalizableError('value has no JSON form');
  return text;
}

/** A character JSON.stringify escapes, or half of a surrogate pair (which may be lone). */
const NOT_VERBATIM = /[\u0000-\u001f"\\\ud800-\udfff]/;

function writeString(text: string): string {
  if (!NOT_VERBATIM.test(text)) return `"${text}"`;
  if (!text.isWellFormed()) throw new NotCanonicalizableError('Lone surrogate is not allowed');
  return JSON.stringify(text);
}

/** The canonical text of `value`, or undefined when it has none (undefined, a function, a symbol). */
function write(value: unknown, ancestors: object[]): string | undefined {
  switch (typeof value) {
    case 'string':
      return writeString(value);
    case 'number':
      if (!Number.isFinite(value)) throw new NotCanonicalizableError(Number.isNaN(value) ? 'NaN is not allowed' : 'Infinity is not allowed');
      return JSON.stringify(value);
    case 'boolean':
      return value ? 'true' : 'false';
    case 'bigint':
      throw new NotCanonicalizableError('BigInt value cannot be serialized in JSON');
    case 'object':
      return value === null ? 'null' : writeObject(value, ancestors);
    default:
      return undefined;
  }
}

function writeObject(value: object, ancestors: object[]): string | undefined {
  if (ancestors.includes(value)) throw new NotCanonicalizableError('Circular reference detected');
  ancestors.push(value);
  let text: string | undefined;
  const toJSON = (value as { toJSON?: unknown }).toJSON;
  if (typeof toJSON === 'function') {
    text = write(toJSON.call(value), ancestors);
  } else if (Array.isArray(value)) {
    text = '[';
    for (let i = 0; i < value.length; i++) text += `${i === 0 ? '' : ','}${write(value[i], ancestors) ?? 'null'}`;
    text += ']';
  } else {
    const members = value as Record<string, unknown>;
    const names = Object.keys(members).sort();
    text = '{';
    let empty = true;
    for (const name of names) {
      const member = write(members[name], ancestors);
      if (member === undefined) continue;
      text += `${empty ? '' : ','}${writeString(name)}:${member}`;
      empty = false;
    }
    text += '}';
  }
  ancestors.pop();
  return text;
}
