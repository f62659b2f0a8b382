/**
 * Escalation timeouts with a manual clock (timed_out and its outcome, the default fallback, a
 * tier chain through escalated to exhaustion; applied on read, on vote and by the sweeper, each
 * recorded once), 20 concurrent votes settling exactly once with a gap-free, verifiable audit
 * chain, and the seam evaluate will use (createEscalation in the caller's transaction,
 * readEscalation). Runs on PGlite + the in-process store, and on Postgres + Redis when available.
 */
import t from 'tap';
import { verifyAuditBundle } from '../../authority/audit/verify-bundle.js';
import { autoApproveThreshold, createEscalation, readEscalation } from '../../authority/escalations/escalations.js';
import { startEscalationSweeper, sweepEscalationTimeouts } from '../../authority/escalations/sweeper.js';
import { parseAuthorityConfig } from '../../authority/config.js';
import { AuditKeysResponse } from '../../shared/wire/audit.js';
import { ErrorEnvelope } from '../../shared/wire/envelope.js';
import { type TestAuthority, withTestAuthority } from '../helpers/authority.js';
import { appBackends, realServersMissing } from '../helpers/backends.js';
import { escalationCalls } from '../helpers/escalations.js';

const basic = { agentId: 'deploy-bot', escalationReason: 'production schema change' };
const sweep = (authority: TestAuthority) => sweepEscalationTimeouts({ db: authority.backend.db, clock: authority.clock, metrics: authority.metrics });

for (const backend of appBackends()) {
  t.test(`a timeout ends an escalation with its fallback on ${backend.name}`, (t) =>
    withTestAuthority(t, backend, async (authority) => {
      const calls = escalationCalls(authority);
      const voter = await authority.key(['hitl:approve']);
      const rejecting = await calls.create({ ...basic, timeoutMs: 60_000, metadata: { ticket: 'T-1' } });
      const approving = await calls.create({ ...basic, timeoutMs: 60_000, quorumConfig: { fallbackDecision: 'approve' } });
      const unread = await calls.create({ ...basic, timeoutMs: 60_000 });

      authority.clock.advance(59_999);
      t.equal((await calls.get(rejecting.id)).escalation.status, 'pending', 'a millisecond before: pending');
      authority.clock.advance(1);
      const timedOut = (await calls.get(rejecting.id)).escalation;
      t.same([timedOut.status, timedOut.resolution, timedOut.outcome], ['timed_out', 'timeout', 'reject'], 'the default fallback: reject');
      t.equal(timedOut.resolvedAt, rejecting.timeoutAt, 'resolved when the tier ran out');
      t.same(
        [(await calls.get(approving.id)).escalation.outcome, (await calls.get(approving.id)).quorumProgress.votesRemaining],
        ['approve', 0],
        'fallbackDecision approve: outcome approve, no votes left',
      );

      const refused = await calls.raw.respond(rejecting.id, { decision: 'approve' }, voter);
      t.equal(refused.statusCode, 409, 'a timed-out escalation takes no votes');
      t.equal(ErrorEnvelope.parse(refused.json()).error, 'conflict');
      const events = await calls.events(rejecting.id);
      t.same(events.map((event) => event.type), ['escalation.created', 'escalation.timed_out'], 'the timeout is recorded once, however often it is read');
      t.match(events[1], {
        decision: 'reject',
        credential: 'system',
        occurred_at: rejecting.timeoutAt,
        details: { status: 'timed_out', tier: 0, next_tier: null, outcome: 'reject', resolution: 'timeout', metadata: { ticket: 'T-1' } },
      });

      // Never read by id: the list applies the timeout before filtering.
      t.same((await calls.list('?status=timed_out')).map((e) => e.id).sort(), [rejecting.id, approving.id, unread.id].sort());
      t.same(await calls.list('?status=pending'), []);
      t.equal((await sweep(authority)).settled, 0, 'nothing left for the sweeper');
      t.match(await authority.metrics.registry.getSingleMetricAsString('countersign_escalations_total'), /status="timed_out"\} 3/);
    }),
  );

  t.test(`a vote after the timeout records the timeout and is refused on ${backend.name}`, (t) =>
    withTestAuthority(t, backend, async (authority) => {
      const calls = escalationCalls(authority);
      const escalation = await calls.create({ ...basic, timeoutMs: 1_000 });
      authority.clock.advance(5_000);
      const refused = await calls.raw.respond(escalation.id, { decision: 'approve' }, await authority.key(['hitl:approve']));
      t.equal(refused.statusCode, 409);
      t.match(refused.json().message, /timed_out/);
      t.same((await calls.events(escalation.id)).map((event) => event.type), ['escalation.created', 'escalation.timed_out'], 'the refused vote still recorded the timeout');
      t.equal((await calls.get(escalation.id)).approvalRecords.length, 0);
    }),
  );

  t.test(`the sweeper records timeouts nobody reads on ${backend.name}`, (t) =>
    withTestAuthority(t, backend, async (authority) => {
      const calls = escalationCalls(authority);
      const due = await calls.create({ ...basic, timeoutMs: 1_000 });
      const notYet = await calls.create({ ...basic, timeoutMs: 10_000 });
      t.equal((await sweep(authority)).settled, 0, 'nothing due yet');
      authority.clock.advance(1_000);
      t.equal((await sweep(authority)).settled, 1);
      t.equal((await sweep(authority)).settled, 0, 'a recorded timeout is not due again');
      t.same((await calls.events(due.id)).map((event) => event.type), ['escalation.created', 'escalation.timed_out']);
      t.same((await calls.events(notYet.id)).map((event) => event.type), ['escalation.created']);
      t.equal((await calls.get(due.id)).escalation.status, 'timed_out');
      t.equal((await calls.events(due.id)).length, 2, 'reading it afterwards records nothing more');
    }),
  );

  t.test(`a tier chain: escalated, then exhausted on ${backend.name}`, (t) =>
    withTestAuthority(t, backend, async (authority) => {
      const calls = escalationCalls(authority);
      const [first, second, third] = (await Promise.all([1, 2, 3].map(() => authority.key(['hitl:approve'])))) as [string, string, string];
      const chain = {
        ...basic,
        timeoutMs: 1_000,
        quorumConfig: { quorumRequired: 'simple_majority', approverPoolSize: 3, fallbackDecision: 'approve' },
        escalationChain: [{ quorumRequired: 'single_approver', timeoutMs: 2_000 }, { quorumRequired: 'unanimous', approverPoolSize: 2, timeoutMs: 3_000 }],
      };
      const answered = await calls.create(chain);
      const exhausted = await calls.create(chain);
      const swept = await calls.create(chain);
      const created = Date.parse(answered.createdAt);
      t.same(answered.tiers, [
        { quorumRequired: 'simple_majority', approverPoolSize: 3, timeoutMs: 1_000 },
        { quorumRequired: 'single_approver', approverPoolSize: 1, timeoutMs: 2_000 },
        { quorumRequired: 'unanimous', approverPoolSize: 2, timeoutMs: 3_000 },
      ]);
      t.equal((await calls.respond(answered.id, 'reject', first)).escalation.status, 'pending', 'a vote in the first tier');

      authority.clock.advance(1_000);
      const moved = await calls.get(answered.id);
      t.same([moved.escalation.status, moved.escalation.tier, moved.escalation.quorumRequired], ['escalated', 1, 'single_approver'], 'the first tier ran out: escalated to the next');
      t.equal(moved.escalation.timeoutAt, new Date(created + 3_000).toISOString(), 'the next tier starts when the previous one ran out');
      t.match(moved.quorumProgress, { tier: 1, approvals: 0, rejections: 0, votesRemaining: 1 }, "the first tier's votes do not count in the next");
      t.same((await calls.list('?status=escalated')).map((e) => e.id).sort(), [answered.id, exhausted.id, swept.id].sort(), 'the list filter knows escalated');
      t.equal((await calls.raw.respond(answered.id, { decision: 'approve' }, first)).statusCode, 409, 'one vote per voter across tiers');
      const decided = await calls.respond(answered.id, 'approve', second);
      t.same([decided.escalation.status, decided.escalation.resolution, decided.record.tier], ['approved', 'quorum', 1], 'an escalated escalation is decided by its current tier');
      t.match((await calls.events(answered.id)).map((event) => [event.type, event.details['status']]), [
        ['escalation.created', 'pending'],
        ['escalation.vote_recorded', 'pending'],
        ['escalation.timed_out', 'escalated'],
        ['escalation.vote_recorded', 'approved'],
        ['escalation.resolved', 'approved'],
      ]);

      // The sweeper walks the chain one tier at a time.
      t.equal((await sweep(authority)).settled, 0, 'the other two were escalated by the list above: not due again yet');
      authority.clock.advance(2_000);
      t.equal((await sweep(authority)).settled, 2, 'the second tier ran out for both');
      t.equal((await readEscalation(authority.backend.db, authority.acme.id, swept.id, authority.clock))?.tier, 2);
      authority.clock.advance(2_999);
      t.equal((await sweep(authority)).settled, 0);
      authority.clock.advance(1);
      t.equal((await sweep(authority)).settled, 2, 'the last tier ran out: exhausted');
      for (const id of [exhausted.id, swept.id]) {
        const end = (await calls.get(id)).escalation;
        t.same([end.status, end.outcome, end.resolution, end.tier], ['timed_out', 'approve', 'timeout', 2], 'chain exhaustion applies the fallback');
        const timeouts = (await calls.events(id)).filter((event) => event.type === 'escalation.timed_out');
        t.same(timeouts.map((event) => [event.details['tier'], event.details['status'], event.occurred_at]), [
          [0, 'escalated', new Date(created + 1_000).toISOString()],
          [1, 'escalated', new Date(created + 3_000).toISOString()],
          [2, 'timed_out', new Date(created + 6_000).toISOString()],
        ]);
      }
      t.equal((await calls.raw.respond(exhausted.id, { decision: 'approve' }, third)).statusCode, 409);
    }),
  );

  t.test(`a late reader walks every tier that ran out on ${backend.name}`, (t) =>
    withTestAuthority(t, backend, async (authority) => {
      const calls = escalationCalls(authority);
      const escalation = await calls.create({ ...basic, timeoutMs: 1_000, escalationChain: [{ timeoutMs: 1_000 }, { timeoutMs: 1_000 }] });
      authority.clock.advance(10_000);
      const view = await readEscalation(authority.backend.db, authority.acme.id, escalation.id, authority.clock);
      t.same([view?.status, view?.tier, view?.outcome], ['timed_out', 2, 'reject'], 'readEscalation applies the timeouts');
      t.same((await calls.events(escalation.id)).map((event) => event.type), ['escalation.created'], 'without writing anything');
      t.equal((await calls.get(escalation.id)).escalation.status, 'timed_out');
      t.same((await calls.events(escalation.id)).map((event) => event.details['status']), ['pending', 'escalated', 'escalated', 'timed_out'], 'GET records all three timeouts at once');
    }),
  );

  t.test(`20 concurrent votes settle exactly once on ${backend.name}`, (t) =>
    withTestAuthority(t, backend, async (authority) => {
      const calls = escalationCalls(authority);
      const voters = await Promise.all(Array.from({ length: 20 }, () => authority.key(['hitl:approve'])));
      const escalation = await calls.create({ ...basic, quorumConfig: { quorumRequired: 'simple_majority', approverPoolSize: 20 } });
      const answers = await Promise.all(voters.map((voter) => calls.raw.respond(escalation.id, { decision: 'approve' }, voter)));

      const accepted = answers.filter((answer) => answer.statusCode === 200).map((answer) => answer.json());
      const conflicts = answers.filter((answer) => answer.statusCode === 409);
      t.equal(accepted.length, 11, 'floor(20/2)+1 = 11 votes are taken');
      t.equal(conflicts.length, 9, 'every vote after the settling one is a conflict');
      t.ok(conflicts.every((answer) => ErrorEnvelope.parse(answer.json()).error === 'conflict'));
      t.equal(accepted.filter((answer) => answer.escalation.status === 'approved').length, 1, 'exactly one vote settled it');
      t.same(accepted.map((answer) => answer.quorumProgress.approvals).sort((a, b) => a - b), Array.from({ length: 11 }, (_, i) => i + 1), 'each taken vote saw the tally before it');

      const detail = await calls.get(escalation.id);
      t.equal(detail.escalation.status, 'approved');
      t.equal(detail.approvalRecords.length, 11);
      const types = (await calls.events(escalation.id)).map((event) => event.type);
      t.equal(types.filter((type) => type === 'escalation.resolved').length, 1, 'one settling transition in the log');
      t.equal(types.filter((type) => type === 'escalation.vote_recorded').length, 11);

      const bundle = await authority.app.inject({ method: 'POST', url: '/v1/audit/exports', headers: { ...authority.bearer(authority.acmeAdmin), 'content-type': 'application/json' }, payload: '{}' });
      const keys = AuditKeysResponse.parse((await authority.app.inject({ method: 'GET', url: '/v1/audit/keys', headers: authority.bearer(authority.acmeAdmin) })).json()).keys;
      const exported = bundle.json() as { events: Array<{ sequence: number }> };
      t.same(verifyAuditBundle(exported, keys[0]!.public_key_pem).problems, [], 'the exported chain verifies');
      t.same(exported.events.map((event) => event.sequence), Array.from({ length: exported.events.length }, (_, i) => i + 1), 'gap-free sequences');
    }),
  );

  t.test(`createEscalation in a caller's transaction on ${backend.name}`, (t) =>
    withTestAuthority(t, backend, async (authority) => {
      const { db } = authority.backend;
      const calls = escalationCalls(authority);
      const input = {
        orgId: authority.acme.id,
        agentId: 'finance-bot',
        escalationReason: 'wire above the limit',
        proposedAction: { action_type: 'payments.wire', amount_usd: 2_000_000 },
        riskScore: 0.9,
        quorumRequired: 'two_thirds' as const,
        approverPoolSize: 3,
        timeoutMs: 3_600_000,
        fallbackDecision: 'reject' as const,
        metadata: { evaluation_id: 'e-1' },
        createdBy: 'api_key:evaluator',
        requestId: 'req-1',
        binding: { hash: 'bnd-hash', facts: { action_type: 'payments.wire', actor_id: 'finance-bot', amount_usd: 2_000_000 } },
      };
      const opened = await db.transaction((tx) => createEscalation(tx, input, authority.clock));
      const shown = (await calls.get(opened.id)).escalation;
      t.same([shown.status, shown.bindingHash, shown.quorumRequired, shown.approverPoolSize, shown.createdBy], ['pending', 'bnd-hash', 'two_thirds', 3, 'api_key:evaluator']);
      t.same(shown.boundFacts, input.binding.facts, 'with the bound facts it was given');
      t.match((await calls.events(opened.id))[0], { type: 'escalation.created', credential: 'api_key:evaluator', details: { binding_hash: 'bnd-hash' } });

      let rolledBack = '';
      await t.rejects(
        db.transaction(async (tx) => {
          rolledBack = (await createEscalation(tx, input, authority.clock)).id;
          throw new Error('the evaluation failed');
        }),
      );
      t.equal((await calls.raw.get(rolledBack)).statusCode, 404, 'rolled back with its caller: no escalation');
      t.same(await calls.events(rolledBack), [], 'and no audit event');
      await t.rejects(db.transaction((tx) => createEscalation(tx, { ...input, approverPoolSize: null }, authority.clock)), { code: 'invalid_request' }, 'a tier without its pool is refused');
      await t.rejects(
        db.transaction((tx) => createEscalation(tx, { ...input, proposedAction: { context: { note: 'a\u0000b' } } }, authority.clock)),
        { code: 'invalid_request' },
        'facts that cannot be stored are the caller’s 400, not a failed insert',
      );
      t.equal((await db.transaction((tx) => createEscalation(tx, { ...input, riskScore: 0.1, autoApproveBelow: 0.2 }, authority.clock))).status, 'auto_approved');
      const named = '11111111-2222-4333-8444-555555555555';
      t.equal((await db.transaction((tx) => createEscalation(tx, { ...input, id: named }, authority.clock))).id, named, 'a caller may choose the id');
    }),
  );
}

for (const backend of appBackends().slice(0, 1)) {
  t.test('the background sweeper records a timeout, and stops', (t) =>
    withTestAuthority(t, backend, async (authority) => {
      const calls = escalationCalls(authority);
      const escalation = await calls.create({ ...basic, timeoutMs: 1_000 });
      authority.clock.advance(1_000);
      const errors: unknown[] = [];
      const sweeper = startEscalationSweeper(
        { db: authority.backend.db, clock: authority.clock, metrics: authority.metrics },
        { intervalMs: 5, logger: { error: (obj) => errors.push(obj) } },
      );
      // Waits for the timer's work, whenever it comes; nothing here measures how long it took.
      let recorded = 0;
      while (recorded === 0) {
        await new Promise((resolve) => setTimeout(resolve, 5));
        recorded = (await calls.events(escalation.id)).filter((event) => event.type === 'escalation.timed_out').length;
      }
      await sweeper.stop();
      t.equal(recorded, 1, 'the timeout was recorded by the timer');
      t.same(errors, [], 'without errors');
      await t.resolves(sweeper.stop(), 'stopping twice is harmless');
    }),
  );
}

t.test('the auto-approve threshold: the organization own, else the global one', async (t) => {
  const config = parseAuthorityConfig({ escalations: { auto_approve_below: 0.2, organizations: { 'org-a': { auto_approve_below: 0.5 }, 'org-b': { auto_approve_below: null } } } });
  t.equal(autoApproveThreshold(config.escalations, 'org-a'), 0.5);
  t.equal(autoApproveThreshold(config.escalations, 'org-b'), null, 'an organization can switch it off');
  t.equal(autoApproveThreshold(config.escalations, 'org-c'), 0.2);
  t.equal(autoApproveThreshold(parseAuthorityConfig({}).escalations, 'org-c'), null, 'off by default');
});

const missing = realServersMissing();
if (missing) t.comment(`the Postgres + Redis variant did not run: ${missing}`);
