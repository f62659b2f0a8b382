/**
 * Signing keys: private halves sealed at rest (AES-256-GCM), keys loaded from PEM files in
 * production (only their public halves stored; rotation refused), withdrawn when no longer
 * configured, and the secret key's embedded and configured forms.
 */
import { generateKeyPairSync, randomBytes } from 'node:crypto';
import { mkdtemp, readFile, stat, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import t from 'tap';
import { runSigningCommand } from '../../authority/cli/signing-commands.js';
import { parseAuthorityConfig } from '../../authority/config.js';
import { SigningKeys } from '../../authority/signing/keys.js';
import { openSecretBox, openSigning } from '../../authority/signing/open.js';
import { openDb } from '../../authority/store/open.js';
import { embeddedSecretKey, parseSecretKey, SecretBox } from '../../authority/signing/secret-box.js';
import { dbBackends, type OpenedDb } from '../helpers/db.js';
import { ManualClock } from '../helpers/clock.js';

t.test('sealed secrets open only with their key and unaltered', async (t) => {
  const box = new SecretBox(randomBytes(32));
  const sealed = box.seal('a private key');
  t.match(sealed, /^v1\.[\w-]+\.[\w-]+\.[\w-]+$/);
  t.not(box.seal('a private key'), sealed, 'a fresh IV each time');
  t.equal(box.open(sealed).toString(), 'a private key');
  t.throws(() => new SecretBox(randomBytes(32)).open(sealed), { code: 'SECRET_KEY_INVALID' }, 'another key cannot open it');
  const [v, iv, body, tag] = sealed.split('.');
  // Flip one bit of the ciphertext itself (editing a base64 character could leave it unchanged).
  const bytes = Buffer.from(body!, 'base64url');
  bytes[0] = (bytes[0] as number) ^ 0x01;
  const flipped = `${v}.${iv}.${bytes.toString('base64url')}.${tag}`;
  t.not(flipped, sealed);
  t.throws(() => box.open(flipped), { code: 'SECRET_KEY_INVALID' }, 'an altered value cannot be opened');
  t.throws(() => box.open('not sealed'), { code: 'SECRET_KEY_INVALID' });
  t.throws(() => new SecretBox(randomBytes(16)), { code: 'SECRET_KEY_INVALID' });
  t.throws(() => parseSecretKey('c2hvcnQ='), /32 random bytes/);
  t.equal(parseSecretKey(randomBytes(32).toString('base64')).length, 32);
});

t.test('the secret key: embedded file made once with mode 0600, configured key, refused without one on Postgres', async (t) => {
  const dir = await mkdtemp(join(tmpdir(), 'cs-secret-'));
  const first = await embeddedSecretKey(dir);
  t.equal((await stat(join(dir, 'secret.key'))).mode & 0o777, 0o600);
  t.same(await embeddedSecretKey(dir), first, 'the same key on the next start');
  const configured = randomBytes(32).toString('base64');
  const box = await openSecretBox(parseAuthorityConfig({ secret_key: configured, database_url: 'postgres://x/y' }));
  t.equal(new SecretBox(Buffer.from(configured, 'base64')).open(box.seal('x')).toString(), 'x');
  await t.rejects(openSecretBox(parseAuthorityConfig({ database_url: 'postgres://x/y' })), /COUNTERSIGN_SECRET_KEY/);
});

for (const backend of dbBackends()) {
  t.test(`keys from files on ${backend.name}`, async (t) => {
    const { db, cleanup } = await backend.open();
    t.teardown(cleanup);
    const dir = await mkdtemp(join(tmpdir(), 'cs-keys-'));
    const pem = (name: string) => {
      const file = join(dir, `${name}.pem`);
      return writeFile(file, generateKeyPairSync('ed25519').privateKey.export({ format: 'pem', type: 'pkcs8' })).then(() => file);
    };
    const [current, next] = [await pem('current'), await pem('next')];
    const clock = new ManualClock();
    const box = new SecretBox(randomBytes(32));

    const generated = new SigningKeys(db, box, clock, { publishBeforeUseMs: 0 });
    await generated.ensure('permit');
    const generatedKid = (await generated.active('permit')).kid;

    const fromFiles = new SigningKeys(db, box, clock, { publishBeforeUseMs: 0, files: { permit: [current] } });
    await fromFiles.ensure('permit');
    const active = await fromFiles.active('permit');
    t.not(active.kid, generatedKid, 'the file key signs');
    const stored = await db.query<{ private_key_encrypted: string | null; source: string }>('SELECT private_key_encrypted, source FROM signing_keys WHERE kid = $1', [active.kid]);
    t.same(stored, [{ private_key_encrypted: null, source: 'file' }], 'only its public half is stored');
    await t.rejects(fromFiles.rotate('permit'), { code: 'KEY_ROTATION_REFUSED' }, 'rotation is done by replacing files');

    const published = (await fromFiles.published('permit')).map((key) => key.kid);
    t.ok(published.includes(generatedKid), 'the generated key stays published while its permits may live');
    clock.advance(10 * 60_000);
    t.same((await fromFiles.published('permit')).map((key) => key.kid), [active.kid], 'then it is withdrawn');

    const rotated = new SigningKeys(db, box, clock, { publishBeforeUseMs: 0, files: { permit: [next, current] } });
    await rotated.ensure('permit');
    t.not((await rotated.active('permit')).kid, active.kid, 'the first file signs');
    t.equal((await rotated.published('permit')).length, 2, 'the second stays published');

    await writeFile(join(dir, 'bad.pem'), generateKeyPairSync('ec', { namedCurve: 'P-256' }).privateKey.export({ format: 'pem', type: 'pkcs8' }));
    await t.rejects(new SigningKeys(db, box, clock, { publishBeforeUseMs: 0, files: { permit: [join(dir, 'bad.pem')] } }).ensure('permit'), /not an Ed25519/);
    await t.rejects(new SigningKeys(db, box, clock, { publishBeforeUseMs: 0, files: { permit: [join(dir, 'missing.pem')] } }).ensure('permit'), /cannot load/);
    t.ok((await readFile(current, 'utf8')).includes('PRIVATE KEY'));
  });

  t.test(`generated keys: one per purpose even when replicas start together, sealed at rest on ${backend.name}`, async (t) => {
    const { db, cleanup } = await backend.open();
    t.teardown(cleanup);
    const box = new SecretBox(randomBytes(32));
    const clock = new ManualClock();
    await Promise.all(Array.from({ length: 4 }, () => new SigningKeys(db, box, clock, { publishBeforeUseMs: 0 }).ensure('audit')));
    const rows = await db.query<{ private_key_encrypted: string }>("SELECT private_key_encrypted FROM signing_keys WHERE purpose = 'audit'");
    t.equal(rows.length, 1);
    t.match(rows[0]?.private_key_encrypted, /^v1\./, 'the private key is sealed');
    t.notMatch(rows[0]?.private_key_encrypted, /PRIVATE KEY/);
  });
}

/**
 * Where `keys rotate-signing` runs: Postgres at the test database's URL, or the embedded database
 * of a fresh data directory (counted by opening it between commands, as the CLI does).
 */
async function rotateTarget(name: 'pglite' | 'postgres', opened: OpenedDb): Promise<{ config: string; env: NodeJS.ProcessEnv; countKeys(): Promise<number> }> {
  const dir = await mkdtemp(join(tmpdir(), 'cs-rotate-'));
  const config = join(dir, 'authority.yaml');
  await writeFile(config, `data_dir: ${join(dir, 'data')}\n`);
  const count = async (db: Pick<OpenedDb['db'], 'query'>) => Number((await db.query<{ n: string }>('SELECT count(*) AS n FROM signing_keys'))[0]?.n);
  if (name === 'postgres') return { config, env: { DATABASE_URL: opened.url }, countKeys: () => count(opened.db) };
  return {
    config,
    env: {},
    countKeys: async () => {
      const db = await openDb({ dataDir: join(dir, 'data') });
      try {
        return await count(db);
      } finally {
        await db.close();
      }
    },
  };
}

for (const backend of dbBackends()) {
  t.test(`keys rotate-signing refuses a secret key that does not open the stored keys, and writes nothing, on ${backend.name}`, async (t) => {
    const opened = await backend.open();
    t.teardown(opened.cleanup);
    const target = await rotateTarget(backend.name, opened);
    const right = randomBytes(32).toString('base64');
    const wrong = randomBytes(32).toString('base64');
    const rotate = async (secret: string, ...argv: string[]) => {
      const lines: string[] = [];
      await runSigningCommand([...argv, '--config', target.config], { out: (line) => lines.push(line), env: { ...target.env, COUNTERSIGN_SECRET_KEY: secret } });
      return JSON.parse(lines.join('\n')) as { kid: string; published: string[] };
    };

    const first = await rotate(right);
    const before = await target.countKeys();
    t.equal(before, 3, 'a permit and an audit key were made, and the permit key rotated');

    for (const purpose of ['permit', 'audit']) {
      await t.rejects(
        rotate(wrong, '--purpose', purpose),
        { code: 'SECRET_KEY_MISMATCH', message: /does not open 3 of the 3 signing keys in use.*COUNTERSIGN_SECRET_KEY must be the secret the authority runs with/ },
        `a wrong secret is refused (--purpose ${purpose})`,
      );
      t.equal(await target.countKeys(), before, 'and no key was written');
    }

    const second = await rotate(right, '--purpose', 'audit');
    t.equal(await target.countKeys(), before + 1, 'the right secret adds the new key');
    t.not(second.kid, first.kid);
    t.equal(second.published.length, 2, 'the new audit key is published beside the old one');
  });

  t.test(`the authority's signing keys do not open under a secret other than the one that sealed them on ${backend.name}`, async (t) => {
    const { db, cleanup } = await backend.open();
    t.teardown(cleanup);
    const clock = new ManualClock();
    const config = parseAuthorityConfig({});
    const right = new SecretBox(randomBytes(32));
    await openSigning(db, right, config, clock);
    // What startAuthority calls: a mismatched secret stops the start instead of failing every export later.
    await t.rejects(openSigning(db, new SecretBox(randomBytes(32)), config, clock), { code: 'SECRET_KEY_MISMATCH' });

    // A set already split across two secrets (a rotation run with another one) is named as such.
    const other = new SecretBox(randomBytes(32));
    await new SigningKeys(db, other, clock, { publishBeforeUseMs: 60_000 }).rotate('audit');
    await t.rejects(openSigning(db, right, config, clock), { code: 'SECRET_KEY_MISMATCH', message: /does not open 1 of the 3 .*sealed under two different secrets/ });
    await t.rejects(openSigning(db, other, config, clock), { code: 'SECRET_KEY_MISMATCH' }, 'neither secret opens the keys in use while both sign or will');
    // Retired keys are never opened again: once the new audit key has activated, the old one does not count.
    clock.advance(60_000);
    await t.rejects(openSigning(db, right, config, clock), { code: 'SECRET_KEY_MISMATCH', message: /does not open 1 of the 2 signing keys in use \(audit / });
    await new SigningKeys(db, other, clock, { publishBeforeUseMs: 0 }).rotate('permit');
    await t.resolves(openSigning(db, other, config, clock), 'once every key in use is sealed under one secret, it opens them');
  });
}
