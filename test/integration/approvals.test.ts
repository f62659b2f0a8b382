/**
 * Humans in the loop from evaluate: a `hold` opens an approval request, an `escalate` an
 * escalation; after approval, the fresh evaluation with `context.approvals` issues one permit,
 * and every way an approval can fail to count is refused with its reason.
 */
import t from 'tap';
import { expireDueApprovalRequests } from '../../authority/approvals/expiry.js';
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
      const early = await evaluate(authority, wire(50_000, [id]));
      t.same(reasons(early), ['APPROVAL_PENDING'], 'a pending approval does not count');
      t.match(early, { decision: 'deny', human_approval_status: 'pending', remediation: [{ code: 'WAIT_FOR_APPROVAL' }] });
      t.notOk(early.approval_request_id, 'and opens no second request');

      const readOnly = await authority.key(['approvals:read']);
      t.equal((await resolve(authority, id, 'approve', readOnly)).statusCode, 403, 'approvals:read cannot resolve');
      const actorToken = await authority.idp.sign({ sub: 'finance-bot', org_id: authority.acme.id, role: 'approver' });
      t.equal((await resolve(authority, id, 'approve', actorToken)).statusCode, 403, 'the actor cannot approve its own action');
      t.equal((await resolve(authority, id, 'approve', authority.globexAdmin)).statusCode, 404, "another organization's request is not found");

      const approved = await resolve(authority, id, 'approve', approver);
      t.equal(approved.statusCode, 200);
      t.equal(approved.json().approval.status, 'approved');
      t.equal((await resolve(authority, id, 'reject', approver)).statusCode, 409, 'a resolved request is final');

      const otherAction = await evaluate(authority, wire(60_000, [id]));
      t.same(reasons(otherAction), ['APPROVAL_BINDING_MISMATCH'], 'another amount is another action');
      t.match(otherAction, { decision: 'deny', decisionObject: { reason_codes: ['APPROVAL_BINDING_MISMATCH', 'AMOUNT_OVER_HOLD_THRESHOLD'] } });
      t.notOk(otherAction.approval_request_id, 'a refused approval opens no new request');
      t.same(reasons(await evaluate(authority, wire(50_000, [id]), authority.globexAdmin)), ['APPROVAL_NOT_FOUND'], 'another organization cannot use it');

      const allowed = await evaluate(authority, wire(50_000, [id]));
      t.equal(allowed.decision, 'allow');
      t.equal(allowed.human_approval_status, 'approved');
      t.same(allowed.decisionObject.approvals, [{ id, accepted: true, reason: null }]);
      const claims = JSON.parse(Buffer.from((allowed.permit_token as string).split('.')[1] as string, 'base64url').toString('utf8'));
      t.same(claims.apr, [id], 'the permit names the approval it used');

      const again = await evaluate(authority, wire(50_000, [id]));
      t.same(reasons(again), ['APPROVAL_ALREADY_USED'], 'an approval backs one permit');
      t.match(again, { decision: 'deny', remediation: [{ code: 'REQUEST_APPROVAL' }] }, 'a second use is denied, not held again');
      t.notOk(again.permit_token);
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
      const rejected = await evaluate(authority, wire(20_000, [rejectedId]));
      t.same(reasons(rejected), ['APPROVAL_REJECTED']);
      t.match(rejected, { decision: 'deny', human_approval_status: 'rejected' });

      const lateId = (await evaluate(authority, wire(30_000))).approval_request_id as string;
      authority.clock.advance(7_200_000); // the payments class's hold timeout
      const late = await resolve(authority, lateId, 'approve', approver);
      t.equal(late.statusCode, 409, 'an expired request can no longer be approved');
      t.same(await expireDueApprovalRequests(authority.backend.db, authority.clock), { expired: 1 }, 'the sweep records the expiry');
      t.same(await expireDueApprovalRequests(authority.backend.db, authority.clock), { expired: 0 }, 'once');
      const lateRecord = ApprovalResponse.parse((await authority.app.inject({ method: 'GET', url: `/v1/approvals/${lateId}`, headers: authority.bearer(approver) })).json());
      t.equal(lateRecord.approval.status, 'expired');
      const expiredList = (await authority.app.inject({ method: 'GET', url: '/v1/approvals?status=expired', headers: authority.bearer(approver) })).json();
      t.same(expiredList.approvals.map((approval: { id: string }) => approval.id), [lateId], 'listed as expired');
      const lateEvents = (await authority.app.inject({ method: 'GET', url: '/v1/audit/events?limit=500', headers: authority.bearer(authority.acmeAdmin) })).json().events as Array<{ type: string; resource_id: string | null; decision: string | null }>;
      t.same(
        lateEvents.filter((event) => event.resource_id === lateId).map((event) => [event.type, event.decision]),
        [['approval.requested', 'hold'], ['approval.resolved', 'expired']],
        'the timeout is in the audit chain',
      );
      const expired = await evaluate(authority, wire(30_000, [lateId]));
      t.same(reasons(expired), ['APPROVAL_EXPIRED']);
      t.match(expired, { decision: 'deny', human_approval_status: 'expired' });
      t.match(await evaluate(authority, wire(30_000, ['not-an-id'])), { decision: 'deny', decisionObject: { approvals: [{ reason: 'APPROVAL_NOT_FOUND' }] } });
      t.equal((await evaluate(authority, wire(300, ['not-an-id']))).decision, 'allow', 'an action that needs no human is decided on its own');

      // The resolve route refuses the actor (tested above); should a record approved by the actor
      // exist all the same (an alias added later, say), the fresh evaluation still refuses it.
      const selfId = (await evaluate(authority, wire(25_000))).approval_request_id as string;
      await authority.backend.db.query("UPDATE approval_requests SET status = 'approved', resolved_by = 'finance-bot', resolved_at = now() WHERE id = $1", [selfId]);
      const selfApproved = await evaluate(authority, wire(25_000, [selfId]));
      t.same(reasons(selfApproved), ['APPROVAL_BY_ACTOR']);
      t.match(selfApproved, { decision: 'deny' });
      t.notOk(selfApproved.permit_token, 'self-approval backs no permit');

      const sharedId = (await evaluate(authority, wire(40_000))).approval_request_id as string;
      t.equal((await resolve(authority, sharedId, 'approve', approver)).statusCode, 200);
      const racing = await Promise.all(Array.from({ length: 8 }, () => evaluate(authority, wire(40_000, [sharedId]))));
      t.equal(racing.filter((answer) => answer.decision === 'allow').length, 1, 'exactly one of 8 concurrent evaluations got a permit');
      t.ok(racing.filter((answer) => answer.decision !== 'allow').every((answer) => answer.decision === 'deny' && reasons(answer)[0] === 'APPROVAL_ALREADY_USED'), 'the others were denied and told why');
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
      const reused = await evaluate(authority, wire(2_000_000, [id]));
      t.same(reasons(reused), ['APPROVAL_ALREADY_USED']);
      t.equal(reused.decision, 'deny');
      t.notOk(reused.escalation_id, 'a used escalation opens no new one');
    }),
  );
}
