/**
 * The offline bundle verifier against a real export (a PGlite-backed chain signed with a
 * generated Ed25519 key): an untouched bundle verifies, and each kind of tampering is reported
 * with its own kind and sequence. Also `countersign audit verify`'s exit codes.
 */
import { generateKeyPairSync, sign } from 'node:crypto';
import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import t from 'tap';
import { appendAuditEvents, computeEventHash } from '../../authority/audit/chain.js';
import { latestCheckpoint, writeCheckpoints } from '../../authority/audit/checkpoints.js';
import { exportAuditBundle } from '../../authority/audit/export.js';
import { GENESIS_HASH, type AuditSigner, type NewAuditEvent } from '../../authority/audit/types.js';
import { checkpointSigningText, verifyAuditBundle, type BundleReport } from '../../authority/audit/verify-bundle.js';
import { runAuditCommand } from '../../authority/cli/audit-commands.js';
import { createOrganization } from '../../authority/orgs/organizations.js';
import type { AuditBundle, AuditEventWire } from '../../shared/wire/audit.js';
import { ManualClock } from '../helpers/clock.js';
import { dbBackends } from '../helpers/db.js';

const EVENTS = 8;

function keyPair(keyId: string): { signer: AuditSigner; publicKeyPem: string } {
  const { privateKey, publicKey } = generateKeyPairSync('ed25519');
  return {
    signer: { keyId, sign: async (data) => new Uint8Array(sign(null, data, privateKey)) },
    publicKeyPem: publicKey.export({ type: 'spki', format: 'pem' }).toString(),
  };
}

const clock = new ManualClock();
const { signer, publicKeyPem } = keyPair('audit-1');
const other = keyPair('audit-other');

const pglite = dbBackends().find((backend) => backend.name === 'pglite');
const { db, cleanup } = await pglite!.open();
t.teardown(cleanup);
const orgId = (await createOrganization(db, { name: 'verified' }, clock)).id;
const emptyOrgId = (await createOrganization(db, { name: 'empty' }, clock)).id;
await db.transaction((tx) =>
  appendAuditEvents(
    tx,
    Array.from({ length: EVENTS }, (_, i): NewAuditEvent => ({
      orgId,
      type: i % 2 === 0 ? 'evaluation.decided' : 'permit.issued',
      actorId: `actor-${i}`,
      decision: i % 2 === 0 ? (i === 2 ? 'deny' : 'allow') : null,
      resourceType: i % 2 === 0 ? 'evaluation' : 'permit',
      resourceId: `resource-${i}`,
      requestId: `req-${i}`,
      credential: 'api_key:test',
      occurredAt: new Date(clock.now() + i),
      details: { amount_usd: 100 + i, tags: ['a', 'b'], note: 'é ✓ "quoted"' },
    })),
    new Date(clock.now()),
  ),
);
const original = await exportAuditBundle(db, orgId, signer, {}, clock);

/** A bundle as read back from a file: what an auditor would hold. */
const fresh = (): AuditBundle => JSON.parse(JSON.stringify(original)) as AuditBundle;
const at = (bundle: AuditBundle, index: number): AuditEventWire => bundle.events[index] as AuditEventWire;
const found = (report: BundleReport) => report.problems.map((problem) => [problem.kind, problem.sequence]);

t.test('an untouched bundle verifies', async (t) => {
  t.match(original, { org_id: orgId, event_count: EVENTS, signing_key_id: 'audit-1', chain_head_hash: original.events.at(-1)?.hash });
  t.match(original.signature, /^[A-Za-z0-9_-]{86}$/, 'base64url without padding');
  const report = verifyAuditBundle(fresh(), publicKeyPem);
  t.same(report.problems, []);
  t.ok(report.ok);
  t.match(report.checked, { events: EVENTS, first_sequence: 1, last_sequence: EVENTS, signing_key_id: 'audit-1', checkpoint: 'none' });

  const empty = await exportAuditBundle(db, emptyOrgId, signer, {}, clock);
  t.match(empty, { event_count: 0, events: [], chain_head_hash: GENESIS_HASH });
  t.ok(verifyAuditBundle(empty, publicKeyPem).ok, 'an empty chain exports and verifies');

  const range = await exportAuditBundle(db, orgId, signer, { fromSequence: 3, toSequence: 6 }, clock);
  t.same(range.events.map((e) => e.sequence), [3, 4, 5, 6]);
  t.equal(range.chain_head_hash, at(original, 5).hash, 'the head of a range is its last event');
  t.same(verifyAuditBundle(range, publicKeyPem).problems, [], 'a range verifies on its own');
  await t.rejects(exportAuditBundle(db, orgId, signer, { fromSequence: 5, toSequence: 4 }, clock), { code: 'invalid_request' });
});

t.test('a changed payload is "modified" at its sequence', async (t) => {
  const bundle = fresh();
  at(bundle, 2).payload.details['amount_usd'] = 1;
  t.same(found(verifyAuditBundle(bundle, publicKeyPem)), [['signature', null], ['modified', 3]]);
});

t.test('a field outside the payload that disagrees with it is "modified"', async (t) => {
  const bundle = fresh();
  t.equal(at(bundle, 2).decision, 'deny');
  at(bundle, 2).decision = 'allow';
  const report = verifyAuditBundle(bundle, publicKeyPem);
  t.same(found(report), [['signature', null], ['modified', 3]]);
  t.match(report.problems[1]?.message, /decision outside the payload/);
});

t.test('an event rewritten with a recomputed hash is "modified"', async (t) => {
  const bundle = fresh();
  const event = at(bundle, 2);
  event.payload.details['amount_usd'] = 1;
  event.hash = computeEventHash(event.previous_hash, event.payload);
  const report = verifyAuditBundle(bundle, publicKeyPem);
  t.same(found(report), [['signature', null], ['modified', 3]]);
  t.match(report.problems[1]?.message, /rewritten and its hash recomputed/);
});

t.test('an event replaced wholesale (hash and links recomputed) is "modified"', async (t) => {
  const bundle = fresh();
  const event = at(bundle, 3);
  event.payload.details = { replaced: true };
  event.previous_hash = 'a'.repeat(64);
  event.hash = computeEventHash(event.previous_hash, event.payload);
  const report = verifyAuditBundle(bundle, publicKeyPem);
  t.same(found(report), [['signature', null], ['modified', 4]]);
  t.match(report.problems[1]?.message, /event 4 was replaced/);
});

t.test('organizations: a changed bundle org_id, an event of another organization', async (t) => {
  const renamed = fresh();
  renamed.org_id = emptyOrgId;
  t.same(found(verifyAuditBundle(renamed, publicKeyPem)), [['signature', null], ['modified', null]]);

  const mixed = fresh();
  const foreign = forge(mixed, 2, at(mixed, 1).hash, 3);
  foreign.organization_id = foreign.payload.org_id = emptyOrgId;
  foreign.hash = computeEventHash(foreign.previous_hash, foreign.payload);
  mixed.events.splice(3, 0, foreign);
  t.same(found(verifyAuditBundle(mixed, publicKeyPem)), [['signature', null], ['count', null], ['inserted', 3]]);
});

t.test('a removed middle event is "removed" at its sequence', async (t) => {
  const bundle = fresh();
  bundle.events.splice(4, 1);
  t.same(found(verifyAuditBundle(bundle, publicKeyPem)), [['signature', null], ['count', null], ['removed', 5]]);
});

t.test('a removed last event breaks the count and the head', async (t) => {
  const bundle = fresh();
  bundle.events.pop();
  const report = verifyAuditBundle(bundle, publicKeyPem);
  t.same(found(report), [['signature', null], ['count', null], ['head', EVENTS - 1], ['removed', EVENTS]]);
  t.match(report.problems.find((p) => p.kind === 'removed')?.message, /cut short/);
});

t.test('a removed first event is "removed" at 1', async (t) => {
  const bundle = fresh();
  bundle.events.shift();
  t.same(found(verifyAuditBundle(bundle, publicKeyPem)), [['signature', null], ['count', null], ['removed', 1]]);
});

t.test('swapped events are "reordered"', async (t) => {
  const bundle = fresh();
  [bundle.events[2], bundle.events[3]] = [at(bundle, 3), at(bundle, 2)];
  t.same(found(verifyAuditBundle(bundle, publicKeyPem)), [['signature', null], ['reordered', 4]], 'the event that must move');
  const moved = fresh();
  moved.events.push(...moved.events.splice(1, 1));
  t.same(found(verifyAuditBundle(moved, publicKeyPem)), [['signature', null], ['reordered', 2]], 'one moved event, not all it jumped over');
});

/** A forged copy of event `index` with a new id and details and a correctly recomputed hash. */
function forge(bundle: AuditBundle, index: number, previousHash: string, sequence: number): AuditEventWire {
  const forged = JSON.parse(JSON.stringify(at(bundle, index))) as AuditEventWire;
  forged.id = forged.payload.id = '00000000-0000-4000-8000-00000000f0f0';
  forged.sequence = forged.payload.sequence = sequence;
  forged.payload.details = { amount_usd: 0, note: 'forged' };
  forged.previous_hash = previousHash;
  forged.hash = computeEventHash(previousHash, forged.payload);
  return forged;
}

t.test('a forged event with a correct hash is "inserted"', async (t) => {
  const bundle = fresh();
  // Claims sequence 4 and links to event 3, exactly like the genuine event 4.
  bundle.events.splice(3, 0, forge(bundle, 3, at(bundle, 2).hash, 4));
  const report = verifyAuditBundle(bundle, publicKeyPem);
  t.same(found(report), [['signature', null], ['count', null], ['inserted', 4]]);
  t.match(report.problems.find((p) => p.kind === 'inserted')?.message, /00000000-0000-4000-8000-00000000f0f0/, 'names the forged one');

  const appended = fresh();
  appended.events.push(forge(appended, EVENTS - 1, at(appended, EVENTS - 1).hash, EVENTS + 1));
  t.same(found(verifyAuditBundle(appended, publicKeyPem)), [['signature', null], ['count', null], ['inserted', EVENTS + 1]], 'appended after the signed head');

  const duplicated = fresh();
  duplicated.events.splice(5, 0, at(duplicated, 5));
  t.same(found(verifyAuditBundle(duplicated, publicKeyPem)), [['signature', null], ['count', null], ['inserted', 6]], 'a copy');
});

t.test('a wrong key or a changed signature is "signature"', async (t) => {
  t.same(found(verifyAuditBundle(fresh(), other.publicKeyPem)), [['signature', null]], 'wrong public key');
  const bundle = fresh();
  const bytes = Buffer.from(bundle.signature, 'base64url');
  bytes[10] = (bytes[10] as number) ^ 0x01;
  bundle.signature = bytes.toString('base64url');
  t.same(found(verifyAuditBundle(bundle, publicKeyPem)), [['signature', null]], 'one flipped bit');
  const report = verifyAuditBundle(fresh(), 'not a key');
  t.same(found(report), [['signature', null]]);
  t.match(report.problems[0]?.message, /not a PEM public key/);
  const changedHead = fresh();
  changedHead.signed_at = new Date(0).toISOString();
  t.same(found(verifyAuditBundle(changedHead, publicKeyPem)), [['signature', null]], 'a changed header field');
});

t.test('count and head are checked on their own', async (t) => {
  const counted = fresh();
  counted.event_count = EVENTS + 3;
  t.same(found(verifyAuditBundle(counted, publicKeyPem)), [['signature', null], ['count', null]]);
  const headed = fresh();
  headed.chain_head_hash = 'f'.repeat(64);
  t.same(found(verifyAuditBundle(headed, publicKeyPem)), [['signature', null], ['head', EVENTS]]);
});

t.test('malformed input is "malformed"', async (t) => {
  t.same(found(verifyAuditBundle('nope', publicKeyPem)), [['malformed', null]]);
  t.same(found(verifyAuditBundle({ ...fresh(), event_count: 'eight' }, publicKeyPem)), [['malformed', null]]);
  const bundle = fresh();
  delete (at(bundle, 3) as Partial<AuditEventWire>).hash;
  t.same(found(verifyAuditBundle(bundle, publicKeyPem)), [['signature', null], ['malformed', 4]], 'a broken event is not also called removed');
});

t.test('a checkpoint exposes a truncated tail', async (t) => {
  t.equal(await writeCheckpoints(db, signer, clock), 1);
  const checkpoint = await latestCheckpoint(db, orgId);
  t.equal(checkpoint?.sequence, EVENTS);
  const matched = verifyAuditBundle(fresh(), publicKeyPem, { checkpoint });
  t.same(matched.problems, []);
  t.equal(matched.checked.checkpoint, 'matched');

  // Someone with the database's superuser cuts the last two events and resets the head: a new
  // export is consistent and correctly signed, but cannot reach the checkpoint.
  await db.exec(`
    ALTER TABLE audit_events DISABLE TRIGGER audit_events_insert_only;
    DELETE FROM audit_events WHERE org_id = '${orgId}' AND sequence > ${EVENTS - 2};
    ALTER TABLE audit_events ENABLE TRIGGER audit_events_insert_only;
  `);
  await db.query(`UPDATE audit_chain_heads SET sequence = $2, head_hash = $3 WHERE org_id = $1`, [orgId, EVENTS - 2, at(original, EVENTS - 3).hash]);
  const truncated = await exportAuditBundle(db, orgId, signer, {}, clock);
  t.same(verifyAuditBundle(truncated, publicKeyPem).problems, [], 'on its own the truncated chain looks fine');
  const report = verifyAuditBundle(truncated, publicKeyPem, { checkpoint });
  t.same(found(report), [['checkpoint', EVENTS]]);
  t.match(report.problems[0]?.message, /truncated/);
  t.equal(report.checked.checkpoint, 'failed');

  const forgedCheckpoint = { ...checkpoint!, sequence: 2 };
  t.same(found(verifyAuditBundle(fresh(), publicKeyPem, { checkpoint: forgedCheckpoint })), [['checkpoint', 2]], 'an altered checkpoint is refused');
  t.same(found(verifyAuditBundle(fresh(), publicKeyPem, { checkpoint, checkpointPublicKeyPem: other.publicKeyPem })), [['checkpoint', EVENTS]], 'a checkpoint under another key is refused');
  const range = await exportAuditBundle(db, orgId, signer, { fromSequence: 2 }, clock);
  const early = { ...checkpoint!, sequence: 1, head_hash: at(original, 0).hash };
  const resigned = { ...early, signature: Buffer.from(await signer.sign(Buffer.from(checkpointSigningText(early)))).toString('base64url') };
  const notCovered = verifyAuditBundle(range, publicKeyPem, { checkpoint: resigned });
  t.same(notCovered.problems, []);
  t.equal(notCovered.checked.checkpoint, 'not_covered', 'a checkpoint before the range says nothing about it');
});

t.test('countersign audit verify: exit 0 when intact, 1 on any problem', async (t) => {
  const dir = t.testdir({});
  const lines: string[] = [];
  const io = { out: (line: string) => void lines.push(line) };
  await writeFile(join(dir, 'bundle.json'), JSON.stringify(original));
  await writeFile(join(dir, 'key.pem'), publicKeyPem);
  await writeFile(join(dir, 'other.pem'), other.publicKeyPem);
  const tampered = fresh();
  tampered.events.splice(1, 1);
  await writeFile(join(dir, 'tampered.json'), JSON.stringify(tampered));
  await writeFile(join(dir, 'garbage.json'), '{ not json');

  t.equal(await runAuditCommand(['verify', join(dir, 'bundle.json'), '--key', join(dir, 'key.pem')], io), 0);
  t.match(JSON.parse(lines.at(-1) as string), { ok: true, problems: [] });
  t.equal(await runAuditCommand(['verify', join(dir, 'tampered.json'), '--key', join(dir, 'key.pem')], io), 1);
  t.match(JSON.parse(lines.at(-1) as string), { ok: false, problems: [{ kind: 'signature' }, { kind: 'count' }, { kind: 'removed', sequence: 2 }] });
  t.equal(await runAuditCommand(['verify', join(dir, 'bundle.json'), '--key', join(dir, 'other.pem')], io), 1, 'wrong key');
  t.equal(await runAuditCommand(['verify', join(dir, 'garbage.json'), '--key', join(dir, 'key.pem')], io), 1, 'not JSON');
  t.match(JSON.parse(lines.at(-1) as string), { problems: [{ kind: 'malformed' }] });

  await writeFile(join(dir, 'checkpoint.json'), JSON.stringify(await latestCheckpoint(db, orgId)));
  const withCheckpoint = ['verify', join(dir, 'bundle.json'), '--key', join(dir, 'key.pem'), '--checkpoint', join(dir, 'checkpoint.json')];
  t.equal(await runAuditCommand(withCheckpoint, io), 0, 'the bundle reaches the checkpoint');
  t.match(JSON.parse(lines.at(-1) as string), { checked: { checkpoint: 'matched' } });
  t.equal(await runAuditCommand([...withCheckpoint, '--checkpoint-key', join(dir, 'other.pem')], io), 1, 'checkpoint under another key');

  await t.rejects(runAuditCommand(['verify', join(dir, 'bundle.json')], io), { code: 'USAGE' }, '--key is required');
  await t.rejects(runAuditCommand(['check'], io), { code: 'USAGE' });
  await t.rejects(runAuditCommand(['verify', join(dir, 'missing.json'), '--key', join(dir, 'key.pem')], io), { code: 'USAGE' }, 'an unreadable file');
});
