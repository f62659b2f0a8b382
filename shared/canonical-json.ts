/**
 * Canonical JSON (RFC 8785, JCS): keys sorted by UTF-16 code units at every depth, no
 * whitespace, numbers in ECMAScript's shortest form. Used for the permit binding hash and the
 * audit chain, where the authority, the proxy and an offline verifier must produce the same
 * bytes for the same facts.
 *
 * @example
 *   canonicalJson({ b: 1, a: [true, null, 1e21] }); // '{"a":[true,null,1e+21],"b":1}'
 */
import canonicalize from 'canonicalize';

export class NotCanonicalizableError extends Error {
  readonly code = 'NOT_CANONICALIZABLE';
}

/** Throws for values JSON cannot represent exactly (NaN, Infinity, undefined at the top, BigInt). */
export function canonicalJson(value: unknown): string {
  if (typeof value === 'number' && !Number.isFinite(value)) throw new NotCanonicalizableError('non-finite number');
  let text: string | undefined;
  try {
    text = canonicalize(value);
  } catch (error) {
    throw new NotCanonicalizableError((error as Error).message);
  }
  if (text === undefined) throw new NotCanonicalizableError('value has no JSON form');
  return text;
}
