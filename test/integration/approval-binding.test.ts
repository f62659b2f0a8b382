/**
 * An approval backs exactly the action it was opened for, every bound fact included: the action
 * class's own bound keys (an MCP tool call's `arguments_digest`, a release's destination) as well
 * as the standard facts, for approval requests and escalations alike. And `reuse_approvals`: a
 * caller that cannot carry an approval id gets the pending one of the same action back instead of
 * a second one, runs the action once after it is approved, and starts over after a rejection or
 * an expiry, told why. Over real HTTP, on every backend.
 */
import { readFileSync } from 'node:fs';
import t from 'tap';
import { ApprovalResponse, ListApprovalsResponse } from '../../shared/wire/approvals.js';
import { EvaluateResponse } from '../../shared/wire/evaluate.js';
import { type TestAuthority, withTestAuthority } from '../helpers/authority.js';
import { appBackends } from '../helpers/backends.js';
import { loopbackApi } from '../helpers/loopback-api.js';
import { repoPath } from '../helpers/repo.js';

const DIGEST_A = 'a'.repeat(64);
const DIGEST_B = 'b'.repeat(64);

/** The example policy, whose tool calls are bound to their arguments as the MCP gate requires. */
function policyBindingArguments(): string {
  const example = readFileSync(repoPath('config', 'policies', 'default.yaml'), 'utf8');
  if (!example.includes('  - id: agent.tool\n') || !example.includes('    bind: [arguments_digest]\n')) {
    throw new Error('the example policy no longer binds the agent.tool class to arguments_digest, which this test relies on');
  }
  return example;
}

/** A refund over the approval threshold, with these arguments. */
const refund = (digest: string, extra: { approvals?: string[]; reuse?: boolean } = {}) => ({
  action_type: 'agent.tool.invoke',
  actor_id: 'support-agent',
  context: { target: { type: 'tool', id: 'issue_refund' }, amount_usd: 500, arguments_digest: digest, ...(extra.approvals ? { approvals: extra.approvals } : {}) },
  ...(extra.reuse ? { reuse_approvals: true } : {}),
});

/** A release of personal data: escalated to two privacy approvers. */
const release = (destination: string, approvals?: string[]) => ({
  action_type: 'data.release',
  actor_id: 'export-bot',
  context: { dataset: 'crm-contacts', destination, contains_pii: true, ...(approvals ? { approvals } : {}) },
});

async function setUp(authority: TestAuthority) {
  const { call, problems } = await loopbackApi(authority);
  const loaded = await call('PUT', '/v1/policies', { body: { source: policyBindingArguments(), format: 'yaml' } });
  if (loaded.status !== 200) throw new Error(`the policy was refused: ${loaded.text}`);
  const evaluate = async (body: unknown, token?: string) => {
    const reply = await call('POST', '/v1/evaluate', { body, ...(token === undefined ? {} : { token }) });
    if (reply.status !== 200) throw new Error(`evaluate answered ${reply.status}: ${reply.text}`);
    return EvaluateResponse.parse(reply.body);
  };
  const approver = await authority.key(['approvals:read', 'approvals:write']);
  const resolve = async (id: string, decision: 'approve' | 'reject') => {
    const reply = await call('POST', `/v1/approvals/${id}/resolve`, { body: { decision }, token: approver });
    if (reply.status !== 200) throw new Error(`resolve answered ${reply.status}: ${reply.text}`);
  };
  const approval = async (id: string) => ApprovalResponse.parse((await call('GET', `/v1/approvals/${id}`, { token: approver })).body).approval;
  return { call, problems, evaluate, resolve, approval, approver };
}

const reasons = (response: EvaluateResponse) => response.decisionObject.approvals.map((approval) => approval.reason);
const claimsOf = (token: string) => JSON.parse(Buffer.from(token.split('.')[1] as string, 'base64url').toString('utf8'));

for (const backend of appBackends()) {
  t.test(`an approval backs only the action with every bound fact it was opened for, on ${backend.name}`, (t) =>
    withTestAuthority(t, backend, async (authority) => {
      const { problems, evaluate, resolve, call } = await setUp(authority);

      const held = await evaluate(refund(DIGEST_A));
      t.equal(held.decision, 'hold');
      t.ok(held.decisionObject.bound_facts.includes('arguments_digest'), "the class binds the call's arguments");
      const id = held.approval_request_id as string;
      await resolve(id, 'approve');

      const changed = await evaluate(refund(DIGEST_B, { approvals: [id] }));
      t.same(changed.decisionObject.approvals, [{ id, accepted: false, reason: 'APPROVAL_BINDING_MISMATCH' }], 'an approval for arguments A does not back arguments B');
      t.match(changed, { decision: 'deny', decisionObject: { reason_codes: ['APPROVAL_BINDING_MISMATCH', 'REFUND_NEEDS_APPROVAL'] } }, 'the action still needs a human, so it is denied and told why');
      t.notOk(changed.permit_token, 'no permit');
      t.notOk(changed.approval_request_id, 'and no new request opens for a caller who presented one');

      const allowed = await evaluate(refund(DIGEST_A, { approvals: [id] }));
      t.equal(allowed.decision, 'allow', 'the approval backs the arguments it was opened for');
      t.same(allowed.decisionObject.approvals, [{ id, accepted: true, reason: null }]);
      t.same(claimsOf(allowed.permit_token as string).apr, [id], 'the permit names it');

      // An escalation evaluate opened is bound the same way: here to the release's destination.
      const escalated = await evaluate(release('partner-x'));
      t.equal(escalated.decision, 'escalate');
      const escalationId = escalated.escalation_id as string;
      for (const user of ['privacy-officer', 'data-owner']) {
        const token = await authority.idp.sign({ sub: user, org_id: authority.acme.id, role: 'approver' });
        t.equal((await call('POST', `/v1/escalations/${escalationId}/respond`, { body: { decision: 'approve' }, token })).status, 200, `${user} approves`);
      }
      const elsewhere = await evaluate(release('partner-y', [escalationId]));
      t.same(reasons(elsewhere), ['APPROVAL_BINDING_MISMATCH'], 'an escalation approved for one destination does not back another');
      t.equal(elsewhere.decision, 'deny');
      const there = await evaluate(release('partner-x', [escalationId]));
      t.equal(there.decision, 'allow', 'it backs the destination it was approved for');

      t.same(problems, [], 'every answer is one the OpenAPI document describes');
    }),
  );

  t.test(`reuse_approvals: one pending approval per action and requester, used once, on ${backend.name}`, (t) =>
    withTestAuthority(t, backend, async (authority) => {
      const { problems, evaluate, resolve, approval, call, approver } = await setUp(authority);
      const otherRequester = await authority.key(['evaluate:write']);

      const first = await evaluate(refund(DIGEST_A, { reuse: true }));
      t.equal(first.decision, 'hold');
      const id = first.approval_request_id as string;
      const second = await evaluate(refund(DIGEST_A, { reuse: true }));
      t.match(second, { decision: 'hold', approval_request_id: id }, 'a second hold of the same action names the same approval request');
      t.same(second.decisionObject.approvals, [{ id, accepted: false, reason: 'APPROVAL_PENDING' }], 'and says it is pending');
      const pending = ListApprovalsResponse.parse((await call('GET', '/v1/approvals?status=pending', { token: approver })).body).approvals;
      t.same(pending.map((item) => item.id), [id], "approvers' inbox holds it once");

      const changedArguments = await evaluate(refund(DIGEST_B, { reuse: true }));
      t.equal(changedArguments.decision, 'hold');
      t.not(changedArguments.approval_request_id, id, 'other arguments are another action, with an approval of their own');
      const theirs = await evaluate(refund(DIGEST_A, { reuse: true }), otherRequester);
      t.equal(theirs.decision, 'hold');
      t.not(theirs.approval_request_id, id, 'another requester does not reuse it');

      await resolve(id, 'approve');
      const notTheirs = await evaluate(refund(DIGEST_A, { reuse: true }), otherRequester);
      t.match(notTheirs, { decision: 'hold', approval_request_id: theirs.approval_request_id }, 'nor does it back their evaluation once approved');

      const allowed = await evaluate(refund(DIGEST_A, { reuse: true }));
      t.equal(allowed.decision, 'allow', 'after the approval, the same action with reuse_approvals is allowed');
      t.same(allowed.decisionObject.approvals, [{ id, accepted: true, reason: null }], 'backed by the approval as if it had been named');
      t.equal(allowed.human_approval_status, 'approved');
      t.same(claimsOf(allowed.permit_token as string).apr, [id], 'the permit names it');
      t.equal((await approval(id)).used_by_permit_id, allowed.permit_id, 'and the approval is used by that permit');

      const again = await evaluate(refund(DIGEST_A, { reuse: true }));
      t.equal(again.decision, 'hold', 'the next evaluation of the same action holds again: the approval was used');
      t.not(again.approval_request_id, id, 'with a new approval request');
      t.notOk(again.permit_token);

      const events = (await call('GET', `/v1/audit/events?type=evaluation.decided&resource_id=${allowed.evaluation_id}`)).body.events as Array<{ payload: { details: { approvals: unknown } } }>;
      t.same(events.map((event) => event.payload.details.approvals), [[{ id, accepted: true, reason: null }]], 'the audit log records the approval the evaluation used');

      t.same(problems, [], 'every answer is one the OpenAPI document describes');
    }),
  );

  t.test(`without reuse_approvals every hold opens its own request, as before, on ${backend.name}`, (t) =>
    withTestAuthority(t, backend, async (authority) => {
      const { evaluate } = await setUp(authority);
      const first = await evaluate(refund(DIGEST_A));
      const second = await evaluate(refund(DIGEST_A));
      t.equal(first.decision, 'hold');
      t.equal(second.decision, 'hold');
      t.not(second.approval_request_id, first.approval_request_id);
      t.same(second.decisionObject.approvals, [], 'and reports no approval');
    }),
  );

  t.test(`reuse_approvals under concurrency, after a rejection and after an expiry, on ${backend.name}`, (t) =>
    withTestAuthority(t, backend, async (authority) => {
      const { problems, evaluate, resolve } = await setUp(authority);

      const held = await evaluate(refund(DIGEST_A, { reuse: true }));
      const id = held.approval_request_id as string;
      await resolve(id, 'approve');
      const racing = await Promise.all(Array.from({ length: 20 }, () => evaluate(refund(DIGEST_A, { reuse: true }))));
      const allowed = racing.filter((answer) => answer.decision === 'allow');
      t.equal(allowed.length, 1, 'exactly one of 20 concurrent evaluations got a permit');
      const heldAgain = racing.filter((answer) => answer.decision !== 'allow');
      t.ok(heldAgain.every((answer) => answer.decision === 'hold'), 'the others are held again');
      t.equal(new Set(heldAgain.map((answer) => answer.approval_request_id)).size, 1, 'all naming one new approval request');
      t.not(heldAgain[0]?.approval_request_id, id);

      const rejectedId = (await evaluate(refund(DIGEST_B, { reuse: true }))).approval_request_id as string;
      await resolve(rejectedId, 'reject');
      const afterRejection = await evaluate(refund(DIGEST_B, { reuse: true }));
      t.equal(afterRejection.decision, 'hold', 'a rejected approval is not reused');
      t.not(afterRejection.approval_request_id, rejectedId, 'a new request opens');
      t.same(afterRejection.decisionObject.approvals, [{ id: rejectedId, accepted: false, reason: 'APPROVAL_REJECTED' }], 'and the answer says why');
      t.equal((await evaluate(refund(DIGEST_B, { reuse: true }))).approval_request_id, afterRejection.approval_request_id, 'the new one is then the one reused');

      const digestC = 'c'.repeat(64);
      const lapsedId = (await evaluate(refund(digestC, { reuse: true }))).approval_request_id as string;
      authority.clock.advance(3_600_000); // the example policy's hold timeout
      const afterExpiry = await evaluate(refund(digestC, { reuse: true }));
      t.equal(afterExpiry.decision, 'hold', 'an expired approval is not reused');
      t.not(afterExpiry.approval_request_id, lapsedId, 'a new request opens');
      t.same(afterExpiry.decisionObject.approvals, [{ id: lapsedId, accepted: false, reason: 'APPROVAL_EXPIRED' }], 'and the answer says why');

      t.same(problems, [], 'every answer is one the OpenAPI document describes');
    }),
  );
}
