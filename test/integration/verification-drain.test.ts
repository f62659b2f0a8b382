/**
 * Draining the gates' verification records into the audit log, through the real app: the
 * permit a gate verified becomes `consumed`, every record becomes one audit event in stream
 * order, and nothing is lost or doubled across repeated drains, a crash between commit and trim,
 * a lost cursor, concurrent drains, an unreachable store and records that do not parse. Runs on
 * PGlite + the in-process store, and on Postgres + Redis when they are available.
 *
 * @example
 *   npx tap --disable-coverage test/integration/verification-drain.test.ts
 */
import t, { type Test } from 'tap';
import { computeEventHash } from '../../authority/audit/chain.js';
import { drainVerificationRecords, startVerificationDrain } from '../../authority/verifications/drain.js';
import { permitStoreKey, verificationStream } from '../../shared/permits/store-keys.js';
import type { SharedStore } from '../../shared/store/types.js';
import { EvaluateResponse } from '../../shared/wire/evaluate.js';
import { verificationRecordFields, type VerificationRecord } from '../../shared/wire/verification-records.js';
import { createRecordBacklog } from '../../proxy/record-backlog.js';
import { createTestAuthority, type TestAuthority } from '../helpers/authority.js';
import { appBackends, realServersMissing } from '../helpers/backends.js';
import { ManualClock } from '../helpers/clock.js';
import { recordingLogger, waitFor } from '../helpers/record-stores.js';

interface WireEvent {
  type: string;
  sequence: number;
  decision: string | null;
  actor_id: string | null;
  resource_id: string | null;
  request_id: string | null;
  hash: string;
  previous_hash: string;
  payload: { credential: string | null; details: Record<string, unknown> } & Record<string, unknown>;
}

const demo = (id: string) => ({ action_type: 'demo.echo', actor_id: 'demo-agent', context: { environment: 'dev', target: { type: 'demo', id } } });

async function evaluate(authority: TestAuthority, id: string) {
  const response = await authority.app.inject({
    method: 'POST',
    url: '/v1/evaluate',
    headers: { ...authority.bearer(authority.acmeAdmin), 'content-type': 'application/json' },
    payload: JSON.stringify(demo(id)),
  });
  if (response.statusCode !== 200) throw new Error(`evaluate answered ${response.statusCode}: ${response.body}`);
  return EvaluateResponse.parse(response.json());
}

async function auditEvents(authority: TestAuthority): Promise<WireEvent[]> {
  const response = await authority.app.inject({ method: 'GET', url: '/v1/audit/events?limit=500', headers: authority.bearer(authority.acmeAdmin) });
  return response.json().events as WireEvent[];
}

async function permitStatus(authority: TestAuthority, id: string): Promise<string> {
  const response = await authority.app.inject({ method: 'GET', url: `/v1/permits/${id}`, headers: authority.bearer(authority.acmeAdmin) });
  return response.json().permit.status as string;
}

function record(authority: TestAuthority, overrides: Partial<VerificationRecord>): Record<string, string> {
  return verificationRecordFields({
    kind: 'permit.verified',
    gate: 'proxy:demo',
    mode: 'enforce',
    at: new Date(authority.clock.now()).toISOString(),
    request_id: 'gate-request',
    permit_id: '',
    action_type: 'demo.echo',
    actor_id: 'demo-agent',
    code: '',
    reason: '',
    upstream_status: '',
    duration_ms: '',
    ...overrides,
  });
}

/** The store, except for the methods given. */
function storeWith(store: SharedStore, overrides: Partial<SharedStore>): SharedStore {
  return new Proxy(store, {
    get(target, property, receiver) {
      if (property in overrides) return overrides[property as keyof SharedStore];
      const value: unknown = Reflect.get(target, property, receiver);
      return typeof value === 'function' ? (value as (...args: unknown[]) => unknown).bind(target) : value;
    },
  });
}

const recordIds = (events: WireEvent[]) => events.map((event) => event.payload.details.record_id).filter((id) => id !== undefined);

for (const backend of appBackends()) {
  t.test(`draining verification records on ${backend.name}`, async (t: Test) => {
    const clock = new ManualClock(Date.now());
    const opened = await backend.open({ now: () => clock.now() });
    const authority = await createTestAuthority(opened, { clock });
    t.teardown(async () => {
      await authority.close();
      await opened.cleanup();
    });
    const { store, db } = opened;
    const org = authority.acme.id;
    const stream = verificationStream(org);
    const deps = { db, store, clock };
    // Stream ids follow the store's clock, which must move between appends: MemoryStore drops a
    // stream trimmed to empty, and an append in the same millisecond then reuses a drained id
    // (the cursor and the ledger would take it for a record already recorded).
    const tick = () => clock.advance(5);

    await t.test('a gate verification, an execution and a refusal become audit events', async (t) => {
      const before = (await auditEvents(authority)).length;
      const decision = await evaluate(authority, 'order-1');
      const jti = decision.permit_id as string;
      tick();
      const consumed = await store.consumePermit(permitStoreKey(org, jti), 60_000, {
        stream,
        fields: record(authority, { kind: 'permit.verified', permit_id: jti, request_id: 'req-1' }),
      });
      t.equal(consumed, 'consumed', 'the gate consumed the permit');
      tick();
      await store.appendRecord(stream, record(authority, { kind: 'execution.observed', permit_id: jti, request_id: 'req-1', upstream_status: '200', duration_ms: '12' }));
      tick();
      await store.appendRecord(stream, record(authority, { kind: 'permit.rejected', mode: 'shadow', request_id: 'req-2', code: 'MISSING_PERMIT', reason: 'no permit', actor_id: '' }));
      const written = await store.readRecords(stream, '0', 10);
      t.equal(written.length, 3);

      t.same(await drainVerificationRecords(deps), { recorded: 3, duplicates: 0, invalid: 0 });
      const all = await auditEvents(authority);
      const events = all.slice(before);
      t.same(
        events.map((event) => event.type),
        ['evaluation.decided', 'permit.issued', 'permit.verified', 'execution.observed', 'permit.rejected'],
        'in stream order, after the evaluation',
      );
      const [verified, executed, rejected] = events.slice(2);
      t.match(verified, {
        decision: 'allow',
        actor_id: 'demo-agent',
        resource_id: jti,
        request_id: 'req-1',
        payload: {
          credential: 'gate:proxy:demo',
          details: { gate: 'proxy:demo', mode: 'enforce', record_id: written[0]?.id, verify_error_code: null, reason: 'verified', consumed: true, action_type: 'demo.echo' },
        },
      });
      t.match(executed, { decision: null, resource_id: jti, payload: { details: { record_id: written[1]?.id, upstream_status: 200, duration_ms: 12 } } });
      t.match(rejected, {
        decision: 'deny',
        actor_id: null,
        resource_id: null,
        payload: { details: { mode: 'shadow', record_id: written[2]?.id, verify_error_code: 'MISSING_PERMIT', reason: 'no permit' } },
      });
      for (const event of all) t.equal(event.hash, computeEventHash(event.previous_hash, event.payload), `event ${event.sequence} is chained`);

      t.equal(await permitStatus(authority, jti), 'consumed', 'the permit the gate verified is consumed');
      t.same(await store.readRecords(stream, '0', 10), [], 'the stream is trimmed');

      t.same(await drainVerificationRecords(deps), { recorded: 0, duplicates: 0, invalid: 0 }, 'draining again records nothing');
      t.equal((await auditEvents(authority)).length, all.length);
    });

    await t.test("an MCP tool call's records put the tool into the events' details; other records, older ones included, carry none", async (t) => {
      const before = (await auditEvents(authority)).length;
      const written: string[] = [];
      for (const fields of [
        record(authority, { kind: 'permit.rejected', gate: 'proxy:helpdesk', mode: 'shadow', code: 'MISSING_PERMIT', reason: 'no permit', tool: 'get_ticket' }),
        record(authority, { kind: 'execution.observed', gate: 'proxy:helpdesk', upstream_status: '200', duration_ms: '4', upstream: 'answered', tool: 'get_ticket' }),
        record(authority, { kind: 'permit.rejected', gate: 'proxy:helpdesk', code: 'MCP_METHOD_NOT_ALLOWED', reason: 'not a method the gate decides' }),
      ]) {
        tick();
        written.push(await store.appendRecord(stream, fields));
      }
      t.same(await drainVerificationRecords(deps), { recorded: 3, duplicates: 0, invalid: 0 }, 'each record parses, with or without a tool');
      const [refused, executed, methodRefused] = (await auditEvents(authority)).slice(before);
      t.match(refused?.payload.details, { record_id: written[0], tool: 'get_ticket', verify_error_code: 'MISSING_PERMIT', mode: 'shadow' }, 'the refusal names its tool');
      t.match(executed?.payload.details, { record_id: written[1], tool: 'get_ticket', upstream: 'answered' }, 'so does the execution');
      t.notOk(methodRefused !== undefined && 'tool' in methodRefused.payload.details, 'a record without a tool gives an event without one');
      const http = await auditEvents(authority);
      t.notOk(
        http.some((event) => event.payload.details.gate === 'proxy:demo' && 'tool' in event.payload.details),
        "no HTTP route's event has a tool field",
      );
    });

    await t.test('a crash between commit and trim, and a lost cursor, record nothing twice', async (t) => {
      const before = (await auditEvents(authority)).length;
      tick();
      await store.appendRecord(stream, record(authority, { kind: 'permit.rejected', code: 'PERMIT_EXPIRED', reason: 'expired', request_id: 'crash-1' }));
      tick();
      await store.appendRecord(stream, record(authority, { kind: 'permit.rejected', code: 'PERMIT_EXPIRED', reason: 'expired', request_id: 'crash-2' }));
      const crashing = storeWith(store, { trimRecords: async () => Promise.reject(new Error('crashed before the trim')) });
      t.same(await drainVerificationRecords({ ...deps, store: crashing }), { recorded: 2, duplicates: 0, invalid: 0 }, 'a failed trim does not fail the drain');
      t.equal((await store.readRecords(stream, '0', 10)).length, 2, 'the records are still in the stream');

      t.same(await drainVerificationRecords(deps), { recorded: 0, duplicates: 0, invalid: 0 }, 'the cursor skips them');
      // As if the cursor had been lost too (a restore): the ledger is what stops the doubles.
      await db.query('DELETE FROM verification_stream_cursors WHERE org_id = $1', [org]);
      t.same(await drainVerificationRecords(deps), { recorded: 0, duplicates: 2, invalid: 0 }, 'the ledger knows them');
      t.same(await store.readRecords(stream, '0', 10), [], 'and the stream is trimmed now');

      const events = await auditEvents(authority);
      t.equal(events.length, before + 2);
      t.same(events.slice(before).map((event) => event.request_id), ['crash-1', 'crash-2']);
    });

    await t.test('records written while the authority is down are all recorded when it runs', async (t) => {
      const before = (await auditEvents(authority)).length;
      const permits = [await evaluate(authority, 'down-1'), await evaluate(authority, 'down-2')];
      const written: string[] = [];
      for (const [index, permit] of permits.entries()) {
        tick();
        await store.consumePermit(permitStoreKey(org, permit.permit_id as string), 60_000, {
          stream,
          fields: record(authority, { permit_id: permit.permit_id as string, request_id: `down-${index}` }),
        });
        tick();
        written.push(await store.appendRecord(stream, record(authority, { kind: 'execution.observed', permit_id: permit.permit_id as string, upstream_status: '502', duration_ms: '3.5' })));
      }
      tick();
      written.push(await store.appendRecord(stream, record(authority, { kind: 'permit.rejected', code: 'PERMIT_ALREADY_USED', reason: 'replay' })));

      t.same(await drainVerificationRecords(deps, { batch: 2 }), { recorded: 5, duplicates: 0, invalid: 0 }, 'in several batches of one run');
      const events = (await auditEvents(authority)).slice(before + 4);
      t.same(events.map((event) => event.type), ['permit.verified', 'execution.observed', 'permit.verified', 'execution.observed', 'permit.rejected']);
      t.same(events.filter((event) => event.type === 'execution.observed').map((event) => event.payload.details.record_id), written.slice(0, 2));
      t.equal(events[1]?.payload.details.duration_ms, 3.5);
      for (const permit of permits) t.equal(await permitStatus(authority, permit.permit_id as string), 'consumed');
      t.same(await store.readRecords(stream, '0', 10), []);
    });

    await t.test('a record the gate appended again, not knowing whether the first append landed, is recorded once', async (t) => {
      const before = (await auditEvents(authority)).length;
      tick();
      // Redis took the batch, then the gate stopped waiting for its answer: written, reported failed.
      let timeOuts = 1;
      const timingOut = storeWith(store, {
        appendRecords: async (name, batch) => {
          const outcomes = await store.appendRecords(name, batch);
          return timeOuts-- > 0 ? batch.map(() => ({ status: 'rejected', reason: new Error('Command timed out') })) : outcomes;
        },
      });
      const backlog = createRecordBacklog({ store: timingOut, stream, logger: recordingLogger() });
      const refusal = (n: number) => record(authority, { kind: 'permit.rejected', code: 'INTERNAL_ERROR', reason: 'store down', request_id: `retry-${n}`, gate_record_id: `0b7f2c1e-retry-${n}` });
      await backlog.append([refusal(1), refusal(2)]);
      await waitFor('the backlog to append them again', () => backlog.size() === 0);
      await backlog.close(1_000);
      t.same((await store.readRecords(stream, '0', 10)).map((stored) => stored.fields.request_id), ['retry-1', 'retry-2', 'retry-1', 'retry-2'], 'each is in the stream twice');
      // A gate that sends no gate_record_id: two identical records are two events, as before.
      tick();
      await store.appendRecord(stream, record(authority, { kind: 'permit.rejected', code: 'PERMIT_EXPIRED', reason: 'expired', request_id: 'older-gate' }));
      tick();
      await store.appendRecord(stream, record(authority, { kind: 'permit.rejected', code: 'PERMIT_EXPIRED', reason: 'expired', request_id: 'older-gate' }));

      t.same(await drainVerificationRecords(deps, { batch: 3 }), { recorded: 4, duplicates: 2, invalid: 0 }, 'the second copies are skipped, in the same batch and in the next one');
      const events = (await auditEvents(authority)).slice(before);
      t.same(events.map((event) => event.request_id), ['retry-1', 'retry-2', 'older-gate', 'older-gate'], 'one event per gate record, in order');
      t.same(await drainVerificationRecords(deps), { recorded: 0, duplicates: 0, invalid: 0 }, 'draining again records nothing');
    });

    await t.test('two drains at once record each record once', async (t) => {
      const before = await auditEvents(authority);
      const written: string[] = [];
      for (let i = 0; i < 4; i += 1) {
        tick();
        written.push(await store.appendRecord(stream, record(authority, { kind: 'permit.rejected', code: 'BINDING_MISMATCH', reason: 'mismatch', request_id: `race-${i}` })));
      }
      const peer = { ...deps, store: opened.openPeerStore() };
      const results = await Promise.all([drainVerificationRecords(deps), drainVerificationRecords(peer)]);
      t.equal(results[0].recorded + results[1].recorded, 4, 'four recorded between them');
      const events = await auditEvents(authority);
      t.same(recordIds(events.slice(before.length)), written, 'each once, in stream order');
      t.equal(new Set(recordIds(events)).size, recordIds(events).length, 'no record id appears twice in the log');
    });

    await t.test('with settledForMs, a record younger than that waits in the stream (Redis; the in-process store has nothing to settle)', async (t) => {
      tick();
      await store.appendRecord(stream, record(authority, { kind: 'permit.rejected', code: 'PERMIT_EXPIRED', reason: 'expired', request_id: 'young' }));
      const waited = await drainVerificationRecords(deps, { settledForMs: 3_600_000 });
      if (store.kind === 'redis') {
        t.same(waited, { recorded: 0, duplicates: 0, invalid: 0 }, 'a gate could still withdraw it: not taken');
      } else {
        t.same(waited, { recorded: 1, duplicates: 0, invalid: 0 }, 'a consume and its undo are one step in process: taken at once');
      }
      t.same(await drainVerificationRecords(deps), { recorded: store.kind === 'redis' ? 1 : 0, duplicates: 0, invalid: 0 }, 'taken once settled');
      t.equal((await auditEvents(authority)).at(-1)?.request_id, 'young');
    });

    await t.test('an unreachable store rejects the drain, and a later drain records everything', async (t) => {
      const before = (await auditEvents(authority)).length;
      tick();
      await store.appendRecord(stream, record(authority, { kind: 'permit.rejected', code: 'PERMIT_EXPIRED', reason: 'expired', request_id: 'while-down' }));
      const down = storeWith(store, { readRecords: async () => Promise.reject(new Error('store unreachable')) });
      await t.rejects(drainVerificationRecords({ ...deps, store: down }), /store unreachable/);
      t.equal((await auditEvents(authority)).length, before, 'nothing recorded');
      t.same(await drainVerificationRecords(deps), { recorded: 1, duplicates: 0, invalid: 0 });
      t.equal((await auditEvents(authority)).at(-1)?.request_id, 'while-down');
    });

    await t.test('a record that does not parse is recorded as invalid and does not block the stream', async (t) => {
      const before = (await auditEvents(authority)).length;
      tick();
      const bad = await store.appendRecord(stream, { kind: 'permit.teleported', gate: 'proxy:old\u0000gate', permit_id: 'p'.repeat(100), extra: 'x'.repeat(5000) });
      tick();
      await store.appendRecord(stream, record(authority, { kind: 'permit.rejected', code: 'MISSING_PERMIT', reason: 'none', request_id: 'after-bad' }));
      t.same(await drainVerificationRecords(deps), { recorded: 2, duplicates: 0, invalid: 1 });
      const [invalid, next] = (await auditEvents(authority)).slice(before);
      t.match(invalid, {
        type: 'permit.rejected',
        decision: null,
        resource_id: 'p'.repeat(64),
        payload: {
          credential: 'gate:proxy:old\uFFFDgate',
          details: { invalid_record: true, record_id: bad, claimed_kind: 'permit.teleported', fields_truncated: true, fields: { kind: 'permit.teleported', extra: 'x'.repeat(1000) } },
        },
      });
      t.ok((invalid?.payload.details.issues as string[]).some((issue) => issue.startsWith('kind')), 'the issues say what did not parse');
      t.equal(next?.request_id, 'after-bad', 'the record after it is recorded too');
      t.same(await store.readRecords(stream, '0', 10), []);
    });

    await t.test('the background drain records, logs failures and stops after its run', async (t) => {
      const before = (await auditEvents(authority)).length;
      tick();
      await store.appendRecord(stream, record(authority, { kind: 'permit.rejected', code: 'PERMIT_EXPIRED', reason: 'expired', request_id: 'background' }));
      let trimmed!: () => void;
      const ranOnce = new Promise<void>((resolve) => (trimmed = resolve));
      const watched = storeWith(store, {
        trimRecords: async (name: string, upTo: string) => {
          await store.trimRecords(name, upTo);
          trimmed();
        },
      });
      const drain = startVerificationDrain({ ...deps, store: watched }, { intervalMs: 1, logger: { error: () => t.fail('no error expected') } });
      await ranOnce;
      await drain.stop();
      t.equal((await auditEvents(authority)).at(-1)?.request_id, 'background');
      t.equal((await auditEvents(authority)).length, before + 1);

      let logged!: (entry: { obj: unknown; msg: string }) => void;
      const failure = new Promise<{ obj: unknown; msg: string }>((resolve) => (logged = resolve));
      tick();
      await store.appendRecord(stream, record(authority, { kind: 'permit.rejected', request_id: 'retry' }));
      const down = storeWith(store, { readRecords: async () => Promise.reject(new Error('store unreachable')) });
      const failing = startVerificationDrain({ ...deps, store: down }, { intervalMs: 1, logger: { error: (obj, msg) => logged({ obj, msg }) } });
      const entry = await failure;
      await failing.stop();
      t.match(entry, { obj: { err: { message: 'store unreachable' } }, msg: /retrying/ });
      t.same(await drainVerificationRecords(deps), { recorded: 1, duplicates: 0, invalid: 0 }, 'the next run records what waited');
    });
  });
}

const missing = realServersMissing();
if (missing) t.comment(`the Postgres + Redis variant did not run: ${missing}`);
