/**
 * The decision path through the real app: evaluate (both request forms, three paths, shadow,
 * explain, idempotency), the permit it issues, verify-permit, revocation, effects and the proof,
 * all recorded in the audit chain. Runs on PGlite + the in-process store, and on Postgres + Redis
 * when they are available.
 */
import t from 'tap';
import { staticKeyResolver } from '../../shared/permits/static-keys.js';
import { verifyPermit } from '../../shared/permits/verify.js';
import { ErrorEnvelope } from '../../shared/wire/envelope.js';
import { EvaluateResponse } from '../../shared/wire/evaluate.js';
import { VerifyPermitResponse } from '../../shared/wire/permits.js';
import { createTestAuthority, GENEROUS_LIMITS, type TestAuthority, withTestAuthority } from '../helpers/authority.js';
import { appBackends, realServersMissing } from '../helpers/backends.js';


const demo = (actor = 'demo-agent', id = 'order-1') => ({ action_type: 'demo.echo', actor_id: actor, context: { environment: 'dev', target: { type: 'demo', id } } });
const wire = (amount: number) => ({ action_type: 'payments.wire', actor_id: 'finance-bot', context: { environment: 'production', amount_usd: amount, account_code: 'OPS-001' } });
const tool = (id: string) => ({ action_type: 'agent.tool.invoke', actor_id: 'support-agent', context: { environment: 'production', target: { type: 'tool', id } } });

async function post(authority: TestAuthority, url: string, body: unknown, token = authority.acmeAdmin) {
  return authority.app.inject({ method: 'POST', url, headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' }, payload: JSON.stringify(body) });
}
const evaluate = async (authority: TestAuthority, body: unknown, url = '/v1/evaluate') => {
  const response = await post(authority, url, body);
  if (response.statusCode !== 200) throw new Error(`evaluate answered ${response.statusCode}: ${response.body}`);
  return EvaluateResponse.parse(response.json());
};
const verify = async (authority: TestAuthority, body: unknown) => VerifyPermitResponse.parse((await post(authority, '/v1-verify-permit', body)).json());
const auditTypes = async (authority: TestAuthority) => {
  const response = await authority.app.inject({ method: 'GET', url: '/v1/audit/events?limit=500', headers: authority.bearer(authority.acmeAdmin) });
  return (response.json().events as Array<{ type: string; resource_id: string | null; sequence: number }>);
};

for (const backend of appBackends()) {
  t.test(`the smoke contract of the example policy on ${backend.name}`, (t) =>
    withTestAuthority(t, backend, async (authority) => {
      const allowed = await evaluate(authority, demo());
      t.equal(allowed.decision, 'allow');
      t.same(allowed.authorization_state, { permit_requirement: 'required', permit_status: 'present', verification_status: 'not_verified' });
      t.ok(allowed.permit_token, 'a permit comes with the allow');
      t.equal(allowed.mode, 'live');
      t.equal(allowed.human_approval_required, false);
      t.equal(allowed.human_approval_status, 'not_required');
      t.equal(allowed.permit_expires_at, allowed.expires_at);
      t.type(allowed.risk_score, 'number');

      const stranger = await evaluate(authority, demo('unknown-bot'));
      t.equal(stranger.decision, 'deny');
      t.same(stranger.decisionObject.reason_codes, ['ACTOR_NOT_AUTHORIZED']);
      t.notOk(stranger.permit_token);
      t.equal(stranger.authorization_state.permit_status, 'not_issued');
      t.ok(stranger.remediation?.length, 'a deny carries remediation hints');

      t.equal((await evaluate(authority, wire(500))).decision, 'allow');
      const held = await evaluate(authority, wire(50_000));
      t.equal(held.decision, 'hold');
      t.equal(held.human_approval_required, true);
      t.equal(held.human_approval_status, 'pending');
      t.notOk(held.permit_token);
      const escalated = await evaluate(authority, wire(2_000_000));
      t.equal(escalated.decision, 'escalate');
      t.equal(escalated.human_approval_required, true);

      t.equal((await evaluate(authority, tool('send_email'))).decision, 'allow');
      t.equal((await evaluate(authority, tool('drop_database'))).decision, 'deny');
    }),
  );

  t.test(`paths, forms, shadow, explain and idempotency on ${backend.name}`, (t) =>
    withTestAuthority(t, backend, async (authority) => {
      for (const url of ['/v1/evaluate', '/v1-evaluate', '/functions/v1/v1-evaluate']) {
        t.equal((await evaluate(authority, demo(), url)).decision, 'allow', url);
      }
      const agentForm = await evaluate(authority, {
        actor: { id: 'support-agent', type: 'agent' },
        action: { type: 'agent.tool.invoke' },
        target: { type: 'tool', id: 'send_email', environment: 'production' },
      });
      t.equal(agentForm.decision, 'allow', 'the agent helper form maps to the wire form');

      const shadow = await evaluate(authority, { ...demo(), shadow: true });
      t.equal(shadow.decision, 'allow');
      t.equal(shadow.mode, 'shadow');
      t.notOk(shadow.permit_token, 'shadow issues no permit');

      const explained = await evaluate(authority, { ...wire(50_000), explain: true });
      t.ok(Array.isArray(explained.decisionObject.explanation) && explained.decisionObject.explanation.length > 0, 'explain returns the rule trace');
      t.notOk((await evaluate(authority, wire(50_000))).decisionObject.explanation, 'no trace unless asked');

      const first = await evaluate(authority, { ...demo(), request_id: 'order-7-attempt' });
      const again = await evaluate(authority, { ...demo(), request_id: 'order-7-attempt' });
      t.equal(again.permit_id, first.permit_id, 'a repeated request_id returns the original decision and permit');
      t.equal(again.evaluation_id, first.evaluation_id);
      const conflict = await post(authority, '/v1/evaluate', { ...demo('demo-agent', 'other'), request_id: 'order-7-attempt' });
      t.equal(conflict.statusCode, 409, 'the same request_id with other facts is a conflict');
      t.equal(ErrorEnvelope.parse(conflict.json()).error, 'conflict');

      const presented = await evaluate(authority, { ...wire(50_000), context: { ...wire(50_000).context, approvals: ['apr_unknown'] } });
      t.same(presented.decisionObject.approvals, [{ id: 'apr_unknown', accepted: false, reason: 'APPROVAL_NOT_FOUND' }]);
      t.equal(presented.decision, 'deny', 'an unknown approval for an action that needs one is a deny, not a new request');
      t.notOk(presented.approval_request_id);

      for (const bad of [{}, { action_type: 'Bad Type', actor_id: 'x' }, { action_type: 'demo.echo' }, { action_type: 'demo.echo', actor_id: 'a', context: { amount_usd: -1 } }]) {
        const response = await post(authority, '/v1/evaluate', bad);
        t.equal(response.statusCode, 400, JSON.stringify(bad));
        t.ok(ErrorEnvelope.parse(response.json()).details?.length);
      }
    }),
  );

  t.test(`permits: verify, replay, revoke, effects and proof on ${backend.name}`, (t) =>
    withTestAuthority(t, backend, async (authority) => {
      const jwks = (await authority.app.inject({ method: 'GET', url: '/v1/permit-keys', headers: authority.bearer(authority.acmeAdmin) })).json();
      t.equal(jwks.keys.length, 1, 'one published permit key');

      const decision = await evaluate(authority, demo());
      const offline = await verifyPermit({
        token: decision.permit_token,
        keys: staticKeyResolver(jwks),
        issuer: 'countersign',
        audience: 'countersign:gate',
        orgId: authority.acme.id,
        nowMs: authority.clock.now(),
        binding: { kind: 'partial' },
        store: authority.backend.openPeerStore(),
        record: undefined,
      } as never);
      t.equal(offline.valid, true, 'the permit verifies against the published JWKS');

      const fresh = await evaluate(authority, demo('demo-agent', 'order-9'));
      const freshClaims = JSON.parse(Buffer.from(fresh.permit_token!.split('.')[1]!, 'base64url').toString('utf8')) as { bnd: string };
      t.equal(freshClaims.bnd, fresh.decisionObject.binding_hash, "the permit's binding is the evaluation's binding_hash");
      const mismatch = await verify(authority, { permit_token: fresh.permit_token, ...demo('demo-agent', 'order-10') });
      t.match(mismatch, { valid: false, verify_error_code: 'BINDING_MISMATCH', consumed: false });
      const ok = await verify(authority, { permit_token: fresh.permit_token, ...demo('demo-agent', 'order-9') });
      t.match(ok, { valid: true, outcome: 'allow', verification_status: 'verified', consumed: true, binding: 'full', permit_id: fresh.permit_id });
      const replay = await verify(authority, { permit_token: fresh.permit_token, ...demo('demo-agent', 'order-9') });
      t.match(replay, { valid: false, verify_error_code: 'PERMIT_ALREADY_USED' });
      const partial = await verify(authority, { permit_token: (await evaluate(authority, demo())).permit_token, action_type: 'demo.echo', actor_id: '' });
      t.match(partial, { valid: true, binding: 'partial' }, 'empty strings mean not given');
      t.match(await verify(authority, { permit_token: '', action_type: '', actor_id: '' }), { valid: false, verify_error_code: 'MISSING_PERMIT' });

      const consumed = await authority.app.inject({ method: 'GET', url: `/v1/permits/${fresh.permit_id}`, headers: authority.bearer(authority.acmeAdmin) });
      t.equal(consumed.json().permit.status, 'consumed');

      const toRevoke = await evaluate(authority, demo('demo-agent', 'order-11'));
      const revoked = await post(authority, `/v1/permits/${toRevoke.permit_id}/revoke`, { reason: 'operator saw fraud' });
      t.equal(revoked.statusCode, 200);
      t.equal(revoked.json().permit.status, 'revoked');
      t.match(await verify(authority, { permit_token: toRevoke.permit_token, ...demo('demo-agent', 'order-11') }), { valid: false, verify_error_code: 'PERMIT_REVOKED' }, 'revocation reaches the gate through the shared store');
      t.equal((await post(authority, `/v1/permits/${fresh.permit_id}/revoke`, {})).statusCode, 409, 'a consumed permit cannot be revoked');
      t.equal((await post(authority, `/v1/permits/${toRevoke.permit_id}/revoke`, {}, authority.globexAdmin)).statusCode, 404, "another organization's permit is not found");
      const bodiless = await evaluate(authority, demo('demo-agent', 'order-12'));
      const revokedWithoutBody = await authority.app.inject({
        method: 'POST',
        url: `/v1/permits/${bodiless.permit_id}/revoke`,
        headers: { ...authority.bearer(authority.acmeAdmin), 'content-type': 'application/json' },
      });
      t.equal(revokedWithoutBody.statusCode, 200, 'a revoke with no body at all is a revoke without a reason, not a 400');
      t.equal(revokedWithoutBody.json().permit.status, 'revoked');

      const effect = await post(authority, '/v1/effects', { permit_id: fresh.permit_id, status: 'succeeded', summary: 'echoed' });
      t.equal(effect.statusCode, 201);
      const proof = await authority.app.inject({ method: 'GET', url: `/v1/permits/${fresh.permit_id}/proof`, headers: authority.bearer(authority.acmeAdmin) });
      t.equal(proof.statusCode, 200);
      t.same(
        proof.json().events.map((event: { type: string }) => event.type),
        ['evaluation.decided', 'permit.issued', 'permit.rejected', 'permit.verified', 'permit.rejected', 'effect.reported'],
        'the proof holds the permit chain in order, with every verification',
      );

      const expiring = await evaluate(authority, demo('demo-agent', 'order-12'));
      authority.clock.advance(2 * 60_000);
      t.match(await verify(authority, { permit_token: expiring.permit_token, ...demo('demo-agent', 'order-12') }), { valid: false, verify_error_code: 'PERMIT_EXPIRED' });
      const listed = await authority.app.inject({ method: 'GET', url: '/v1/permits?status=expired', headers: authority.bearer(authority.acmeAdmin) });
      t.ok(listed.json().permits.some((permit: { id: string }) => permit.id === expiring.permit_id), 'an unused permit past its expiry is listed as expired');
    }),
  );

  t.test(`the audit chain records evaluations in order on ${backend.name}`, (t) =>
    withTestAuthority(t, backend, async (authority) => {
      const before = (await auditTypes(authority)).length;
      const results = await Promise.all(Array.from({ length: 50 }, (_, i) => evaluate(authority, demo('demo-agent', `concurrent-${i}`))));
      t.equal(results.filter((r) => r.decision === 'allow').length, 50);
      const events = await auditTypes(authority);
      t.equal(events.length, before + 100, 'each allow wrote evaluation.decided and permit.issued');
      t.same(events.map((event) => event.sequence), events.map((_, i) => i + 1), 'the sequence is gap-free');
      const bundle = (await post(authority, '/v1/audit/exports', {})).json();
      const { verifyAuditBundle } = await import('../../authority/audit/verify-bundle.js');
      const keys = (await authority.app.inject({ method: 'GET', url: '/v1/audit/keys', headers: authority.bearer(authority.acmeAdmin) })).json().keys;
      const report = verifyAuditBundle(bundle, keys[0].public_key_pem);
      t.same(report.problems, [], 'the chain verifies');
    }),
  );

  t.test(`a failing audit append fails the evaluation and leaves no permit on ${backend.name}`, (t) =>
    withTestAuthority(t, backend, async (authority) => {
      const { db } = authority.backend;
      await db.exec(`
        CREATE FUNCTION countersign_test_fail_audit() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN RAISE EXCEPTION 'audit storage is failing (test)'; END $$;
        CREATE TRIGGER countersign_test_fail_audit BEFORE INSERT ON audit_events
          FOR EACH ROW WHEN (NEW.org_id = '${authority.acme.id}') EXECUTE FUNCTION countersign_test_fail_audit();
      `);
      const response = await post(authority, '/v1/evaluate', { ...demo(), request_id: 'doomed' });
      t.equal(response.statusCode, 503);
      t.equal(ErrorEnvelope.parse(response.json()).error, 'audit_unavailable');
      const evaluations = await db.query('SELECT 1 FROM evaluations WHERE org_id = $1', [authority.acme.id]);
      const permits = await db.query('SELECT 1 FROM permits WHERE org_id = $1', [authority.acme.id]);
      t.equal(evaluations.length, 0, 'no evaluation was stored');
      t.equal(permits.length, 0, 'no permit was stored');
      t.match(await authority.metrics.registry.metrics(), /countersign_audit_append_failures_total\{operation="evaluate"\} 1/);
      t.equal((await evaluate(authority, { ...demo(), request_id: 'doomed' }).catch(() => null)), null, 'the same request still fails while the audit fails');
      await db.exec('DROP TRIGGER countersign_test_fail_audit ON audit_events');
      t.equal((await evaluate(authority, { ...demo(), request_id: 'doomed' })).decision, 'allow', 'and succeeds once it recovers');
    }),
  );

  t.test(`policies: read, validate with positions, put a new version on ${backend.name}`, (t) =>
    withTestAuthority(t, backend, async (authority) => {
      const current = await authority.app.inject({ method: 'GET', url: '/v1/policies', headers: authority.bearer(authority.acmeAdmin) });
      t.equal(current.statusCode, 200);
      t.equal(current.json().policy.version, 1);
      const invalid = await post(authority, '/v1/policies/validate', { source: 'version: 1\naction_classes:\n  - id: x\n    match: { action_type: demo.echo }\n    rules:\n      - id: r\n        when: "context.amount_usd >"\n        decision: allow\n        reason: R\n', format: 'yaml' });
      t.equal(invalid.statusCode, 200);
      t.equal(invalid.json().valid, false);
      t.ok(invalid.json().errors.some((error: { line: number | null }) => error.line === 7), 'the CEL error points at its line');
      const rejected = await authority.app.inject({ method: 'PUT', url: '/v1/policies', headers: { ...authority.bearer(authority.acmeAdmin), 'content-type': 'application/json' }, payload: { source: 'action_classes: 7', format: 'yaml' } });
      t.equal(rejected.statusCode, 400);
      const denyAll = { document: { version: 1, action_classes: [{ id: 'demo', match: { action_type: 'demo.echo' }, actors: ['*'], default: 'deny' }] } };
      const put = await authority.app.inject({ method: 'PUT', url: '/v1/policies', headers: { ...authority.bearer(authority.acmeAdmin), 'content-type': 'application/json' }, payload: denyAll });
      t.equal(put.statusCode, 200, put.body);
      t.equal(put.json().policy.version, 2);
      t.equal((await evaluate(authority, demo())).decision, 'deny', 'the new version applies at once');
      t.ok((await auditTypes(authority)).some((event) => event.type === 'policy.updated'));
      const version = (n: number) => authority.app.inject({ method: 'GET', url: `/v1/policies/versions/${n}`, headers: authority.bearer(authority.acmeAdmin) });
      const first = await version(1);
      t.equal(first.statusCode, 200);
      t.match(first.json().policy, { version: 1, source: current.json().policy.source }, 'an older version keeps its source, for a diff');
      t.match((await version(2)).json().policy, { version: 2 }, 'and the current one is there too');
      t.equal((await version(3)).statusCode, 404, 'a version that does not exist is a 404');
    }),
  );

  t.test(`signing-key rotation: published first, signs later, old permits keep verifying on ${backend.name}`, (t) =>
    withTestAuthority(t, backend, async (authority) => {
      const before = await evaluate(authority, demo('demo-agent', 'rot-1'));
      const rotated = await authority.keys.rotate('permit');
      const jwks = (await authority.app.inject({ method: 'GET', url: '/v1/permit-keys', headers: authority.bearer(authority.acmeAdmin) })).json();
      t.equal(jwks.keys.length, 2, 'the new key is published at once');
      const stillOld = await evaluate(authority, demo('demo-agent', 'rot-2'));
      const header = (token: string) => JSON.parse(Buffer.from(token.split('.')[0]!, 'base64url').toString());
      t.not(header(stillOld.permit_token!).kid, rotated.kid, 'but does not sign before its time');
      authority.clock.advance(121_000);
      const after = await evaluate(authority, demo('demo-agent', 'rot-3'));
      t.equal(header(after.permit_token!).kid, rotated.kid, 'then signs');
      t.match(await verify(authority, { permit_token: after.permit_token, ...demo('demo-agent', 'rot-3') }), { valid: true });
      t.ok(before.permit_token);
      authority.clock.advance(10 * 60_000);
      const later = (await authority.app.inject({ method: 'GET', url: '/v1/permit-keys', headers: authority.bearer(authority.acmeAdmin) })).json();
      t.same(later.keys.map((key: { kid: string }) => key.kid), [rotated.kid], 'the old key is withdrawn once its permits have expired');
    }),
  );
}

t.test('a revocation the gates cannot learn of does not happen: 503, the permit stays issued', async (t) => {
  const opened = await appBackends()[0]!.open();
  // Every store operation works except the revocation entry.
  const store = new Proxy(opened.store, {
    get: (target, property) =>
      property === 'revoke' ? () => Promise.reject(new Error('store down (test)')) : Reflect.get(target, property, target).bind(target),
  });
  const authority = await createTestAuthority(opened, { config: GENEROUS_LIMITS, store });
  t.teardown(async () => {
    await authority.close();
    await opened.cleanup();
  });
  const decision = await evaluate(authority, demo());
  const response = await post(authority, `/v1/permits/${decision.permit_id}/revoke`, { reason: 'x' });
  t.equal(response.statusCode, 503);
  t.equal(ErrorEnvelope.parse(response.json()).error, 'service_unavailable');
  const permit = await authority.app.inject({ method: 'GET', url: `/v1/permits/${decision.permit_id}`, headers: authority.bearer(authority.acmeAdmin) });
  t.equal(permit.json().permit.status, 'issued');
  t.notOk((await auditTypes(authority)).some((event) => event.type === 'permit.revoked'), 'and no revocation was recorded');
});

const missing = realServersMissing();
if (missing) t.comment(`the Postgres + Redis variant did not run: ${missing}`);
