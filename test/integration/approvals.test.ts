/**
 * Humans in the loop from evaluate: a `hold` opens an approval request, an `escalate` an
 * escalation; after approval, the fresh evaluation with `context.approvals` issues one permit,
 * and every way an approval can fail to count is refused with its reason.
 */
import t from 'tap';
import { ApprovalResponse } from '../../shared/wire/approvals.js';
import { EvaluateResponse } from '../../shared/wire/evaluate.js';
import { type TestAuthority, withTestAuthority } from '../helpers/authority.js';
import { appBackends } from '../helpers/backends.js';

const wire = (amount: number, approvals?: string[]) => ({
  action_type: 'payments.wire',
  actor_id: 'finance-bot',
  context: { environment: 'production', amount_usd: amount, account_code: 'OPS-001', ...(approvals ? { approvals } : {}) },
});

async function post(authority: TestAuthority, url: string, body: unknown, token = authority.acmeAdmin) {
  return authority.app.inject({ method: 'POST', url, headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' }, payload: JSON.stringify(body) });
}
async function evaluate(authority: TestAuthority, body: unknown, token?: string) {
  const response = await post(authority, '/v1/evaluate', body, token);
  if (response.statusCode !== 200) throw new Error(`evaluate answered ${response.statusCode}: ${response.body}`);
  return EvaluateResponse.parse(response.json());
}
const resolve = (authority: TestAuthority, id: string, decision: 'approve' | 'reject', token: string) => post(authority, `/v1/approvals/${id}/resolve`, { decision }, token);
const reasons = (response: EvaluateResponse) => response.decisionObject.approvals.map((approval) => approval.reason);

for (const backend of appBackends()) {
  t.test(`hold → approval → fresh evaluation → one permit, on ${backend.name}`, (t) =>
    withTestAuthority(t, backend, async (authority) => {
      const approver = await authority.key(['approvals:read', 'approvals:write']);
      const held = await evaluate(authority, wire(50_000));
      t.equal(held.decision, 'hold');
      t.equal(held.human_approval_status, 'pending');
      const id = held.approval_request_id as string;
      t.match(id, /^[0-9a-f-]{36}$/, 'the hold opened an approval request');

      const pending = ApprovalResponse.parse((await authority.app.inject({ method: 'GET', url: `/v1/approvals/${id}`, headers: authority.bearer(approver) })).json());
      t.match(pending.approval, { status: 'pending', action_type: 'payments.wire', actor_id: 'finance-bot', binding_hash: held.decisionObject.binding_hash, evaluation_id: held.evaluation_id });
      t.same(reasons(await evaluate(authority, wire(50_000, [id]))), ['APPROVAL_PENDING'], 'a pending approval does not count');

      const readOnly = await authority.key(['approvals:read']);
      t.equal((await resolve(authority, id, 'approve', readOnly)).statusCode, 403, 'approvals:read cannot resolve');
      const actorToken = await authority.idp.sign({ sub: 'finance-bot', org_id: authority.acme.id, role: 'approver' });
      t.equal((await resolve(authority, id, 'approve', actorToken)).statusCode, 403, 'the actor cannot approve its own action');
      t.equal((await resolve(authority, id, 'approve', authority.globexAdmin)).statusCode, 404, "another organization's request is not found");

      const approved = await resolve(authority, id, 'approve', approver);
      t.equal(approved.statusCode, 200);
      t.equal(approved.json().approval.status, 'approved');
      t.equal((await resolve(authority, id, 'reject', approver)).statusCode, 409, 'a resolved request is final');

      t.same(reasons(await evaluate(authority, wire(60_000, [id]))), ['APPROVAL_BINDING_MISMATCH'], 'another amount is another action');
      t.same(reasons(await evaluate(authority, wire(50_000, [id]), authority.globexAdmin)), ['APPROVAL_NOT_FOUND'], 'another organization cannot use it');

      const allowed = await evaluate(authority, wire(50_000, [id]));
      t.equal(allowed.decision, 'allow');
      t.equal(allowed.human_approval_status, 'approved');
      t.same(allowed.decisionObject.approvals, [{ id, accepted: true, reason: null }]);
      const claims = JSON.parse(Buffer.from((allowed.permit_token as string).split('.')[1] as string, 'base64url').toString('utf8'));
      t.same(claims.apr, [id], 'the permit names the approval it used');

      const again = await evaluate(authority, wire(50_000, [id]));
      t.same(reasons(again), ['APPROVAL_ALREADY_USED'], 'an approval backs one permit');
      t.equal(again.decision, 'hold', 'without it the action needs an approval again');
      const used = ApprovalResponse.parse((await authority.app.inject({ method: 'GET', url: `/v1/approvals/${id}`, headers: authority.bearer(approver) })).json());
      t.equal(used.approval.used_by_permit_id, allowed.permit_id);

      const events = (await authority.app.inject({ method: 'GET', url: '/v1/audit/events?limit=500', headers: authority.bearer(authority.acmeAdmin) })).json().events as Array<{ type: string; resource_id: string | null }>;
      const story = events.filter((event) => event.resource_id === id).map((event) => event.type);
      t.same(story, ['approval.requested', 'approval.resolved'], 'opening and resolving are audited');

      const listed = (await authority.app.inject({ method: 'GET', url: '/v1/approvals?status=approved', headers: authority.bearer(approver) })).json();
      t.same(listed.approvals.map((approval: { id: string }) => approval.id), [id]);
    }),
  );

  t.test(`rejected, expired and concurrent uses, on ${backend.name}`, (t) =>
    withTestAuthority(t, backend, async (authority) => {
      const approver = await authority.key(['approvals:write']);
      const rejectedId = (await evaluate(authority, wire(20_000))).approval_request_id as string;
      t.equal((await resolve(authority, rejectedId, 'reject', approver)).statusCode, 200);
      t.same(reasons(await evaluate(authority, wire(20_000, [rejectedId]))), ['APPROVAL_REJECTED']);

      const lateId = (await evaluate(authority, wire(30_000))).approval_request_id as string;
      authority.clock.advance(7_200_000); // the payments class's hold timeout
      const late = await resolve(authority, lateId, 'approve', approver);
      t.equal(late.statusCode, 409, 'an expired request can no longer be approved');
      t.same(reasons(await evaluate(authority, wire(30_000, [lateId]))), ['APPROVAL_EXPIRED']);
      t.same(reasons(await evaluate(authority, wire(30_000, ['not-an-id']))), ['APPROVAL_NOT_FOUND']);

      const sharedId = (await evaluate(authority, wire(40_000))).approval_request_id as string;
      t.equal((await resolve(authority, sharedId, 'approve', approver)).statusCode, 200);
      const racing = await Promise.all(Array.from({ length: 8 }, () => evaluate(authority, wire(40_000, [sharedId]))));
      t.equal(racing.filter((answer) => answer.decision === 'allow').length, 1, 'exactly one of 8 concurrent evaluations got a permit');
      t.ok(racing.filter((answer) => answer.decision !== 'allow').every((answer) => reasons(answer)[0] === 'APPROVAL_ALREADY_USED'), 'the others were told why');
    }),
  );

  t.test(`escalate → quorum of approvers → fresh evaluation → permit, on ${backend.name}`, (t) =>
    withTestAuthority(t, backend, async (authority) => {
      const escalated = await evaluate(authority, wire(2_000_000));
      t.equal(escalated.decision, 'escalate');
      const id = escalated.escalation_id as string;
      t.match(id, /^[0-9a-f-]{36}$/, 'the escalate opened an escalation');
      const counted = (await authority.metrics.escalations.get()).values.find((value) => value.labels.status === 'pending');
      t.equal(counted?.value, 1, 'countersign_escalations_total counts it');
      const opened = (await authority.app.inject({ method: 'GET', url: `/v1/escalations/${id}`, headers: authority.bearer(authority.acmeAdmin) })).json();
      t.match(opened.escalation, { status: 'pending', agentId: 'finance-bot', quorumRequired: 'two_thirds', approverPoolSize: 3 });

      const vote = async (user: string) => {
        const token = await authority.idp.sign({ sub: user, org_id: authority.acme.id, role: 'approver' });
        return post(authority, `/v1/escalations/${id}/respond`, { decision: 'approve' }, token);
      };
      t.equal((await vote('treasurer-1')).statusCode, 200);
      t.same(reasons(await evaluate(authority, wire(2_000_000, [id]))), ['APPROVAL_PENDING'], 'one of two needed votes is not enough');
      t.equal((await vote('treasurer-2')).json().escalation.status, 'approved');

      const allowed = await evaluate(authority, wire(2_000_000, [id]));
      t.equal(allowed.decision, 'allow');
      t.equal(allowed.human_approval_status, 'approved');
      t.same(reasons(await evaluate(authority, wire(2_000_000, [id]))), ['APPROVAL_ALREADY_USED']);
    }),
  );
}
