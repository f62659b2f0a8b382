/**
 * The escalation endpoints through the real app: create (shapes, defaults), respond (quorum and
 * fallback resolutions, records), get (records and quorum progress), list (status filter, paging,
 * organization scope), auto-approval, validation errors (400 envelopes, never 500), authorization
 * (hitl:approve, the requester, another organization) and hosted mode (404). Runs on PGlite + the
 * in-process store, and on Postgres + Redis when they are available.
 */
import t from 'tap';
import { ErrorEnvelope } from '../../shared/wire/envelope.js';
import { createTestAuthority, withTestAuthority } from '../helpers/authority.js';
import { appBackends, realServersMissing } from '../helpers/backends.js';
import { escalationCalls } from '../helpers/escalations.js';

const basic = { agentId: 'deploy-bot', escalationReason: 'production schema change' };

for (const backend of appBackends()) {
  t.test(`create, vote, resolve on ${backend.name}`, (t) =>
    withTestAuthority(t, backend, async (authority) => {
      const calls = escalationCalls(authority);
      const requester = await authority.key(['evaluate:write']);
      const [alice, bob, carol, dave] = (await Promise.all([1, 2, 3, 4].map(() => authority.key(['hitl:approve'])))) as [string, string, string, string];

      const created = await calls.create({ ...basic, proposedAction: { sql: 'ALTER TABLE x' }, riskScore: 0.7, metadata: { ticket: 'OPS-7' } }, requester);
      t.equal(created.status, 'pending');
      t.equal(created.orgId, authority.acme.id);
      t.equal(created.quorumRequired, 'single_approver', 'no quorumConfig: single_approver');
      t.equal(created.approverPoolSize, 1);
      t.equal(created.fallbackDecision, 'reject', 'default fallback: reject');
      t.equal(created.createdAt, new Date(authority.clock.now()).toISOString(), 'createdAt: ISO with milliseconds');
      t.equal(Date.parse(created.timeoutAt) - Date.parse(created.createdAt), 3_600_000, 'no timeoutMs: the default of one hour');
      t.same([created.proposedAction, created.riskScore, created.metadata], [{ sql: 'ALTER TABLE x' }, 0.7, { ticket: 'OPS-7' }], 'the optional fields are kept');
      t.same([created.resolution, created.outcome, created.resolvedAt, created.bindingHash], [null, null, null, null]);

      const voted = await calls.respond(created.id, 'approve', alice, 'looks right');
      t.equal(voted.escalation.status, 'approved', 'single approver: the first vote decides');
      t.same([voted.escalation.resolution, voted.escalation.outcome], ['quorum', 'approve']);
      t.match(voted.record, { decision: 'approve', note: 'looks right', escalationId: created.id, tier: 0 });
      t.match(voted.record.userId, /^api_key:/, 'the voter is named by its credential');
      const late = await calls.raw.respond(created.id, { decision: 'reject' }, bob);
      t.equal(late.statusCode, 409, 'a final escalation is never reopened');
      t.equal(ErrorEnvelope.parse(late.json()).error, 'conflict');

      const detail = await calls.get(created.id);
      t.equal(detail.escalation.status, 'approved');
      t.equal(detail.approvalRecords.length, 1);
      t.same(detail.quorumProgress, { tier: 0, quorumRequired: 'single_approver', approverPoolSize: 1, approvals: 1, rejections: 0, approvalsRequired: 1, rejectionsRequired: 1, votesCast: 1, votesRemaining: 0 });
      const events = await calls.events(created.id);
      t.same(events.map((event) => event.type), ['escalation.created', 'escalation.vote_recorded', 'escalation.resolved']);
      t.ok(events.every((event) => (event.details['metadata'] as { ticket?: string }).ticket === 'OPS-7'), 'metadata is forwarded into every event');
      t.match(events[0], { actor_id: 'deploy-bot', details: { escalation_reason: 'production schema change', proposed_action: { sql: 'ALTER TABLE x' }, risk_score: 0.7 } });
      t.match(events[2], { decision: 'approve', details: { status: 'approved', resolution: 'quorum' } });

      authority.clock.advance(1); // listings are newest first
      // Every vote cast, no threshold: the fallback decides, and says so.
      const split = await calls.create({ ...basic, quorumConfig: { quorumRequired: 'simple_majority', approverPoolSize: 4, fallbackDecision: 'approve', minApprovers: 2 }, timeoutMs: 60_000 }, requester);
      t.equal(split.minApprovers, 2, 'minApprovers is kept (advisory)');
      const answers = [];
      for (const [voter, decision] of [[alice, 'approve'], [bob, 'reject'], [carol, 'approve']] as const) answers.push(await calls.respond(split.id, decision, voter));
      t.same(answers.map((answer) => answer.escalation.status), ['pending', 'pending', 'pending']);
      t.same(answers[2]?.quorumProgress, { tier: 0, quorumRequired: 'simple_majority', approverPoolSize: 4, approvals: 2, rejections: 1, approvalsRequired: 3, rejectionsRequired: 3, votesCast: 3, votesRemaining: 1 });
      const last = await calls.respond(split.id, 'reject', dave);
      t.same([last.escalation.status, last.escalation.resolution, last.escalation.outcome], ['approved', 'fallback', 'approve']);
      t.match((await calls.events(split.id)).at(-1), { type: 'escalation.resolved', details: { resolution: 'fallback', status: 'approved' } });

      authority.clock.advance(1); // listings are newest first
      // Unanimous: one reject is enough.
      const unanimous = await calls.create({ ...basic, quorumConfig: { quorumRequired: 'unanimous', approverPoolSize: 3 } }, requester);
      t.equal((await calls.respond(unanimous.id, 'approve', alice)).escalation.status, 'pending');
      const vetoed = await calls.respond(unanimous.id, 'reject', bob);
      t.same([vetoed.escalation.status, vetoed.escalation.resolution], ['rejected', 'quorum']);

      authority.clock.advance(1); // listings are newest first
      // A repeated vote is a conflict, even while the escalation is still open.
      const open = await calls.create({ ...basic, quorumConfig: { quorumRequired: 'two_thirds', approverPoolSize: 6 } }, requester);
      await calls.respond(open.id, 'approve', alice);
      const again = await calls.raw.respond(open.id, { decision: 'approve' }, alice);
      t.equal(again.statusCode, 409, 'one vote per voter');
      t.equal((await calls.get(open.id)).approvalRecords.length, 1);

      // Listing: newest first, by status, paged.
      t.same((await calls.list()).map((e) => e.id), [open.id, unanimous.id, split.id, created.id]);
      t.same((await calls.list('?status=pending')).map((e) => e.id), [open.id]);
      t.same((await calls.list('?status=approved')).map((e) => e.id), [split.id, created.id]);
      t.same((await calls.list('?status=rejected')).map((e) => e.id), [unanimous.id]);
      t.same(await calls.list('?status=escalated'), []);
      t.same(await calls.list('?status=auto_approved'), []);
      const first = await calls.raw.list('?limit=3');
      t.equal(first.json().length, 3);
      const cursor = first.headers['x-next-cursor'] as string;
      t.ok(cursor, 'a full page names the next');
      const rest = await calls.raw.list(`?limit=3&cursor=${cursor}`);
      t.same(rest.json().map((e: { id: string }) => e.id), [created.id]);
      t.equal(rest.headers['x-next-cursor'], undefined, 'the last page names none');

      const metrics = await authority.metrics.registry.getSingleMetricAsString('countersign_escalations_total');
      t.match(metrics, /countersign_escalations_total\{status="pending"\} 4/);
      t.match(metrics, /countersign_escalations_total\{status="approved"\} 2/);
      t.match(metrics, /countersign_escalations_total\{status="rejected"\} 1/);
    }),
  );

  t.test(`authorization and organization scope on ${backend.name}`, (t) =>
    withTestAuthority(t, backend, async (authority) => {
      const calls = escalationCalls(authority);
      const { idp, acme } = authority;
      const jwt = async (sub: string, role: string) => idp.sign({ sub, org_id: acme.id, role });
      const member = await jwt('mia', 'member');
      const viewer = await jwt('vic', 'viewer');
      const approver = await jwt('ann', 'approver');
      const admin = await jwt('ada', 'admin');
      const noScope = await authority.key(['audit:read']);
      const creatorWithHitl = await authority.key(['hitl:approve']);

      const escalation = await calls.create({ ...basic, agentId: 'ann-the-agent', quorumConfig: { quorumRequired: 'unanimous', approverPoolSize: 5 } }, member);
      t.equal(escalation.createdBy, 'user:mia', 'any authenticated actor creates; the creator is recorded');
      for (const [name, token] of [['member', member], ['viewer', viewer], ['key without hitl:approve', noScope]] as const) {
        const refused = await calls.raw.respond(escalation.id, { decision: 'approve' }, token);
        t.equal(refused.statusCode, 403, `${name} cannot vote`);
        t.equal(ErrorEnvelope.parse(refused.json()).error, 'forbidden');
      }
      t.equal((await calls.respond(escalation.id, 'approve', approver)).record.userId, 'user:ann', 'role approver holds hitl:approve');
      t.equal((await calls.respond(escalation.id, 'approve', admin)).record.userId, 'user:ada', 'role admin votes too');
      t.equal((await calls.get(escalation.id, viewer)).escalation.id, escalation.id, 'any credential of the organization reads');

      // The requester: the credential that created it, or its agent.
      const own = await calls.create({ ...basic, quorumConfig: { quorumRequired: 'simple_majority', approverPoolSize: 3 } }, creatorWithHitl);
      const selfVote = await calls.raw.respond(own.id, { decision: 'approve' }, creatorWithHitl);
      t.equal(selfVote.statusCode, 403, 'the creating credential cannot vote, whatever its permissions');
      t.equal(ErrorEnvelope.parse(selfVote.json()).error, 'forbidden');
      const agentsOwn = await calls.create({ ...basic, agentId: 'ada' }, member);
      t.equal((await calls.raw.respond(agentsOwn.id, { decision: 'approve' }, admin)).statusCode, 403, 'the agent itself cannot vote, even as an admin');
      t.equal((await calls.get(agentsOwn.id)).approvalRecords.length, 0, 'nothing was recorded');

      // Another organization's escalation does not exist for this one.
      for (const answer of [await calls.raw.get(own.id, authority.globexAdmin), await calls.raw.respond(own.id, { decision: 'approve' }, authority.globexAdmin)]) {
        t.equal(answer.statusCode, 404);
        t.equal(ErrorEnvelope.parse(answer.json()).error, 'not_found');
      }
      t.same(await calls.list('', authority.globexAdmin), [], "another organization's list is its own");
      const globexOwn = await calls.create(basic, authority.globexAdmin);
      t.equal((await calls.raw.get(globexOwn.id)).statusCode, 404, 'and the other way round');
      for (const id of ['00000000-0000-4000-8000-000000000000', 'not-an-id', 'x'.repeat(100)]) {
        t.equal((await calls.raw.get(id)).statusCode, 404, `unknown id ${id.slice(0, 20)}: 404`);
        t.equal((await calls.raw.respond(id, { decision: 'approve' }, authority.acmeAdmin)).statusCode, 404);
      }
      t.equal((await authority.app.inject({ method: 'GET', url: '/v1/escalations' })).statusCode, 401, 'no credential: 401');
    }),
  );

  t.test(`validation errors are 400 envelopes, never 500, on ${backend.name}`, (t) =>
    withTestAuthority(t, backend, async (authority) => {
      const calls = escalationCalls(authority);
      const bad: Array<[string, unknown]> = [
        ['no agentId', { escalationReason: 'x' }],
        ['no escalationReason', { agentId: 'a' }],
        ['blank agentId', { ...basic, agentId: '   ' }],
        ['agentId not a string', { ...basic, agentId: 7 }],
        ['riskScore below 0', { ...basic, riskScore: -0.01 }],
        ['riskScore above 1', { ...basic, riskScore: 1.01 }],
        ['riskScore as text', { ...basic, riskScore: '0.5' }],
        ['simple_majority without pool', { ...basic, quorumConfig: { quorumRequired: 'simple_majority' } }],
        ['two_thirds without pool', { ...basic, quorumConfig: { quorumRequired: 'two_thirds' } }],
        ['unanimous without pool', { ...basic, quorumConfig: { quorumRequired: 'unanimous', minApprovers: 2 } }],
        ['unknown tier', { ...basic, quorumConfig: { quorumRequired: 'most' } }],
        ['pool of 0', { ...basic, quorumConfig: { quorumRequired: 'unanimous', approverPoolSize: 0 } }],
        ['minApprovers above pool', { ...basic, quorumConfig: { quorumRequired: 'unanimous', approverPoolSize: 2, minApprovers: 3 } }],
        ['unknown fallback', { ...basic, quorumConfig: { fallbackDecision: 'maybe' } }],
        ['timeoutMs 0', { ...basic, timeoutMs: 0 }],
        ['negative timeoutMs', { ...basic, timeoutMs: -5 }],
        ['fractional timeoutMs', { ...basic, timeoutMs: 1.5 }],
        ['timeoutMs as text', { ...basic, timeoutMs: '1000' }],
        ['timeoutMs beyond 30 days', { ...basic, timeoutMs: 31 * 24 * 3600 * 1000 }],
        ['proposedAction not an object', { ...basic, proposedAction: ['deploy'] }],
        ['metadata not an object', { ...basic, metadata: 'ticket' }],
        ['NUL in metadata', { ...basic, metadata: { note: 'a\u0000b' } }],
        ['NUL in agentId', { ...basic, agentId: 'a\u0000b' }],
        ['lone surrogate in proposedAction', { ...basic, proposedAction: { x: '\ud800' } }],
        ['deeply nested metadata', { ...basic, metadata: JSON.parse(`${'{"a":'.repeat(40)}1${'}'.repeat(40)}`) }],
        ['empty chain', { ...basic, escalationChain: [] }],
        ['chain tier without pool', { ...basic, escalationChain: [{ quorumRequired: 'unanimous', timeoutMs: 10 }] }],
        ['unknown field', { ...basic, priority: 'high' }],
        ['an array', [basic]],
        ['null', null],
      ];
      for (const [name, body] of bad) {
        const response = await calls.raw.create(body);
        t.equal(response.statusCode, 400, `create, ${name}: 400`);
        const envelope = ErrorEnvelope.parse(response.json());
        t.equal(envelope.error, 'invalid_request', `create, ${name}: invalid_request`);
        if (body !== null && !Array.isArray(body)) t.ok(envelope.details?.length, `create, ${name}: with details`);
      }
      const escalation = await calls.create(basic);
      const voter = await authority.key(['hitl:approve']);
      for (const [name, body] of [['no decision', {}], ['unknown decision', { decision: 'yes' }], ['note not text', { decision: 'approve', note: 5 }], ['unknown field', { decision: 'approve', weight: 2 }], ['NUL in note', { decision: 'approve', note: '\u0000' }]] as const) {
        const response = await calls.raw.respond(escalation.id, body, voter);
        t.equal(response.statusCode, 400, `respond, ${name}: 400`);
        t.equal(ErrorEnvelope.parse(response.json()).error, 'invalid_request');
      }
      const crafted = (text: string) => `?cursor=${Buffer.from(text).toString('base64url')}`;
      for (const query of ['?status=open', '?limit=0', '?limit=501', '?cursor=bm9wZQ', '?cursor=%00', crafted('2026-01-01T00:00:00.000Z|nope'), crafted('-100000-01-01T00:00:00.000Z|00000000-0000-4000-8000-000000000000')]) {
        const response = await calls.raw.list(query);
        t.equal(response.statusCode, 400, `list ${query}: 400`);
        t.equal(ErrorEnvelope.parse(response.json()).error, 'invalid_request');
      }
      t.equal((await calls.get(escalation.id)).escalation.status, 'pending', 'the refused votes recorded nothing');
      t.same((await calls.events(escalation.id)).map((event) => event.type), ['escalation.created'], 'and appended nothing');
      t.same(await calls.list(), [(await calls.get(escalation.id)).escalation], 'the refused creations created nothing');
    }),
  );

  t.test(`auto-approval below the organization's threshold on ${backend.name}`, async (t) => {
    await t.test('off by default', (t) =>
      withTestAuthority(t, backend, async (authority) => {
        t.equal((await escalationCalls(authority).create({ ...basic, riskScore: 0 })).status, 'pending');
      }),
    );
    await t.test('configured', (t) =>
      withTestAuthority(
        t,
        backend,
        async (authority) => {
          const calls = escalationCalls(authority);
          const low = await calls.create({ ...basic, riskScore: 0.29, metadata: { run: 1 } });
          t.same([low.status, low.resolution, low.outcome, low.resolvedAt], ['auto_approved', 'auto_approve', 'approve', low.createdAt]);
          t.equal((await calls.create({ ...basic, riskScore: 0.3 })).status, 'pending', 'at the threshold: asks the approvers');
          t.equal((await calls.create(basic)).status, 'pending', 'no risk score: asks the approvers');
          const vote = await calls.raw.respond(low.id, { decision: 'reject' }, await authority.key(['hitl:approve']));
          t.equal(vote.statusCode, 409, 'auto_approved is final');
          t.same((await calls.list('?status=auto_approved')).map((e) => e.id), [low.id]);
          const events = await calls.events(low.id);
          t.same(events.map((event) => event.type), ['escalation.created', 'escalation.resolved']);
          t.match(events[1], { decision: 'approve', details: { status: 'auto_approved', resolution: 'auto_approve', auto_approve_below: 0.3, metadata: { run: 1 } } });
        },
        { escalations: { auto_approve_below: 0.3 } },
      ),
    );
  });
}

for (const backend of appBackends().slice(0, 1)) {
  t.test('hosted mode: the four endpoints are unknown paths', async (t) => {
    const opened = await backend.open();
    const authority = await createTestAuthority(opened, { config: { deployment: 'hosted' } });
    t.teardown(async () => {
      await authority.close();
      await opened.cleanup();
    });
    const id = '00000000-0000-4000-8000-000000000000';
    const requests = [
      { method: 'POST', url: '/v1/escalations', payload: basic },
      { method: 'GET', url: '/v1/escalations' },
      { method: 'GET', url: '/v1/escalations?status=pending' },
      { method: 'GET', url: `/v1/escalations/${id}` },
      { method: 'POST', url: `/v1/escalations/${id}/respond`, payload: { decision: 'approve' } },
    ] as const;
    for (const request of requests) {
      for (const headers of [authority.bearer(authority.acmeAdmin), {}]) {
        const response = await authority.app.inject({ ...request, headers });
        t.equal(response.statusCode, 404, `${request.method} ${request.url}`);
        const envelope = ErrorEnvelope.parse(response.json());
        t.equal(envelope.error, 'not_found');
        t.match(envelope.message, /^no such endpoint/, 'the same answer as any unknown path');
      }
    }
  });
}

const missing = realServersMissing();
if (missing) t.comment(`the Postgres + Redis variant did not run: ${missing}`);
