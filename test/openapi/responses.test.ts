/**
 * Every answer a realistic flow gets over real HTTP is one the OpenAPI document describes: the
 * operation exists (at its canonical path or an alias), the status is documented, and the JSON
 * body validates against the documented schema. The flow reaches every documented operation with
 * a success answer, and the error answers 400, 401, 403, 404, 409, 413 and 415.
 */
import t from 'tap';
import { openApiDocument } from '../../authority/openapi/document.js';
import { withTestAuthority, type TestAuthority } from '../helpers/authority.js';
import { appBackends } from '../helpers/backends.js';
import { OpenApiResponses } from '../helpers/openapi-responses.js';

interface Reply {
  status: number;
  body: any;
  headers: Headers;
}

const wire = (amount: number, approvals?: string[]) => ({
  action_type: 'payments.wire',
  actor_id: 'finance-bot',
  context: { environment: 'production', amount_usd: amount, account_code: 'OPS-001', ...(approvals ? { approvals } : {}) },
});
const demo = { action_type: 'demo.echo', actor_id: 'demo-agent', context: { environment: 'dev', target: { type: 'demo', id: 'openapi' } } };

async function client(authority: TestAuthority, responses: OpenApiResponses, problems: string[]) {
  const base = await authority.app.listen({ host: '127.0.0.1', port: 0 });
  return async (method: string, url: string, options: { token?: string | null; body?: unknown; raw?: string; contentType?: string } = {}): Promise<Reply> => {
    const headers: Record<string, string> = {};
    const token = options.token === undefined ? authority.acmeAdmin : options.token;
    if (token !== null) headers.authorization = `Bearer ${token}`;
    let payload: string | undefined;
    if (options.raw !== undefined || options.body !== undefined) {
      headers['content-type'] = options.contentType ?? 'application/json';
      payload = options.raw ?? JSON.stringify(options.body);
    }
    const response = await fetch(`${base}${url}`, { method, headers, body: payload });
    const text = await response.text();
    let body: unknown = text;
    if ((response.headers.get('content-type') ?? '').includes('json')) body = JSON.parse(text);
    problems.push(...responses.check({ method, url, status: response.status, body }));
    return { status: response.status, body, headers: response.headers };
  };
}

for (const backend of appBackends()) {
  t.test(`every answer of a full flow matches the OpenAPI document, on ${backend.name}`, (t) =>
    withTestAuthority(t, backend, async (authority) => {
      const responses = new OpenApiResponses(openApiDocument(authority.app));
      const problems: string[] = [];
      const call = await client(authority, responses, problems);
      const expect = async (status: number, reply: Promise<Reply>, what: string): Promise<any> => {
        const got = await reply;
        t.equal(got.status, status, `${what} answers ${status}`);
        return got.body;
      };

      // Service: no credential.
      await expect(200, call('GET', '/healthz', { token: null }), 'healthz');
      await expect(200, call('GET', '/readyz', { token: null }), 'readyz');
      const served = await expect(200, call('GET', '/openapi.json', { token: null }), 'the document');
      t.equal(served.openapi, '3.1.0');

      // Identity.
      const userToken = await authority.idp.sign({ sub: 'ana', email: 'ana@example.com', org_id: authority.acme.id, role: 'admin' });
      await expect(200, call('GET', '/v1/session', { token: userToken }), 'session');
      await expect(403, call('GET', '/v1/session'), 'session with an API key');
      for (const url of ['/v1/api-key-self', '/v1-api-key-self']) await expect(200, call('GET', url), url);

      // API keys.
      const created = await expect(201, call('POST', '/v1/api-keys', { body: { name: 'openapi', scopes: ['audit:read', 'permits:read'] } }), 'create key');
      await expect(200, call('GET', '/v1/api-keys'), 'list keys');
      await expect(200, call('POST', `/v1/api-keys/${created.api_key.id}/revoke`), 'revoke key');
      await expect(404, call('POST', '/v1/api-keys/00000000-0000-4000-8000-000000000000/revoke'), 'revoke an unknown key');

      // Policies.
      const policy = await expect(200, call('GET', '/v1/policies'), 'get policy');
      await expect(200, call('POST', '/v1/policies/validate', { body: { source: policy.policy.source } }), 'validate a policy');
      const invalid = await expect(200, call('POST', '/v1/policies/validate', { body: { source: 'version: 1\naction_classes: 7\n' } }), 'validate a broken policy');
      t.equal(invalid.valid, false);
      await expect(200, call('PUT', '/v1/policies', { body: { source: policy.policy.source, format: policy.policy.format } }), 'put policy');
      await expect(200, call('GET', '/v1/policies/versions/1'), 'an older policy version');
      await expect(404, call('GET', '/v1/policies/versions/999'), 'a version that does not exist');

      // Evaluate: allow (wire form and agent form), deny, hold, escalate, on the canonical path and its aliases.
      const allowed = await expect(200, call('POST', '/v1/evaluate', { body: demo }), 'evaluate allow');
      t.equal(allowed.decision, 'allow');
      const second = await expect(200, call('POST', '/v1-evaluate', { body: demo }), 'evaluate on /v1-evaluate');
      const third = await expect(200, call('POST', '/functions/v1/v1-evaluate', { body: { ...demo, explain: true } }), 'evaluate on /functions/v1/v1-evaluate');
      const agent = { actor: { id: 'support-agent', type: 'agent' }, action: { type: 'agent.tool.invoke' }, target: { type: 'tool', id: 'drop_database', environment: 'production' } };
      t.equal((await expect(200, call('POST', '/v1/evaluate', { body: agent }), 'evaluate deny (agent form)')).decision, 'deny');
      const held = await expect(200, call('POST', '/v1/evaluate', { body: wire(50_000) }), 'evaluate hold');
      t.equal(held.decision, 'hold');
      const escalated = await expect(200, call('POST', '/v1/evaluate', { body: wire(2_000_000) }), 'evaluate escalate');
      t.equal(escalated.decision, 'escalate');
      await expect(400, call('POST', '/v1/evaluate', { body: { action_type: 'Not A Type', actor_id: 'x' } }), 'evaluate with an invalid action type');
      await expect(409, call('POST', '/v1/evaluate', { body: { ...demo, request_id: allowed.request_id, actor_id: 'someone-else' } }), 'a reused request_id');

      // AuthZEN: one evaluation, a batch (and the batch endpoint's single form), discovery, a malformed body, the searches.
      const authzen = { subject: { type: 'service', id: 'finance-bot' }, action: { name: 'payments.wire' }, resource: { type: 'payee', id: 'acme-supplies' } };
      const production = (amount: number) => ({ environment: 'production', amount_usd: amount, account_code: 'OPS-001' });
      t.equal((await expect(200, call('POST', '/access/v1/evaluation', { body: { ...authzen, context: production(50_000) } }), 'AuthZEN hold')).decision, false);
      const batch = await expect(200, call('POST', '/access/v1/evaluations', { body: { ...authzen, evaluations: [{ context: production(500) }, { context: production(2_000_000) }] } }), 'AuthZEN batch');
      t.same(batch.evaluations.map((entry: { decision: boolean }) => entry.decision), [true, false]);
      await expect(200, call('POST', '/access/v1/evaluations', { body: { ...authzen, context: production(500) } }), 'AuthZEN batch endpoint, single form');
      await expect(200, call('GET', '/.well-known/authzen-configuration', { token: null }), 'AuthZEN discovery');
      await expect(400, call('POST', '/access/v1/evaluation', { body: { ...authzen, action: {} } }), 'AuthZEN without an action name');
      await expect(200, call('POST', '/access/v1/search/subject', { body: authzen }), 'AuthZEN subject search');
      await expect(200, call('POST', '/access/v1/search/action', { body: authzen }), 'AuthZEN action search');

      // Permits and the gate.
      await expect(200, call('GET', '/v1/permit-keys'), 'permit keys');
      const verified = await expect(200, call('POST', '/v1/verify-permit', { body: { permit_token: allowed.permit_token, ...demo } }), 'verify');
      t.equal(verified.valid, true);
      const replayed = await expect(200, call('POST', '/v1-verify-permit', { body: { permit_token: allowed.permit_token, ...demo } }), 'verify a used permit');
      t.equal(replayed.valid, false);
      await expect(200, call('POST', '/functions/v1/v1-verify-permit', { body: { permit_token: second.permit_token, action_type: 'demo.echo' } }), 'verify, partial binding');
      await expect(200, call('GET', '/v1/permits?limit=2'), 'list permits');
      await expect(200, call('GET', `/v1/permits/${allowed.permit_id}`), 'get permit');
      await expect(201, call('POST', '/v1/effects', { body: { permit_id: allowed.permit_id, status: 'succeeded', summary: 'echoed' } }), 'report an effect');
      await expect(200, call('GET', `/v1/permits/${allowed.permit_id}/proof`), 'permit proof');
      await expect(200, call('POST', `/v1/permits/${third.permit_id}/revoke`, { body: { reason: 'no longer needed' } }), 'revoke permit');
      await expect(200, call('POST', `/v1/permits/${third.permit_id}/revoke`, { body: {} }), 'revoke it again (idempotent)');
      await expect(409, call('POST', `/v1/permits/${allowed.permit_id}/revoke`, { body: {} }), 'revoke a consumed permit');
      await expect(200, call('POST', `/v1/permits/${second.permit_token}/verify`, { body: {} }), 'verify by id, the token in the path');
      const revocable = await expect(200, call('POST', '/v1/evaluate', { body: demo }), 'evaluate another');
      await expect(200, call('POST', '/v1/revoke-permit', { body: { decision_id: revocable.permit_token, reason: 'cancelled' } }), 'revoke, the deprecated way');
      await expect(200, call('POST', '/v1/evaluate-stream', { body: demo }), 'evaluate as a stream of events');
      await expect(404, call('GET', '/v1/permits/no_such_permit'), 'an unknown permit');

      // Approvals: the hold's request, resolved by another identity.
      const approver = await authority.key(['approvals:read', 'approvals:write']);
      await expect(200, call('GET', '/v1/approvals?status=pending', { token: approver }), 'list approvals');
      await expect(200, call('GET', `/v1/approvals/${held.approval_request_id}`, { token: approver }), 'get approval');
      await expect(200, call('POST', `/v1/approvals/${held.approval_request_id}/resolve`, { token: approver, body: { decision: 'approve', note: 'checked' } }), 'resolve approval');
      await expect(409, call('POST', `/v1/approvals/${held.approval_request_id}/resolve`, { token: approver, body: { decision: 'reject' } }), 'resolve it again');

      // Escalations: created by one key, voted on by the admin.
      const requester = await authority.key(['evaluate:write']);
      const escalation = await expect(
        200,
        call('POST', '/v1/escalations', { token: requester, body: { agentId: 'deploy-bot', escalationReason: 'schema change', quorumConfig: { quorumRequired: 'single_approver' } } }),
        'create escalation',
      );
      await expect(200, call('GET', '/v1/escalations?limit=5'), 'list escalations');
      await expect(200, call('GET', `/v1/escalations/${escalation.id}`), 'get escalation');
      await expect(200, call('POST', `/v1/escalations/${escalation.id}/respond`, { body: { decision: 'approve', note: 'ok' } }), 'respond');
      await expect(409, call('POST', `/v1/escalations/${escalation.id}/respond`, { body: { decision: 'reject' } }), 'respond to a final escalation');

      // Webhooks: every action, on the canonical path and its aliases.
      const subscription = (await expect(200, call('POST', '/v1/webhooks', { body: { action: 'create', name: 'ops', url: 'https://hooks.example.com/cs' } }), 'webhook create')).subscription;
      await expect(200, call('POST', '/v1-webhooks', { body: { action: 'list' } }), 'webhook list');
      await expect(200, call('POST', '/functions/v1/v1-webhooks', { body: { action: 'update', id: subscription.id, patch: { is_active: false } } }), 'webhook update');
      await expect(200, call('POST', '/v1/webhooks', { body: { action: 'rotate_secret', id: subscription.id } }), 'webhook rotate');
      const queued = await expect(200, call('POST', '/v1/webhooks', { body: { action: 'test', id: subscription.id } }), 'webhook test');
      await expect(200, call('POST', '/v1/webhooks', { body: { action: 'list_deliveries', subscription_id: subscription.id } }), 'webhook deliveries');
      await expect(409, call('POST', '/v1/webhooks', { body: { action: 'replay', delivery_id: queued.delivery_id } }), 'replay a pending delivery');
      await expect(409, call('POST', '/v1/webhooks', { body: { action: 'create', name: 'ops', url: 'https://hooks.example.com/other' } }), 'a duplicate name');
      await expect(200, call('POST', '/v1/webhooks', { body: { action: 'delete', id: subscription.id } }), 'webhook delete');
      await expect(404, call('POST', '/v1/webhooks', { body: { action: 'test', id: subscription.id } }), 'a deleted subscription');

      // Audit.
      await expect(200, call('GET', '/v1/audit/events?limit=5&type=permit.issued'), 'audit events');
      await expect(200, call('GET', '/v1-audit/events?types=evaluation.decided'), 'audit events on the alias');
      await expect(200, call('POST', '/v1/audit/exports'), 'export the whole chain');
      await expect(200, call('POST', '/v1-audit/exports', { body: { from_sequence: 1, to_sequence: 3 } }), 'export a range');
      await expect(200, call('GET', '/v1/audit/keys'), 'audit keys');
      await expect(200, call('GET', '/v1/audit/status'), 'audit status');
      await expect(200, call('GET', '/v1/audit/status?from_sequence=1&to_sequence=2'), 'audit status of a range');
      await expect(200, call('GET', '/v1/gates/readiness?window_days=7&quiet_days=3&expected=MISSING_PERMIT'), 'gate readiness');
      await expect(400, call('GET', '/v1/gates/readiness?window_days=2&quiet_days=5'), 'quiet days beyond the window');

      // Error answers.
      await expect(401, call('GET', '/v1/permits', { token: null }), 'no credential');
      await expect(401, call('GET', '/v1/permits', { token: 'ask_live_' + 'x'.repeat(40) }), 'an unknown key');
      await expect(403, call('GET', '/v1/api-keys', { token: await authority.key(['audit:read']) }), 'a key lacking the scope');
      await expect(400, call('POST', '/v1/api-keys', { body: { name: 'x', scopes: ['evaluate'] } }), 'a bare scope name');
      await expect(400, call('POST', '/v1/effects', { raw: '{"permit_id":' }), 'bad JSON');
      await expect(413, call('POST', '/v1/evaluate', { body: { ...demo, context: { padding: 'x'.repeat(70_000) } } }), 'a body over 64 KiB');
      await expect(415, call('POST', '/v1/evaluate', { raw: 'hello', contentType: 'text/plain' }), 'a text body');
      await expect(400, call('GET', '/v1/audit/events?limit=0'), 'an out-of-range query');

      t.same(problems, [], 'every answer matches the document');
      const missed = responses.operations().filter((operation) => !responses.succeeded.has(operation));
      t.same(missed, [], 'the flow reached every documented operation with a success answer');
    }),
  );
}
