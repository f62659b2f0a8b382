/**
 * The few cookies the console sets, read and written by hand: a name, a value that is already
 * URL-safe (base64url), and fixed attributes. No cookie library is needed for that.
 *
 * @example
 *   readCookie(request.headers.cookie, 'countersign_session'); // the value, or undefined
 *   setCookieHeader('countersign_session', token, { secure: true, sameSite: 'Strict', path: '/', maxAgeSeconds: 28_800 });
 */

export interface CookieAttributes {
  secure: boolean;
  sameSite: 'Strict' | 'Lax';
  path: string;
  /** 0 deletes the cookie. */
  maxAgeSeconds: number;
}

/** A value is only ever base64url (or empty, to delete): nothing to quote or escape. */
const COOKIE_VALUE = /^[A-Za-z0-9_.-]*$/;

export function readCookie(header: string | undefined, name: string): string | undefined {
  if (header === undefined) return undefined;
  for (const part of header.split(';')) {
    const separator = part.indexOf('=');
    if (separator < 0) continue;
    if (part.slice(0, separator).trim() !== name) continue;
    const value = part.slice(separator + 1).trim();
    return value !== '' && COOKIE_VALUE.test(value) ? value : undefined;
  }
  return undefined;
}

export function setCookieHeader(name: string, value: string, attributes: CookieAttributes): string {
  if (!COOKIE_VALUE.test(value)) throw new RangeError(`cookie ${name}: the value must be base64url`);
  return [
    `${name}=${value}`,
    `Path=${attributes.path}`,
    `Max-Age=${attributes.maxAgeSeconds}`,
    'HttpOnly',
    `SameSite=${attributes.sameSite}`,
    ...(attributes.secure ? ['Secure'] : []),
  ].join('; ');
}
