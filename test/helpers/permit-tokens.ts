/**
 * Forging permits the way an attacker would, for the tests of the verification core, the gate and
 * the proxy end to end.
 *
 * @example
 *   const outcome = await verifyPermit({ ...options, token: tamperSignature(token) }); // PERMIT_INVALID
 */

/** Flips one character in the middle of the signature (the last one may only hold padding bits). */
export function tamperSignature(token: string): string {
  const [header, payload, signature] = token.split('.') as [string, string, string];
  const at = 10;
  const flipped = signature[at] === 'A' ? 'B' : 'A';
  return `${header}.${payload}.${signature.slice(0, at)}${flipped}${signature.slice(at + 1)}`;
}
