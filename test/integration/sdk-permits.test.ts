/**
 * The SDK's permit calls over real loopback HTTP, sent exactly as the SDKs build them
 * (test/helpers/sdk-requests.ts): the permit token where a permit id goes (get, revoke, proof,
 * verify by id), verified before its `jti` is used; verify by id, which verifies and consumes like
 * verify-permit and never calls a bare id valid; and the path-length bound that admits a token on
 * the permit routes only. Every answer is checked against the OpenAPI document. Runs on PGlite +
 * the in-process store, and on Postgres + Redis when they are available.
 */
import t from 'tap';
import { AuditEventsResponse } from '../../shared/wire/audit.js';
import { ErrorEnvelope } from '../../shared/wire/envelope.js';
import { EvaluateResponse } from '../../shared/wire/evaluate.js';
import { PermitResponse, VerifyPermitByIdResponse, VerifyPermitResponse } from '../../shared/wire/permits.js';
import { withTestAuthority, type TestAuthority } from '../helpers/authority.js';
import { appBackends } from '../helpers/backends.js';
import { SDK, sdkLoopback, type SdkReply } from '../helpers/sdk-requests.js';

const demo = (id: string) => ({ environment: 'dev', target: { type: 'demo', id } });

/** An allowed evaluation's permit, through the SDK's evaluate. */
async function permitFor(send: (request: ReturnType<typeof SDK.ts.evaluate>, key?: string) => Promise<SdkReply>, id: string, key?: string) {
  const reply = await send(SDK.ts.evaluate('demo.echo', 'demo-agent', demo(id)), key);
  const answer = EvaluateResponse.parse(reply.body);
  if (!answer.permit_token || !answer.permit_id) throw new Error(`no permit: ${reply.text}`);
  return { token: answer.permit_token, id: answer.permit_id };
}

/** The same token with its `jti` swapped: the signature no longer covers the payload. */
function forged(token: string, jti: string): string {
  const [header, payload, signature] = token.split('.') as [string, string, string];
  const claims = JSON.parse(Buffer.from(payload, 'base64url').toString('utf8'));
  return [header, Buffer.from(JSON.stringify({ ...claims, jti })).toString('base64url'), signature].join('.');
}

async function rejectedFor(authority: TestAuthority, permitId: string) {
  const response = await authority.app.inject({ method: 'GET', url: `/v1/audit/events?type=permit.rejected&resource_id=${permitId}`, headers: authority.bearer(authority.acmeAdmin) });
  return AuditEventsResponse.parse(response.json()).events;
}

for (const backend of appBackends()) {
  t.test(`a permit token where a permit id goes, on ${backend.name}`, (t) =>
    withTestAuthority(t, backend, async (authority) => {
      const { send, problems } = await sdkLoopback(authority);
      const first = await permitFor(send, 'order-1');

      for (const ref of [first.token, first.id]) {
        const reply = await send(SDK.ts.getPermit(ref));
        t.equal(reply.status, 200, `get by ${ref === first.id ? 'id' : 'token'}`);
        t.equal(PermitResponse.parse(reply.body).permit.id, first.id);
      }
      const proof = await send({ method: 'GET', path: `/v1/permits/${first.token}/proof` });
      t.equal(proof.status, 200, 'the proof by token');
      t.equal(proof.body.permit.id, first.id);

      const second = await permitFor(send, 'order-2');
      const tampered = await send(SDK.ts.getPermit(forged(first.token, second.id)));
      t.equal(tampered.status, 400, "a token whose signature does not cover its jti names no permit");
      t.match(ErrorEnvelope.parse(tampered.body), { error: 'invalid_request', message: /signature is invalid/ });
      const revokeForged = await send(SDK.ts.revokePermitById(forged(first.token, second.id), 'forged'));
      t.equal(revokeForged.status, 400, 'nor can it revoke one');
      t.equal(PermitResponse.parse((await send(SDK.ts.getPermit(second.id))).body).permit.status, 'issued', 'the other permit is untouched');

      const foreign = await permitFor(send, 'order-3', authority.globexAdmin);
      const across = await send(SDK.ts.getPermit(foreign.token));
      t.equal(across.status, 404, "another organization's token is not found, as its id is");
      t.equal(ErrorEnvelope.parse(across.body).error, 'not_found');

      const revoked = await send(SDK.ts.revokePermitById(second.token, 'no longer needed'));
      t.equal(revoked.status, 200, 'revoke by token');
      t.match(PermitResponse.parse(revoked.body).permit, { id: second.id, status: 'revoked', revocation_reason: 'no longer needed' });
      const verdict = VerifyPermitResponse.parse((await send(SDK.ts.verifyPermit(second.token))).body);
      t.match(verdict, { valid: false, verify_error_code: 'PERMIT_REVOKED' }, 'gates refuse it');
      t.same(problems, [], 'every answer is one the OpenAPI document describes');
    }),
  );

  t.test(`verify by id: the token verifies and is consumed, an id alone never verifies, on ${backend.name}`, (t) =>
    withTestAuthority(t, backend, async (authority) => {
      const { send, problems } = await sdkLoopback(authority);

      for (const [name, call] of [['TypeScript', SDK.ts.verifyPermitById], ['Python', SDK.py.verifyPermitById]] as const) {
        const permit = await permitFor(send, `by-token-${name}`);
        const first = await send(call(permit.token));
        t.equal(first.status, 200, name);
        const verdict = VerifyPermitByIdResponse.parse(first.body);
        t.match(verdict, { valid: true, consumed: true, verification_type: 'permit', permit_id: permit.id }, `${name}: the token in the path verifies`);
        t.match(verdict.evidence, { permit_id: permit.id, status: 'consumed', actor_id: 'demo-agent', action_type: 'demo.echo' });
        t.equal(verdict.permit?.status, 'consumed', 'the record after the verification');
        const again = VerifyPermitByIdResponse.parse((await send(call(permit.token))).body);
        t.match(again, { valid: false, verify_error_code: 'PERMIT_ALREADY_USED' }, `${name}: single use, as on verify-permit`);
      }

      const bare = await permitFor(send, 'bare-id');
      const byId = VerifyPermitByIdResponse.parse((await send(SDK.ts.verifyPermitById(bare.id))).body);
      t.match(byId, { valid: false, verify_error_code: 'MISSING_PERMIT', consumed: false }, 'an id alone proves nothing');
      t.match(byId.evidence, { permit_id: bare.id, status: 'issued' }, 'and reports the permit as it stands');
      t.equal((await rejectedFor(authority, bare.id)).length, 1, 'the refusal is recorded against the permit');

      const other = await permitFor(send, 'other');
      const mismatched = await send({ method: 'POST', path: `/v1/permits/${bare.id}/verify`, body: { permit_token: other.token } });
      t.match(VerifyPermitByIdResponse.parse(mismatched.body), { valid: false, verify_error_code: 'PERMIT_NOT_FOUND' }, 'a token for another permit');
      t.equal(PermitResponse.parse((await send(SDK.ts.getPermit(other.id))).body).permit.status, 'issued', 'which is not consumed');

      const withBody = await send({ method: 'POST', path: `/v1/permits/${bare.id}/verify`, body: { permit_token: bare.token, action_type: 'demo.echo', actor_id: 'demo-agent' } });
      t.match(VerifyPermitByIdResponse.parse(withBody.body), { valid: true, binding: 'partial' }, 'the id with its token in the body');

      const wrongBinding = await permitFor(send, 'binding');
      const refused = await send({ method: 'POST', path: `/v1/permits/${wrongBinding.token}/verify`, body: { actor_id: 'someone-else' } });
      t.match(VerifyPermitByIdResponse.parse(refused.body), { valid: false, verify_error_code: 'ACTOR_MISMATCH' }, 'the binding is checked as on verify-permit');

      const twoPermits = await send({ method: 'POST', path: `/v1/permits/${wrongBinding.token}/verify`, body: { permit_token: other.token } });
      t.equal(twoPermits.status, 400, 'a path and a body naming two permits');

      const noScope = await authority.key(['permits:read']);
      t.equal((await send(SDK.ts.verifyPermitById(other.token), noScope)).status, 403, 'verify:execute is required');
      t.same(problems, [], 'every answer is one the OpenAPI document describes');
    }),
  );

  t.test(`the deprecated revoke-permit, as both SDKs send it, on ${backend.name}`, (t) =>
    withTestAuthority(t, backend, async (authority) => {
      const { send, problems } = await sdkLoopback(authority);
      const key = authority.acmeAdmin;
      const byToken = await permitFor(send, 'legacy-token');
      const byId = await permitFor(send, 'legacy-id');

      const tsReply = await send(SDK.ts.revokePermit(byToken.token, key, 'cancelled'));
      t.equal(tsReply.status, 200, 'TypeScript: the token in decision_id');
      t.equal(tsReply.headers.get('deprecation'), 'true');
      t.match(tsReply.body, { revoked: true, decision_id: byToken.id, permit: { status: 'revoked', revocation_reason: 'cancelled' } });
      const pyReply = await send(SDK.py.revokePermit(byId.id, key));
      t.equal(pyReply.status, 200, 'Python: the id in decision_id, no reason');
      t.match(pyReply.body, { revoked: true, decision_id: byId.id, permit: { status: 'revoked', revocation_reason: null } });
      for (const permit of [byToken, byId]) {
        t.match(VerifyPermitResponse.parse((await send(SDK.ts.verifyPermit(permit.token))).body), { valid: false, verify_error_code: 'PERMIT_REVOKED' }, 'gates refuse it');
      }
      t.notOk(authority.logs.join('').includes(key), 'the API key the SDK puts in the body is never logged');

      const again = await send(SDK.ts.revokePermit(byToken.token, key));
      t.equal(again.status, 200, 'revoking a revoked permit answers it again, as on the slash path');
      const missing = await send(SDK.ts.revokePermit('AAAAAAAAAAAAAAAAAAAAAA', key));
      t.equal(missing.status, 404);
      t.equal(missing.headers.get('deprecation'), 'true', 'a refusal says it is deprecated too');
      const none = await send({ method: 'POST', path: '/v1-revoke-permit', body: { reason: 'which one?' } });
      t.equal(none.status, 400, 'no permit named');
      const readOnly = await authority.key(['permits:read']);
      t.equal((await send(SDK.ts.revokePermit(byId.id, readOnly), readOnly)).status, 403, 'permits:write is required');
      const functions = await send({ ...SDK.ts.revokePermit(byId.id, key), path: '/functions/v1/v1-revoke-permit' });
      t.equal(functions.status, 200, 'the hosted runtime path');
      t.match(await authority.metrics.registry.metrics(), /countersign_deprecated_operation_total\{operation="revoke-permit"\} 7/, 'each request is counted');
      t.same(problems, [], 'every answer is one the OpenAPI document describes');
    }),
  );
}

t.test('a permit route takes a path segment up to a permit token, and no longer', async (t) => {
  const backend = appBackends()[0]!;
  await withTestAuthority(t, backend, async (authority) => {
    const headers = authority.bearer(authority.acmeAdmin);
    const cases = [
      ['GET', `/v1/permits/${'a'.repeat(65)}`, 400, /does not match the schema/],
      ['GET', `/v1/permits/${'a.b.c'.repeat(3300)}`, 400, /longer than 16384 characters/],
    ] as const;
    for (const [method, url, status, message] of cases) {
      const response = await authority.app.inject({ method, url, headers });
      t.equal(response.statusCode, status, `${method} ${url.slice(0, 30)}…`);
      t.match(ErrorEnvelope.parse(response.json()).message, message);
    }
  });
});
