/**
 * Secrets at rest (signing keys' private halves, later webhook signing secrets), encrypted with
 * AES-256-GCM under the configured secret key. The sealed form is
 * `v1.<iv>.<ciphertext>.<tag>` in base64url, so a changed or truncated value fails to open.
 *
 * @example
 *   const box = new SecretBox(await loadSecretKey(config));
 *   const sealed = box.seal('whsec_…');
 *   box.open(sealed); // 'whsec_…'
 */
import { createCipheriv, createDecipheriv, randomBytes } from 'node:crypto';
import { chmod, mkdir, readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';

const KEY_BYTES = 32;
const IV_BYTES = 12;

export class SecretKeyError extends Error {
  readonly code = 'SECRET_KEY_INVALID';
}

export class SecretBox {
  constructor(private readonly key: Buffer) {
    if (key.length !== KEY_BYTES) throw new SecretKeyError(`the secret key must be ${KEY_BYTES} bytes, got ${key.length}`);
  }

  seal(plaintext: string | Buffer): string {
    const iv = randomBytes(IV_BYTES);
    const cipher = createCipheriv('aes-256-gcm', this.key, iv);
    const ciphertext = Buffer.concat([cipher.update(plaintext), cipher.final()]);
    return ['v1', iv, ciphertext, cipher.getAuthTag()].map((part) => (typeof part === 'string' ? part : part.toString('base64url'))).join('.');
  }

  open(sealed: string): Buffer {
    const [version, iv, ciphertext, tag] = sealed.split('.');
    if (version !== 'v1' || iv === undefined || ciphertext === undefined || tag === undefined) {
      throw new SecretKeyError('not a sealed secret');
    }
    const decipher = createDecipheriv('aes-256-gcm', this.key, Buffer.from(iv, 'base64url'));
    decipher.setAuthTag(Buffer.from(tag, 'base64url'));
    try {
      return Buffer.concat([decipher.update(Buffer.from(ciphertext, 'base64url')), decipher.final()]);
    } catch {
      throw new SecretKeyError('a sealed secret could not be opened: wrong secret key, or the value was altered');
    }
  }
}

/** The key from configuration (base64 of 32 bytes). */
export function parseSecretKey(value: string): Buffer {
  const key = Buffer.from(value.trim(), 'base64');
  if (key.length !== KEY_BYTES) throw new SecretKeyError(`COUNTERSIGN_SECRET_KEY must be the base64 form of ${KEY_BYTES} random bytes (openssl rand -base64 32)`);
  return key;
}

/**
 * The embedded mode's key: `<dataDir>/secret.key` (0600), made on first use. Production sets
 * COUNTERSIGN_SECRET_KEY instead, so every replica shares one key and nothing sits beside the data.
 */
export async function embeddedSecretKey(dataDir: string): Promise<Buffer> {
  const file = join(dataDir, 'secret.key');
  try {
    return parseSecretKey(await readFile(file, 'utf8'));
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code !== 'ENOENT') throw error;
  }
  await mkdir(dataDir, { recursive: true, mode: 0o700 });
  const key = randomBytes(KEY_BYTES);
  await writeFile(file, `${key.toString('base64')}\n`, { mode: 0o600, flag: 'wx' });
  await chmod(file, 0o600);
  return key;
}
