/**
 * API key secrets: `ask_live_<40 base62>` or `ask_test_<40 base62>`. Only the SHA-256 of the
 * whole secret is stored; comparisons of hashes are constant-time.
 *
 * @example
 *   const secret = generateApiKeySecret('live'); // ask_live_3kP…
 *   const hash = hashApiKeySecret(secret);        // 64 hex characters
 */
import { createHash, randomBytes, timingSafeEqual } from 'node:crypto';
import { API_KEY_PATTERN } from '../../shared/wire/api-keys.js';

const BASE62 = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789';
const SECRET_LENGTH = 40; // 40 base62 characters ≈ 238 bits

export type KeyEnvironment = 'live' | 'test';

export function generateApiKeySecret(environment: KeyEnvironment): string {
  let body = '';
  while (body.length < SECRET_LENGTH) {
    for (const byte of randomBytes(64)) {
      // 248 = 4 × 62: rejecting larger bytes keeps every character equally likely.
      if (byte < 248 && body.length < SECRET_LENGTH) body += BASE62[byte % 62];
    }
  }
  return `ask_${environment}_${body}`;
}

export function isApiKeySecret(value: string): boolean {
  return API_KEY_PATTERN.test(value);
}

export function hashApiKeySecret(secret: string): string {
  return createHash('sha256').update(secret, 'utf8').digest('hex');
}

export function hashesEqual(aHex: string, bHex: string): boolean {
  const a = Buffer.from(aHex, 'hex');
  const b = Buffer.from(bHex, 'hex');
  return a.length === b.length && timingSafeEqual(a, b);
}

/** What listings show of a key: enough to recognise it, far too little to use it. */
export function displayPrefix(secret: string): string {
  return secret.slice(0, 'ask_live_'.length + 4);
}
