/**
 * The audit chain on every backend: sequences 1..n with a valid chain, independent chains per
 * organization, gap-free under concurrent appends, insert-only, atomic with the caller's
 * transaction (rollback and forced failure), listing with filters and cursors, and checkpoints.
 */
import { generateKeyPairSync, sign } from 'node:crypto';
import t, { type Test } from 'tap';
import { appendAuditEvent, appendAuditEvents, computeEventHash } from '../../authority/audit/chain.js';
import { latestCheckpoint, writeCheckpoints } from '../../authority/audit/checkpoints.js';
import { auditCursor, listAuditEvents, parseAuditCursor } from '../../authority/audit/events.js';
import { GENESIS_HASH, type AuditSigner, type NewAuditEvent } from '../../authority/audit/types.js';
import { signatureProblem, checkpointSigningText } from '../../authority/audit/verify-bundle.js';
import { createOrganization } from '../../authority/orgs/organizations.js';
import type { Db, Queryable } from '../../authority/store/db.js';
import { CountersignError } from '../../shared/errors.js';
import { ManualClock } from '../helpers/clock.js';
import { dbBackends, postgresSkipReason } from '../helpers/db.js';

const T0 = Date.parse('2026-11-21T12:00:00.000Z');

function event(orgId: string, overrides: Partial<NewAuditEvent> = {}): NewAuditEvent {
  return {
    orgId,
    type: 'evaluation.decided',
    actorId: 'alice',
    decision: 'allow',
    resourceType: 'evaluation',
    resourceId: 'eval-1',
    requestId: 'req-1',
    credential: 'api_key:k1',
    occurredAt: new Date(T0),
    details: { action_type: 'deploy.production', amount_usd: 12.5, nested: { z: 1, a: [true, null] } },
    ...overrides,
  };
}

interface StoredRow {
  sequence: number;
  hash: string;
  previous_hash: string;
  payload: Record<string, unknown>;
}

/** Recomputes every hash and link of an organization's chain from what the database holds. */
async function assertValidChain(t: Test, db: Queryable, orgId: string, expected: number): Promise<void> {
  const rows = await db.query<StoredRow>('SELECT sequence, hash, previous_hash, payload FROM audit_events WHERE org_id = $1 ORDER BY sequence', [orgId]);
  t.same(rows.map((row) => row.sequence), Array.from({ length: expected }, (_, i) => i + 1), `sequences 1..${expected}, no gap`);
  let previous = GENESIS_HASH;
  let broken = 0;
  for (const row of rows) {
    if (row.previous_hash !== previous || computeEventHash(row.previous_hash, row.payload) !== row.hash || row.payload['sequence'] !== row.sequence) broken += 1;
    previous = row.hash;
  }
  t.equal(broken, 0, 'every hash recomputes and links to its predecessor');
  const [head] = await db.query<{ sequence: number; head_hash: string }>('SELECT sequence, head_hash FROM audit_chain_heads WHERE org_id = $1', [orgId]);
  t.same(head, { sequence: expected, head_hash: previous }, 'the head is the last event');
}

function testSigner(): { signer: AuditSigner; publicKeyPem: string } {
  const { privateKey, publicKey } = generateKeyPairSync('ed25519');
  return {
    signer: { keyId: 'audit-test', sign: async (data) => new Uint8Array(sign(null, data, privateKey)) },
    publicKeyPem: publicKey.export({ type: 'spki', format: 'pem' }).toString(),
  };
}

async function newOrg(db: Db, name: string): Promise<string> {
  return (await createOrganization(db, { name: `${name}-${Math.random().toString(36).slice(2, 8)}` }, new ManualClock())).id;
}

for (const backend of dbBackends()) {
  t.test(`appends form a valid chain per organization on ${backend.name}`, async (t) => {
    const { db, cleanup } = await backend.open();
    t.teardown(cleanup);
    const [acme, globex] = [await newOrg(db, 'acme'), await newOrg(db, 'globex')];

    const first = await db.transaction((tx) => appendAuditEvent(tx, event(acme), new Date(T0 + 5)));
    t.equal(first.sequence, 1);
    t.equal(first.previousHash, GENESIS_HASH, 'the first event starts from genesis');
    t.equal(first.hash, computeEventHash(GENESIS_HASH, first.payload));
    t.same(first.payload, {
      id: first.id,
      org_id: acme,
      sequence: 1,
      type: 'evaluation.decided',
      actor_id: 'alice',
      decision: 'allow',
      resource_type: 'evaluation',
      resource_id: 'eval-1',
      request_id: 'req-1',
      credential: 'api_key:k1',
      occurred_at: '2026-11-21T12:00:00.000Z',
      recorded_at: '2026-11-21T12:00:00.005Z',
      details: { action_type: 'deploy.production', amount_usd: 12.5, nested: { z: 1, a: [true, null] } },
    }, 'the payload holds every fact, with ISO timestamps');

    const pair = await db.transaction((tx) =>
      appendAuditEvents(tx, [event(acme), event(acme, { type: 'permit.issued', resourceType: 'permit', resourceId: 'p-1' })], new Date(T0)),
    );
    t.same(pair.map((e) => e.sequence), [2, 3], 'several events in one call take consecutive sequences');
    t.equal(pair[1]?.previousHash, pair[0]?.hash);
    t.same(await db.transaction((tx) => appendAuditEvents(tx, [], new Date(T0))), [], 'nothing to append is a no-op');
    const [left, right] = [await newOrg(db, 'mixed-left'), await newOrg(db, 'mixed-right')];
    const mixed = await db.transaction((tx) => appendAuditEvents(tx, [event(left), event(right), event(left)], new Date(T0)));
    t.same(
      mixed.map((e) => [e.orgId, e.sequence]),
      [[left, 1], [right, 1], [left, 2]],
      'one call appends to each organization its own consecutive sequences',
    );
    t.equal(mixed[2]?.previousHash, mixed[0]?.hash, 'and links each chain to itself');

    for (const details of [{ text: 'a\u0000b' }, { n: Number.NaN }, { s: '\ud800' }]) {
      await t.rejects(
        db.transaction((tx) => appendAuditEvent(tx, event(acme, { details }), new Date(T0))),
        { code: 'AUDIT_PAYLOAD_INVALID' },
        'details the chain cannot hold are refused before anything is written',
      );
    }
    const backslash = await db.transaction((tx) => appendAuditEvent(tx, event(globex, { details: { text: 'C:\\u0000' } }), new Date(T0)));
    t.equal(backslash.payload.details['text'], 'C:\\u0000', 'a backslash followed by u0000 is just text');
    for (let i = 0; i < 2; i += 1) await db.transaction((tx) => appendAuditEvent(tx, event(globex), new Date(T0)));
    await assertValidChain(t, db, acme, 3);
    await assertValidChain(t, db, globex, 3);
    const [stored] = await db.query<StoredRow>('SELECT sequence, hash, previous_hash, payload FROM audit_events WHERE id = $1', [first.id]);
    t.same(stored?.payload, first.payload, 'the stored payload is the hashed one');
  });

  t.test(`50 concurrent appends in one organization stay gap-free on ${backend.name}`, async (t) => {
    const { db, cleanup } = await backend.open();
    t.teardown(cleanup);
    const org = await newOrg(db, 'busy');
    // The first appends race to create the head row too.
    const appended = await Promise.all(
      Array.from({ length: 50 }, (_, i) => db.transaction((tx) => appendAuditEvent(tx, event(org, { requestId: `req-${i}` }), new Date(T0)))),
    );
    t.same(appended.map((e) => e.sequence).sort((a, b) => a - b), Array.from({ length: 50 }, (_, i) => i + 1));
    await assertValidChain(t, db, org, 50);
  });

  t.test(`audit_events is insert-only on ${backend.name}`, async (t) => {
    const { db, cleanup } = await backend.open();
    t.teardown(cleanup);
    const org = await newOrg(db, 'frozen');
    const appended = await db.transaction((tx) => appendAuditEvent(tx, event(org), new Date(T0)));
    await t.rejects(db.query(`UPDATE audit_events SET decision = 'deny' WHERE id = $1`, [appended.id]), /insert-only: UPDATE/);
    await t.rejects(db.query('DELETE FROM audit_events WHERE id = $1', [appended.id]), /insert-only: DELETE/);
    await t.rejects(db.exec('TRUNCATE audit_events'), /insert-only: TRUNCATE/);
    await writeCheckpoints(db, testSigner().signer, new ManualClock());
    await t.rejects(db.query('DELETE FROM audit_checkpoints'), /insert-only: DELETE/, 'checkpoints too');
    await assertValidChain(t, db, org, 1);
  });

  t.test(`an append is atomic with its caller's transaction on ${backend.name}`, async (t) => {
    const { db, cleanup } = await backend.open();
    t.teardown(cleanup);
    const org = await newOrg(db, 'atomic');
    await db.transaction((tx) => appendAuditEvent(tx, event(org), new Date(T0)));

    await t.rejects(
      db.transaction(async (tx) => {
        await appendAuditEvent(tx, event(org, { requestId: 'rolled-back' }), new Date(T0));
        throw new Error('the state change failed after the append');
      }),
      /state change failed/,
    );
    t.same(await db.query(`SELECT id FROM audit_events WHERE request_id = 'rolled-back'`), [], 'no event left behind');
    await assertValidChain(t, db, org, 1);

    // A forced failure of the insert itself, for one organization only.
    const doomed = await newOrg(db, 'doomed');
    await db.exec(`
      CREATE FUNCTION test_fail_audit_insert() RETURNS trigger LANGUAGE plpgsql AS $$
      BEGIN RAISE EXCEPTION 'audit storage unavailable (test)'; END; $$;
      CREATE TRIGGER test_fail_audit_insert BEFORE INSERT ON audit_events
        FOR EACH ROW WHEN (NEW.org_id = '${doomed}') EXECUTE FUNCTION test_fail_audit_insert();
    `);
    await db.exec(`CREATE TABLE test_state_changes (org_id uuid)`);
    await t.rejects(
      db.transaction(async (tx) => {
        await tx.query('INSERT INTO test_state_changes (org_id) VALUES ($1)', [doomed]);
        await appendAuditEvent(tx, event(doomed), new Date(T0));
      }),
      /audit storage unavailable/,
      'the append fails, and so does the transaction',
    );
    t.same(await db.query('SELECT org_id FROM test_state_changes'), [], 'the state change it would have recorded is gone too');
    t.same(await db.query('SELECT sequence FROM audit_chain_heads WHERE org_id = $1 AND sequence > 0', [doomed]), [], 'the head did not move');
    await db.transaction((tx) => appendAuditEvent(tx, event(org), new Date(T0)));
    await assertValidChain(t, db, org, 2);
  });

  t.test(`listing filters and cursor paging on ${backend.name}`, async (t) => {
    const { db, cleanup } = await backend.open();
    t.teardown(cleanup);
    const [org, other] = [await newOrg(db, 'listed'), await newOrg(db, 'other')];
    const plan: Array<Partial<NewAuditEvent>> = [];
    for (let i = 0; i < 12; i += 1) {
      plan.push({
        type: i % 3 === 0 ? 'permit.issued' : 'evaluation.decided',
        actorId: i % 2 === 0 ? 'alice' : 'bob',
        requestId: `req-${Math.floor(i / 2)}`,
        resourceId: `res-${i % 4}`,
        occurredAt: new Date(T0 + i * 60_000),
      });
    }
    await db.transaction((tx) => appendAuditEvents(tx, plan.map((p) => event(org, p)), new Date(T0)));
    await db.transaction((tx) => appendAuditEvent(tx, event(other), new Date(T0)));

    const sequences = async (filters: Parameters<typeof listAuditEvents>[2]) => {
      const page = await listAuditEvents(db, org, filters);
      return { sequences: page.events.map((e) => e.sequence), total: page.total, next: page.nextCursor };
    };
    t.same(await sequences({ limit: 50 }), { sequences: Array.from({ length: 12 }, (_, i) => i + 1), total: 12, next: null }, 'everything, in order; another organization never shows');
    t.same((await sequences({ types: ['permit.issued'], limit: 50 })).sequences, [1, 4, 7, 10]);
    t.same((await sequences({ types: ['permit.issued', 'evaluation.decided'], limit: 50 })).total, 12);
    t.same((await sequences({ actorId: 'bob', limit: 50 })).sequences, [2, 4, 6, 8, 10, 12]);
    t.same((await sequences({ requestId: 'req-2', limit: 50 })).sequences, [5, 6]);
    t.same((await sequences({ resourceId: 'res-1', limit: 50 })).sequences, [2, 6, 10]);
    t.same(
      (await sequences({ from: new Date(T0 + 3 * 60_000), to: new Date(T0 + 6 * 60_000), limit: 50 })).sequences,
      [4, 5, 6],
      'from is inclusive, to exclusive',
    );

    const seen: number[] = [];
    let cursor: string | null = null;
    let pages = 0;
    do {
      const page: Awaited<ReturnType<typeof listAuditEvents>> = await listAuditEvents(db, org, {
        actorId: 'alice',
        limit: 2,
        afterSequence: cursor === null ? undefined : parseAuditCursor(cursor),
      });
      t.equal(page.total, 6, 'total counts every match on every page');
      seen.push(...page.events.map((e) => e.sequence));
      cursor = page.nextCursor;
      pages += 1;
    } while (cursor !== null);
    t.same(seen, [1, 3, 5, 7, 9, 11], 'cursor pages cover the matches once each');
    t.equal(pages, 3, 'the last full page has no next cursor');

    t.equal(parseAuditCursor(auditCursor(42)), 42);
    for (const bad of ['', 'not a cursor', auditCursor(0), Buffer.from('12abc').toString('base64url'), Buffer.from('7').toString('base64')+ '=']) {
      t.throws(() => parseAuditCursor(bad), CountersignError, `cursor ${JSON.stringify(bad)} is refused`);
    }
  });

  t.test(`checkpoints are written when a head advances on ${backend.name}`, async (t) => {
    const { db, cleanup } = await backend.open();
    t.teardown(cleanup);
    const clock = new ManualClock();
    const { signer, publicKeyPem } = testSigner();
    const [acme, globex] = [await newOrg(db, 'acme'), await newOrg(db, 'globex')];
    t.equal(await writeCheckpoints(db, signer, clock), 0, 'no chain, nothing to checkpoint');
    t.equal(await latestCheckpoint(db, acme), null);

    await db.transaction((tx) => appendAuditEvents(tx, [event(acme), event(acme)], new Date(T0)));
    await db.transaction((tx) => appendAuditEvent(tx, event(globex), new Date(T0)));
    t.equal(await writeCheckpoints(db, signer, clock), 2, 'one per organization with events');
    clock.advance(1_000);
    t.equal(await writeCheckpoints(db, signer, clock), 0, 'nothing moved, nothing written');

    await db.transaction((tx) => appendAuditEvent(tx, event(acme), new Date(T0)));
    t.equal(await writeCheckpoints(db, signer, clock), 1, 'only the organization whose head advanced');
    const checkpoint = await latestCheckpoint(db, acme);
    const [head] = await db.query<{ head_hash: string }>('SELECT head_hash FROM audit_chain_heads WHERE org_id = $1', [acme]);
    t.match(checkpoint, { org_id: acme, sequence: 3, head_hash: head?.head_hash, signed_at: new Date(clock.now()).toISOString(), signing_key_id: 'audit-test' });
    t.equal(signatureProblem(checkpointSigningText(checkpoint!), checkpoint!.signature, publicKeyPem), null, 'its signature verifies');
    t.equal((await latestCheckpoint(db, globex))?.sequence, 1);
  });
}

const skipped = postgresSkipReason();
if (skipped) t.comment(skipped);
