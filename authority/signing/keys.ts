/**
 * The authority's Ed25519 signing keys, one set per purpose: `permit` (permits, published as the
 * JWKS at GET /v1/permit-keys) and `audit` (export bundles and checkpoints, published as PEM at
 * GET /v1/audit/keys).
 *
 * Keys are generated and stored encrypted when none are configured, or loaded from PEM files in
 * production. Rotation publishes the new key before it signs (`publishBeforeUseMs`, so every gate
 * has fetched it by then) and keeps the old one published until every permit it signed has
 * expired.
 *
 * @example
 *   const keys = new SigningKeys(db, box, clock, { publishBeforeUseMs: 120_000 });
 *   await keys.ensure('permit');
 *   const { kid, privateKey } = await keys.active('permit');
 */
import { createPrivateKey, createPublicKey, generateKeyPairSync, type KeyObject } from 'node:crypto';
import { readFile } from 'node:fs/promises';
import { calculateJwkThumbprint, exportJWK, type JWK } from 'jose';
import { MAX_PERMIT_LIFETIME_SECONDS, PERMIT_LEEWAY_SECONDS } from '../../shared/permits/claims.js';
import type { Db, Queryable } from '../store/db.js';
import type { Clock } from '../time.js';
import type { SecretBox } from './secret-box.js';

export type KeyPurpose = 'permit' | 'audit';

export interface SigningKeyRecord {
  kid: string;
  purpose: KeyPurpose;
  publicJwk: JWK;
  source: 'generated' | 'file';
  createdAt: Date;
  activatesAt: Date;
  retiredAt: Date | null;
}

export interface ActiveKey {
  kid: string;
  privateKey: KeyObject;
}

export interface SigningKeysOptions {
  /** How long a rotated-in key is published before it signs. */
  publishBeforeUseMs: number;
  /** PEM (PKCS#8) private keys per purpose; the first signs, the rest stay published. */
  files?: Partial<Record<KeyPurpose, string[]>>;
  /** How long a replica keeps its view of the active key before reading it again. */
  cacheMs?: number;
}

export class KeyRotationError extends Error {
  readonly code = 'KEY_ROTATION_REFUSED';
}

/** The configured secret key cannot open the private keys the database holds. */
export class SecretKeyMismatchError extends Error {
  readonly code = 'SECRET_KEY_MISMATCH';
}

interface KeyRow {
  kid: string;
  purpose: KeyPurpose;
  public_jwk: JWK;
  private_key_encrypted: string | null;
  source: 'generated' | 'file';
  created_at: Date;
  activates_at: Date;
  retired_at: Date | null;
}

const fromRow = (row: KeyRow): SigningKeyRecord => ({
  kid: row.kid,
  purpose: row.purpose,
  publicJwk: row.public_jwk,
  source: row.source,
  createdAt: row.created_at,
  activatesAt: row.activates_at,
  retiredAt: row.retired_at,
});

/** A key that stopped signing is still needed until the last permit it signed has expired. */
const PUBLISHED_AFTER_RETIREMENT_MS = (MAX_PERMIT_LIFETIME_SECONDS + PERMIT_LEEWAY_SECONDS) * 1000;

async function publicJwkOf(key: KeyObject): Promise<{ kid: string; jwk: JWK }> {
  const jwk = await exportJWK(createPublicKey(key));
  const kid = await calculateJwkThumbprint(jwk);
  return { kid, jwk: { ...jwk, kid, alg: 'EdDSA', use: 'sig' } };
}

export class SigningKeys {
  private readonly fileKeys = new Map<KeyPurpose, ActiveKey>();
  private readonly cache = new Map<KeyPurpose, { key: ActiveKey; until: number }>();

  constructor(
    private readonly db: Db,
    private readonly box: SecretBox,
    private readonly clock: Clock,
    private readonly options: SigningKeysOptions,
  ) {}

  /** Makes sure `purpose` has a key to sign with: loads configured files, or generates one. */
  async ensure(purpose: KeyPurpose): Promise<void> {
    const files = this.options.files?.[purpose] ?? [];
    if (files.length > 0) {
      await this.registerFiles(purpose, files);
      return;
    }
    await this.db.transaction(async (tx) => {
      // Replicas starting together create one key, not one each.
      await tx.query('SELECT pg_advisory_xact_lock($1)', [purpose === 'permit' ? 7_270_002 : 7_270_003]);
      const existing = await tx.query("SELECT 1 FROM signing_keys WHERE purpose = $1 AND source = 'generated' LIMIT 1", [purpose]);
      if (existing.length === 0) await this.insertGenerated(tx, purpose, new Date(this.clock.now()));
    });
  }

  /**
   * Opens, with the secret key in use, every private key that signs now or will (of every
   * purpose: retired keys are never opened again); throws SecretKeyMismatchError naming those
   * that do not open. Checked before anything writes a key and when the authority starts: a key
   * sealed under another secret would fail every export, checkpoint or permit it should sign,
   * long after the change that caused it.
   */
  async checkSealed(): Promise<void> {
    const rows = await this.db.query<Pick<KeyRow, 'kid' | 'purpose' | 'private_key_encrypted'>>(
      `SELECT kid, purpose, private_key_encrypted FROM signing_keys
        WHERE private_key_encrypted IS NOT NULL AND (retired_at IS NULL OR retired_at > $1) ORDER BY purpose, activates_at`,
      [new Date(this.clock.now())],
    );
    const unopened = rows.filter((row) => {
      try {
        createPrivateKey(this.box.open(row.private_key_encrypted as string));
        return false;
      } catch {
        return true;
      }
    });
    if (unopened.length === 0) return;
    const which = unopened.map((row) => `${row.purpose} ${row.kid}`).join(', ');
    const mixed =
      unopened.length < rows.length
        ? ' The others do open: these keys were sealed under two different secrets (a rotation run with another secret). ' +
          'Once the newest key of each purpose has activated, the older ones retire and only the secret that sealed the newest is needed.'
        : '';
    throw new SecretKeyMismatchError(
      `the secret key does not open ${unopened.length} of the ${rows.length} signing keys in use (${which}): ` +
        "COUNTERSIGN_SECRET_KEY must be the secret the authority runs with (in embedded mode, the data directory's secret.key); nothing was changed." +
        mixed,
    );
  }

  /** The key that signs now (the newest generated key whose activation has come). */
  async active(purpose: KeyPurpose): Promise<ActiveKey> {
    const fromFile = this.fileKeys.get(purpose);
    if (fromFile) return fromFile;
    const now = this.clock.now();
    const cached = this.cache.get(purpose);
    if (cached && cached.until > now) return cached.key;
    const rows = await this.db.query<KeyRow>(
      `SELECT * FROM signing_keys WHERE purpose = $1 AND source = 'generated' AND activates_at <= $2
       ORDER BY activates_at DESC LIMIT 1`,
      [purpose, new Date(now)],
    );
    const row = rows[0];
    if (!row?.private_key_encrypted) throw new Error(`no ${purpose} signing key is active; run the authority once to create one`);
    const key = { kid: row.kid, privateKey: createPrivateKey(this.box.open(row.private_key_encrypted)) };
    // Never cache past the next activation, so a rotation takes effect on time.
    const next = await this.db.query<{ activates_at: Date }>(
      `SELECT activates_at FROM signing_keys WHERE purpose = $1 AND source = 'generated' AND activates_at > $2
       ORDER BY activates_at LIMIT 1`,
      [purpose, new Date(now)],
    );
    const until = Math.min(now + (this.options.cacheMs ?? 30_000), next[0]?.activates_at.getTime() ?? Infinity);
    this.cache.set(purpose, { key, until });
    return key;
  }

  /** Every key a verifier may still meet: not retired, or retired recently enough that its permits live. */
  async published(purpose: KeyPurpose): Promise<SigningKeyRecord[]> {
    const cutoff = new Date(this.clock.now() - (purpose === 'permit' ? PUBLISHED_AFTER_RETIREMENT_MS : Number.POSITIVE_INFINITY));
    const rows =
      purpose === 'permit'
        ? await this.db.query<KeyRow>(
            'SELECT * FROM signing_keys WHERE purpose = $1 AND (retired_at IS NULL OR retired_at > $2) ORDER BY activates_at DESC',
            [purpose, cutoff],
          )
        : await this.db.query<KeyRow>('SELECT * FROM signing_keys WHERE purpose = $1 ORDER BY activates_at DESC', [purpose]);
    return rows.map(fromRow);
  }

  /**
   * Adds a new generated key that signs from `now + publishBeforeUseMs`; the current key retires
   * at that moment. Refused while keys come from files (replace the files instead).
   */
  async rotate(purpose: KeyPurpose): Promise<SigningKeyRecord> {
    if ((this.options.files?.[purpose] ?? []).length > 0) {
      throw new KeyRotationError(`${purpose} keys are loaded from files: rotate by adding the new file first in the list`);
    }
    const record = await this.db.transaction(async (tx) => {
      const activatesAt = new Date(this.clock.now() + this.options.publishBeforeUseMs);
      await tx.query(
        "UPDATE signing_keys SET retired_at = $2 WHERE purpose = $1 AND source = 'generated' AND retired_at IS NULL",
        [purpose, activatesAt],
      );
      return this.insertGenerated(tx, purpose, activatesAt);
    });
    this.cache.delete(purpose);
    return record;
  }

  private async insertGenerated(tx: Queryable, purpose: KeyPurpose, activatesAt: Date): Promise<SigningKeyRecord> {
    const { privateKey } = generateKeyPairSync('ed25519');
    const { kid, jwk } = await publicJwkOf(privateKey);
    const sealed = this.box.seal(privateKey.export({ format: 'pem', type: 'pkcs8' }));
    const rows = await tx.query<KeyRow>(
      `INSERT INTO signing_keys (kid, purpose, public_jwk, private_key_encrypted, source, created_at, activates_at)
       VALUES ($1, $2, $3, $4, 'generated', $5, $6) RETURNING *`,
      [kid, purpose, jwk, sealed, new Date(this.clock.now()), activatesAt],
    );
    return fromRow(rows[0] as KeyRow);
  }

  private async registerFiles(purpose: KeyPurpose, files: string[]): Promise<void> {
    const now = new Date(this.clock.now());
    const kids: string[] = [];
    for (const [index, file] of files.entries()) {
      let privateKey: KeyObject;
      try {
        privateKey = createPrivateKey(await readFile(file, 'utf8'));
      } catch (error) {
        throw new Error(`cannot load the ${purpose} signing key ${file}: ${(error as Error).message}`);
      }
      if (privateKey.asymmetricKeyType !== 'ed25519') throw new Error(`${file} is not an Ed25519 private key`);
      const { kid, jwk } = await publicJwkOf(privateKey);
      // Only the public half is stored: the file stays the one place the private key lives.
      await this.db.query(
        `INSERT INTO signing_keys (kid, purpose, public_jwk, source, created_at, activates_at)
         VALUES ($1, $2, $3, 'file', $4, $4) ON CONFLICT (kid) DO UPDATE SET retired_at = NULL`,
        [kid, purpose, jwk, now],
      );
      if (index === 0) this.fileKeys.set(purpose, { kid, privateKey });
      kids.push(kid);
    }
    // Keys no longer configured (and generated keys, once files take over) stop signing now and
    // stay published only as long as their permits may live.
    await this.db.query(
      'UPDATE signing_keys SET retired_at = $2 WHERE purpose = $1 AND retired_at IS NULL AND NOT (kid = ANY($3))',
      [purpose, now, kids],
    );
  }
}
