/**
 * Approvers see what they approve: an approval request (`GET /v1/approvals/:id` and the list)
 * and an escalation opened by evaluate carry the action's bound facts (environment, target,
 * amount, account and the class's own bound keys), readable with approvals:read alone, over real
 * HTTP and as the OpenAPI document describes them. Context keys that are not bound (a token the
 * caller sent along, say) are in none of them. Requests and escalations opened before the
 * authority kept these facts get them from their evaluation's audit event when it migrates.
 */
import t from 'tap';
import { migrate } from '../../authority/store/migrate.js';
import { ApprovalResponse, ListApprovalsResponse } from '../../shared/wire/approvals.js';
import { EscalationDetailResponse, EscalationWire } from '../../shared/wire/escalations.js';
import { EvaluateResponse } from '../../shared/wire/evaluate.js';
import { withTestAuthority } from '../helpers/authority.js';
import { appBackends } from '../helpers/backends.js';
import { loopbackApi } from '../helpers/loopback-api.js';

/** Sent along with each action, bound by no class: it must never reach an approver. */
const UNBOUND_SECRET = 'tok-must-not-be-shown-7f3a';

const payment = {
  action_type: 'payments.wire',
  actor_id: 'finance-bot',
  context: { environment: 'production', amount_usd: 50_000, account_code: 'OPS-001', target: { type: 'vendor', id: 'acme-supplies' }, api_token: UNBOUND_SECRET },
};
// data.release binds `dataset` and `destination`; external and bulk: held.
const release = {
  action_type: 'data.release',
  actor_id: 'export-bot',
  context: { dataset: 'crm-contacts', destination: 'partner-x', destination_type: 'external', record_count: 250_000, export_token: UNBOUND_SECRET },
};
// access.grant binds `role` and `grantee`; a privileged role: escalated.
const grant = {
  action_type: 'access.grant',
  actor_id: 'iam-bot',
  context: { environment: 'production', role: 'admin', grantee: 'dana', duration_hours: 8, ticket_secret: UNBOUND_SECRET },
};

type Call = Awaited<ReturnType<typeof loopbackApi>>['call'];

const evaluateWith = (call: Call) => async (body: unknown) => {
  const reply = await call('POST', '/v1/evaluate', { body });
  if (reply.status !== 200) throw new Error(`evaluate answered ${reply.status}: ${reply.text}`);
  return EvaluateResponse.parse(reply.body);
};

for (const backend of appBackends()) {
  t.test(`approval requests and escalations carry the bound facts, never the rest of the context, on ${backend.name}`, (t) =>
    withTestAuthority(t, backend, async (authority) => {
      const { call, problems } = await loopbackApi(authority);
      const reader = await authority.key(['approvals:read']);
      const evaluate = evaluateWith(call);

      const held = await evaluate(payment);
      t.equal(held.decision, 'hold');
      const one = await call('GET', `/v1/approvals/${held.approval_request_id as string}`, { token: reader });
      t.equal(one.status, 200, 'approvals:read is enough to read the request');
      t.same(
        ApprovalResponse.parse(one.body).approval.bound_facts,
        { action_type: 'payments.wire', actor_id: 'finance-bot', environment: 'production', amount_usd: 50_000, account_code: 'OPS-001', target: { type: 'vendor', id: 'acme-supplies' } },
        'the request carries environment, target, amount and account',
      );
      t.notMatch(one.text, UNBOUND_SECRET, 'and no context key the class does not bind');

      const heldRelease = await evaluate(release);
      t.equal(heldRelease.decision, 'hold');
      const pending = await call('GET', '/v1/approvals?status=pending', { token: reader });
      const listed = ListApprovalsResponse.parse(pending.body).approvals.find((approval) => approval.id === heldRelease.approval_request_id);
      t.same(
        listed?.bound_facts,
        { action_type: 'data.release', actor_id: 'export-bot', dataset: 'crm-contacts', destination: 'partner-x' },
        "the list carries them too, with the class's own bound keys",
      );
      t.notMatch(pending.text, UNBOUND_SECRET);

      const escalated = await evaluate(grant);
      t.equal(escalated.decision, 'escalate');
      const evaluator = await authority.key(['evaluate:write']);
      const detail = await call('GET', `/v1/escalations/${escalated.escalation_id as string}`, { token: evaluator });
      const { escalation } = EscalationDetailResponse.parse(detail.body);
      const grantFacts = { action_type: 'access.grant', actor_id: 'iam-bot', environment: 'production', role: 'admin', grantee: 'dana' };
      t.same(escalation.boundFacts, grantFacts, 'an escalation evaluate opened carries the bound facts');
      t.same(escalation.proposedAction, { action_type: 'access.grant', actor_id: 'iam-bot', context: { environment: 'production', role: 'admin', grantee: 'dana' } }, 'and proposes exactly that action');
      t.notMatch(detail.text, UNBOUND_SECRET, 'with nothing else of the context, though any credential may read it');
      const list = await call('GET', '/v1/escalations?status=pending', { token: evaluator });
      t.same(EscalationWire.array().parse(list.body).find((item) => item.id === escalated.escalation_id)?.boundFacts, grantFacts, 'the list carries them too');

      const created = await call('POST', '/v1/escalations', { body: { agentId: 'deploy-bot', escalationReason: 'manual change', proposedAction: { change: 'CHG-1' } } });
      t.equal(created.status, 200);
      t.equal(EscalationWire.parse(created.body).boundFacts, null, 'an escalation created through the API is bound to nothing');

      t.same(problems, [], 'every answer is one the OpenAPI document describes');
    }),
  );

  t.test(`requests and escalations from before the facts were kept get them from the audit log when the authority migrates, on ${backend.name}`, (t) =>
    withTestAuthority(t, backend, async (authority) => {
      const { call } = await loopbackApi(authority);
      const held = await evaluateWith(call)(payment);
      const escalated = await evaluateWith(call)(grant);
      const manual = EscalationWire.parse((await call('POST', '/v1/escalations', { body: { agentId: 'deploy-bot', escalationReason: 'manual change' } })).body);
      const { db } = authority.backend;
      const stored = async () => ({
        approval: (await db.query<{ bound_facts: unknown }>('SELECT bound_facts FROM approval_requests WHERE id = $1', [held.approval_request_id]))[0]?.bound_facts,
        escalation: (await db.query<{ bound_facts: unknown }>('SELECT bound_facts FROM escalations WHERE id = $1', [escalated.escalation_id]))[0]?.bound_facts,
        manual: (await db.query<{ bound_facts: unknown }>('SELECT bound_facts FROM escalations WHERE id = $1', [manual.id]))[0]?.bound_facts,
      });
      const written = await stored();
      t.ok(written.approval && written.escalation, 'evaluate stored the facts');

      // The schema as it was before: no column for the facts (nor their hash), and the migrations since not yet applied.
      await db.exec(`ALTER TABLE approval_requests DROP COLUMN bound_facts, DROP COLUMN bound_facts_hash;
        ALTER TABLE escalations DROP CONSTRAINT escalations_bound_facts_with_binding;
        ALTER TABLE escalations DROP COLUMN bound_facts, DROP COLUMN bound_facts_hash;
        ALTER TABLE api_keys DROP COLUMN allowed_actors;
        DELETE FROM schema_migrations WHERE version >= 16;`);
      t.same((await migrate(db)).applied, ['0016_approval_bound_facts', '0017_approval_reuse', '0018_api_key_allowed_actors'], 'the migrations run on the existing rows');
      t.same(await stored(), written, 'and gives them the facts evaluate would have stored, from their evaluation.decided events');
      t.equal(written.manual, null, 'an escalation created through the API stays bound to nothing');

      // Such a request is not found by reuse_approvals (it has no bound_facts_hash), but named, it still backs its action.
      const approver = await authority.key(['approvals:write']);
      t.equal((await call('POST', `/v1/approvals/${held.approval_request_id as string}/resolve`, { body: { decision: 'approve' }, token: approver })).status, 200);
      const allowed = await evaluateWith(call)({ ...payment, context: { ...payment.context, approvals: [held.approval_request_id] } });
      t.equal(allowed.decision, 'allow', 'a request opened before the migrations still backs the action it was opened for');
    }),
  );
}
