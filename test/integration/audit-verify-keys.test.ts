/**
 * `countersign audit verify` picks the key by the bundle's signing_key_id: after an audit key
 * rotation the newest key (first in GET /v1/audit/keys) has signed nothing yet, and a bundle and
 * checkpoint signed before it still verify with the key set (a saved answer, a JWKS, or fetched
 * from the authority), while a tampered bundle, a kid the set lacks and a single wrong PEM fail
 * with a message that names the kid to use.
 */
import { createPublicKey, randomBytes } from 'node:crypto';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { mkdtemp, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import t from 'tap';
import { appendAuditEvents } from '../../authority/audit/chain.js';
import { latestCheckpoint, writeCheckpoints } from '../../authority/audit/checkpoints.js';
import { exportAuditBundle } from '../../authority/audit/export.js';
import { ed25519Kid } from '../../authority/audit/key-set.js';
import type { NewAuditEvent } from '../../authority/audit/types.js';
import { runAuditCommand } from '../../authority/cli/audit-commands.js';
import { createOrganization } from '../../authority/orgs/organizations.js';
import { auditKeysFrom } from '../../authority/signing/audit-keys.js';
import { SigningKeys } from '../../authority/signing/keys.js';
import { SecretBox } from '../../authority/signing/secret-box.js';
import { ManualClock } from '../helpers/clock.js';
import { dbBackends, postgresSkipReason } from '../helpers/db.js';

function events(orgId: string, count: number, at: Date): NewAuditEvent[] {
  return Array.from({ length: count }, (_, i) => ({
    orgId,
    type: 'evaluation.decided',
    actorId: `actor-${i}`,
    decision: 'allow',
    resourceType: 'evaluation',
    resourceId: `eval-${i}`,
    requestId: `req-${i}`,
    credential: 'api_key:test',
    occurredAt: at,
    details: { amount_usd: 10 + i },
  }));
}

/** A stand-in authority answering GET /v1/audit/keys to the one bearer credential it knows. */
async function keysServer(answer: unknown, apiKey: string): Promise<{ url: string; server: Server }> {
  const server = createServer((req, res) => {
    if (req.url !== '/v1/audit/keys') return void res.writeHead(404).end();
    if (req.headers.authorization !== `Bearer ${apiKey}`) return void res.writeHead(401, { 'content-type': 'application/json' }).end('{}');
    res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify(answer));
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, server };
}

for (const backend of dbBackends()) {
  t.test(`audit verify picks the key by kid after a rotation on ${backend.name}`, async (t) => {
    const { db, cleanup } = await backend.open();
    t.teardown(cleanup);
    const clock = new ManualClock();
    const keys = new SigningKeys(db, new SecretBox(randomBytes(32)), clock, { publishBeforeUseMs: 60_000, cacheMs: 0 });
    await keys.ensure('audit');
    const audit = auditKeysFrom(keys);
    const orgId = (await createOrganization(db, { name: `kid-${randomBytes(3).toString('hex')}` }, clock)).id;
    await db.transaction((tx) => appendAuditEvents(tx, events(orgId, 5, new Date(clock.now())), new Date(clock.now())));
    const oldBundle = await exportAuditBundle(db, orgId, await audit.signer(), {}, clock);
    await writeCheckpoints(db, await audit.signer(), clock);
    const checkpoint = await latestCheckpoint(db, orgId);

    const rotated = await keys.rotate('audit');
    const published = await audit.publicKeys();
    t.equal(published[0]?.key_id, rotated.kid, 'right after the rotation the first key is the new one');
    t.not(published[0]?.key_id, oldBundle.signing_key_id, 'which did not sign the bundle');
    t.equal(published[1]?.key_id, oldBundle.signing_key_id);
    t.equal(ed25519Kid(published[1]!.public_key_pem), oldBundle.signing_key_id, "a key's kid is its thumbprint, as the authority computes it");

    clock.advance(60_000);
    await db.transaction((tx) => appendAuditEvents(tx, events(orgId, 2, new Date(clock.now())), new Date(clock.now())));
    const newBundle = await exportAuditBundle(db, orgId, await audit.signer(), {}, clock);
    t.equal(newBundle.signing_key_id, rotated.kid, 'once active, the new key signs');

    const dir = await mkdtemp(join(tmpdir(), 'cs-verify-kid-'));
    const file = async (name: string, value: unknown) => {
      const path = join(dir, name);
      await writeFile(path, typeof value === 'string' ? value : JSON.stringify(value));
      return path;
    };
    const answer = { keys: published };
    const jwks = {
      keys: published.map((key) => ({ ...createPublicKey(key.public_key_pem).export({ format: 'jwk' }), kid: key.key_id, alg: 'EdDSA', use: 'sig' })),
    };
    const [oldPath, newPath, keysPath, jwksPath, checkpointPath] = await Promise.all([
      file('old.json', oldBundle),
      file('new.json', newBundle),
      file('keys.json', answer),
      file('jwks.json', jwks),
      file('checkpoint.json', checkpoint),
    ]);
    const tampered = JSON.parse(JSON.stringify(oldBundle));
    tampered.events[2].payload.actor_id = 'mallory';
    tampered.events[2].actor_id = 'mallory';
    const tamperedPath = await file('tampered.json', tampered);
    const unknownKid = await file('unknown-kid.json', { ...oldBundle, signing_key_id: 'not-a-kid' });
    const newestOnly = await file('newest.pem', published[0]!.public_key_pem);

    const verify = async (argv: string[], env: NodeJS.ProcessEnv = {}) => {
      const lines: string[] = [];
      const code = await runAuditCommand(['verify', ...argv], { out: (line) => lines.push(line), env });
      return { code, report: JSON.parse(lines.join('\n')) as { ok: boolean; problems: Array<{ kind: string; message: string }>; checked: Record<string, unknown> } };
    };

    for (const [what, set] of [['the saved answer of GET /v1/audit/keys', keysPath], ['a JWKS', jwksPath]] as const) {
      const old = await verify([oldPath, '--keys', set, '--checkpoint', checkpointPath]);
      t.equal(old.code, 0, `${what}: the bundle signed before the rotation verifies`);
      t.match(old.report.checked, { signing_key_id: oldBundle.signing_key_id, checkpoint: 'matched' }, 'and so does its checkpoint, by its own kid');
      t.equal((await verify([newPath, '--keys', set, '--checkpoint', checkpointPath])).code, 0, `${what}: the one signed after it too`);
      const bad = await verify([tamperedPath, '--keys', set]);
      t.equal(bad.code, 1, `${what}: a tampered bundle still fails`);
      t.ok(bad.report.problems.some((problem) => problem.kind === 'modified'));
    }

    const missing = await verify([unknownKid, '--keys', keysPath]);
    t.equal(missing.code, 1, 'a kid the set does not hold fails');
    t.match(missing.report.problems[0], { kind: 'signature', message: new RegExp(`no key with kid not-a-kid in the key set \\(kids: ${rotated.kid}, ${oldBundle.signing_key_id}\\)`) });

    const wrongPem = await verify([oldPath, '--key', newestOnly]);
    t.equal(wrongPem.code, 1, "--key with the newest key (the README's keys[0]) fails");
    t.match(wrongPem.report.problems[0]?.message, `verify with the key whose kid is ${oldBundle.signing_key_id}`, 'naming the kid the bundle wants');
    t.equal((await verify([newPath, '--key', newestOnly])).code, 0, '--key with the right key verifies');

    const { url, server } = await keysServer(answer, 'ask_test_reader');
    t.teardown(() => new Promise<void>((resolve) => server.close(() => resolve())));
    t.equal((await verify([oldPath, '--authority', url], { COUNTERSIGN_API_KEY: 'ask_test_reader' })).code, 0, '--authority fetches the set with COUNTERSIGN_API_KEY');
    t.equal((await verify([oldPath, '--authority', `${url}/`, '--api-key', 'ask_test_reader'])).code, 0, 'or with --api-key');
    await t.rejects(verify([oldPath, '--authority', url]), { code: 'AUDIT_KEYS_UNAVAILABLE', message: /401: set COUNTERSIGN_API_KEY .*audit:read/ }, 'without a credential it says which');

    await t.rejects(verify([oldPath, '--keys', keysPath, '--key', newestOnly]), { code: 'USAGE', message: /one of --keys, --authority and --key/ });
    await t.rejects(verify([oldPath]), { code: 'USAGE', message: /--keys FILE, --authority URL or --key PEM/ });
    await t.rejects(verify([oldPath, '--keys', await file('bad-set.json', { keys: [{ kty: 'EC', crv: 'P-256' }] })]), { code: 'USAGE', message: /keys\[0\] is not an Ed25519 JWK/ });
  });
}

const skipped = postgresSkipReason();
if (skipped) t.comment(skipped);
