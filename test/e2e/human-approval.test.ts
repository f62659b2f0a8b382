/**
 * Humans in the loop end to end on loopback (authority + proxy + upstream, real HTTP): a payment
 * is held or escalated, eligible humans approve it, the caller evaluates again with the approval,
 * and the permit it gets takes the payment through the proxy exactly once. An approval cannot be
 * used twice, for another payment, or when the actor approved itself: each is a deny with its
 * reason, and nothing more reaches the upstream.
 *
 * @example
 *   npx tap --disable-coverage test/e2e/human-approval.test.ts
 */
import t, { type Test } from 'tap';
import { request } from 'undici';
import { EvaluateResponse } from '../../shared/wire/evaluate.js';
import { appBackends } from '../helpers/backends.js';
import { call, type Harness, withHarness } from '../helpers/proxy-harness.js';

interface Payment {
  amount_usd: number;
  account_code: string;
}

const wire = (payment: Payment, approvals?: string[]) => ({
  action_type: 'payments.wire',
  actor_id: 'finance-bot',
  context: { environment: 'production', ...payment, ...(approvals ? { approvals } : {}) },
});

async function send(h: Harness, path: string, body: unknown, token = h.authority.acmeAdmin) {
  const response = await request(`${h.authorityUrl}${path}`, {
    method: 'POST',
    headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
    body: JSON.stringify(body),
  });
  const text = await response.body.text();
  return { status: response.statusCode, json: () => JSON.parse(text) as Record<string, unknown>, text };
}

async function evaluate(h: Harness, body: unknown): Promise<EvaluateResponse> {
  const response = await send(h, '/v1/evaluate', body);
  if (response.status !== 200) throw new Error(`evaluate answered ${response.status}: ${response.text}`);
  return EvaluateResponse.parse(response.json());
}

const human = (h: Harness, user: string) => h.authority.idp.sign({ sub: user, org_id: h.authority.acme.id, role: 'approver' });
const reasons = (response: EvaluateResponse) => response.decisionObject.approvals.map((approval) => approval.reason);
const pay = (proxyUrl: string, payment: Payment, token?: string) =>
  call(proxyUrl, '/wires', { token, actor: 'finance-bot', body: JSON.stringify(payment) });

/** The permit takes `payment` through the proxy once; a second try with it is refused. */
async function payOnce(t: Test, h: Harness, proxyUrl: string, payment: Payment, token: string): Promise<void> {
  const before = h.upstream.received.length;
  t.equal((await pay(proxyUrl, payment, token)).status, 201, 'the approved payment goes through');
  t.equal(h.upstream.received.length, before + 1, 'the upstream receives it once');
  t.notOk(h.upstream.received.at(-1)?.headers['x-service-permit'], 'without the permit header');
  const replay = await pay(proxyUrl, payment, token);
  t.match(replay.json(), { error: 'permit_rejected', reason: 'PERMIT_ALREADY_USED' });
  t.equal(h.upstream.received.length, before + 1, 'a replay does not reach the upstream');
}

for (const backend of appBackends()) {
  t.test(`hold → approval → fresh evaluation → the proxy forwards once, on ${backend.name}`, (t) =>
    withHarness(t, backend, async (h) => {
      const proxy = await h.startProxy();
      const payment = { amount_usd: 50_000, account_code: 'OPS-001' };

      const held = await evaluate(h, wire(payment));
      t.match(held, { decision: 'hold', human_approval_required: true, human_approval_status: 'pending' });
      const id = held.approval_request_id as string;
      t.match((await pay(proxy.url, payment)).json(), { error: 'permit_required', status: 403 }, 'a held payment has no permit to pass with');

      const selfApproval = await send(h, `/v1/approvals/${id}/resolve`, { decision: 'approve' }, await human(h, 'finance-bot'));
      t.equal(selfApproval.status, 403, 'the actor cannot approve its own payment');
      const stillPending = await evaluate(h, wire(payment, [id]));
      t.match(stillPending, { decision: 'deny', human_approval_status: 'pending' }, 'so its approval does not count');
      t.same(reasons(stillPending), ['APPROVAL_PENDING']);

      t.equal((await send(h, `/v1/approvals/${id}/resolve`, { decision: 'approve' }, await human(h, 'erin'))).status, 200, 'another finance approver signs off');
      const elsewhere = await evaluate(h, wire({ ...payment, account_code: 'OPS-002' }, [id]));
      t.match(elsewhere, { decision: 'deny' }, 'the approval is for this payment, not another account');
      t.same(reasons(elsewhere), ['APPROVAL_BINDING_MISMATCH']);
      t.notOk(elsewhere.permit_token);

      const allowed = await evaluate(h, wire(payment, [id]));
      t.match(allowed, { decision: 'allow', human_approval_status: 'approved' });
      await payOnce(t, h, proxy.url, payment, allowed.permit_token as string);

      const reused = await evaluate(h, wire(payment, [id]));
      t.match(reused, { decision: 'deny', decisionObject: { reason_codes: ['APPROVAL_ALREADY_USED', 'AMOUNT_OVER_HOLD_THRESHOLD'] } }, 'one approval, one permit');
      t.notOk(reused.permit_token);
      t.equal(h.upstream.received.length, 1, 'nothing else reached the upstream');

      // Should an approval given by the actor exist all the same (an alias added after it was
      // resolved, say), the fresh evaluation refuses it.
      const other = { amount_usd: 40_000, account_code: 'OPS-001' };
      const selfId = (await evaluate(h, wire(other))).approval_request_id as string;
      await h.opened.db.query("UPDATE approval_requests SET status = 'approved', resolved_by = 'finance-bot', resolved_at = now() WHERE id = $1", [selfId]);
      const selfApproved = await evaluate(h, wire(other, [selfId]));
      t.match(selfApproved, { decision: 'deny' });
      t.same(reasons(selfApproved), ['APPROVAL_BY_ACTOR']);
      t.match((await pay(proxy.url, other)).json(), { error: 'permit_required' }, 'and the payment does not go through');
      t.equal(h.upstream.received.length, 1);
    }),
  );

  t.test(`escalate → quorum → fresh evaluation → the proxy forwards once, on ${backend.name}`, (t) =>
    withHarness(t, backend, async (h) => {
      const proxy = await h.startProxy();
      const payment = { amount_usd: 2_000_000, account_code: 'OPS-001' };

      const escalated = await evaluate(h, wire(payment));
      t.match(escalated, { decision: 'escalate', human_approval_required: true });
      const id = escalated.escalation_id as string;
      const vote = async (token: string) => send(h, `/v1/escalations/${id}/respond`, { decision: 'approve' }, token);

      t.equal((await vote(await human(h, 'finance-bot'))).status, 403, 'the agent cannot vote on its own payment');
      t.equal((await vote(h.authority.acmeAdmin)).status, 403, 'nor can the credential that asked');
      t.equal((await vote(await human(h, 'treasurer-1'))).status, 200);
      t.same(reasons(await evaluate(h, wire(payment, [id]))), ['APPROVAL_PENDING'], 'two of three treasurers must vote yes');
      const settled = await vote(await human(h, 'treasurer-2'));
      t.match(settled.json(), { escalation: { status: 'approved' } });

      const allowed = await evaluate(h, wire(payment, [id]));
      t.match(allowed, { decision: 'allow', human_approval_status: 'approved' });
      t.match((await pay(proxy.url, { ...payment, amount_usd: 2_000_001 }, allowed.permit_token as string)).json(), { error: 'permit_rejected', reason: 'BINDING_MISMATCH' }, 'the permit is for this amount only');
      t.equal(h.upstream.received.length, 0);
      const fresh = await evaluate(h, wire(payment, [id]));
      t.match(fresh, { decision: 'deny' }, 'the escalation backed one permit already');
      t.same(reasons(fresh), ['APPROVAL_ALREADY_USED']);
      t.notOk(fresh.escalation_id, 'and no new escalation was opened');
      // The first permit was not consumed by the refused request: the binding is checked before the consume.
      await payOnce(t, h, proxy.url, payment, allowed.permit_token as string);
    }),
  );
}
