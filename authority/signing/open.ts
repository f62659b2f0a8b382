/**
 * Opens the signing keys as configured: the secret key (COUNTERSIGN_SECRET_KEY, or the embedded
 * data directory's secret.key), key files when given, generated keys otherwise. Refuses
 * (SECRET_KEY_MISMATCH) when the secret key cannot open the stored keys, so neither the authority
 * nor `keys rotate-signing` runs with a secret other than the one the keys were sealed with.
 *
 * @example
 *   const box = await openSecretBox(config);
 *   const keys = await openSigning(db, box, config, systemClock); // throws SECRET_KEY_MISMATCH on a wrong secret
 */
import type { AuthorityConfig } from '../config.js';
import { ConfigError } from '../config.js';
import type { Db } from '../store/db.js';
import type { Clock } from '../time.js';
import { SigningKeys } from './keys.js';
import { embeddedSecretKey, parseSecretKey, SecretBox } from './secret-box.js';

export async function openSecretBox(config: AuthorityConfig): Promise<SecretBox> {
  if (config.secret_key !== undefined) return new SecretBox(parseSecretKey(config.secret_key));
  if (config.database_url !== undefined) {
    // Replicas on one database must share the key, and a data directory is not shared.
    throw new ConfigError('DATABASE_URL is set but COUNTERSIGN_SECRET_KEY is not: set it to the base64 of 32 random bytes (openssl rand -base64 32), the same on every replica.');
  }
  return new SecretBox(await embeddedSecretKey(config.data_dir));
}

export async function openSigning(db: Db, box: SecretBox, config: AuthorityConfig, clock: Clock): Promise<SigningKeys> {
  const keys = new SigningKeys(db, box, clock, {
    publishBeforeUseMs: config.signing.publish_before_use_seconds * 1000,
    files: { permit: config.signing.permit_key_files, audit: config.signing.audit_key_files },
  });
  // Before ensure() can write: a key sealed under a second secret would split the set.
  await keys.checkSealed();
  await keys.ensure('permit');
  await keys.ensure('audit');
  return keys;
}
