/**
 * Identities and duties: keys never widen (scopes, allowlist, expiry; revoking a
 * wider key), a key's owner is inherited by the keys it mints, and separation of duties counts
 * people: the requester of a held or escalated action cannot approve or vote on it through any of
 * its keys, and one owner's keys are one vote. Each rule: the refusal with its message, and the
 * allowed case, over real HTTP handling (app.inject) on every backend.
 */
import t from 'tap';
import type { Scope } from '../../shared/wire/scopes.js';
import { type TestAuthority, withTestAuthority } from '../helpers/authority.js';
import { appBackends } from '../helpers/backends.js';

const wire = (amount: number) => ({
  action_type: 'payments.wire',
  actor_id: 'finance-bot',
  context: { environment: 'production', amount_usd: amount, account_code: 'OPS-001' },
});

function post(authority: TestAuthority, url: string, body: unknown, token: string) {
  return authority.app.inject({ method: 'POST', url, headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' }, payload: JSON.stringify(body) });
}

async function keyId(authority: TestAuthority, token: string): Promise<string> {
  return (await authority.app.inject({ method: 'GET', url: '/v1-api-key-self', headers: authority.bearer(token) })).json().key_id as string;
}

/** A key minted through the API by `token`; throws unless it was created. */
async function mint(authority: TestAuthority, token: string, body: { scopes: Scope[]; allowed_cidrs?: string[]; expires_at?: string }) {
  const response = await post(authority, '/v1/api-keys', { name: 'minted', ...body }, token);
  if (response.statusCode !== 201) throw new Error(`create answered ${response.statusCode}: ${response.body}`);
  return response.json() as { api_key: { id: string; owner: string; allowed_cidrs: string[] | null; expires_at: string | null; scopes: string[] }; secret: string };
}

const user = (authority: TestAuthority, sub: string, role: string) => authority.idp.sign({ sub, org_id: authority.acme.id, role });

for (const backend of appBackends()) {
  t.test(`keys never widen, on ${backend.name}`, (t) =>
    withTestAuthority(t, backend, async (authority) => {
      const hour = 3_600_000;
      const parentExpiry = new Date(authority.clock.now() + hour);
      const parent = await authority.key(['keys:write', 'audit:read'], { allowedCidrs: ['127.0.0.0/8'], expiresAt: parentExpiry });
      const parentId = await keyId(authority, parent);

      const scopes = await post(authority, '/v1/api-keys', { name: 'wider', scopes: ['evaluate:write'] }, parent);
      t.equal(scopes.statusCode, 403, 'a scope the creator lacks is refused');
      t.match(scopes.json(), { error: 'forbidden', message: /scopes its creator holds; missing: evaluate:write/ });

      const inherited = await mint(authority, parent, { scopes: ['audit:read'] });
      t.same(inherited.api_key.allowed_cidrs, ['127.0.0.0/8'], 'a child given no allowlist inherits its creator’s');
      t.equal(inherited.api_key.expires_at, parentExpiry.toISOString(), 'a child given no expiry inherits its creator’s');
      t.equal(inherited.api_key.owner, `api_key:${parentId}`, 'a child of a root key is owned by that root');

      const narrower = await mint(authority, parent, { scopes: ['audit:read'], allowed_cidrs: ['127.0.0.1/32'], expires_at: new Date(authority.clock.now() + hour / 2).toISOString() });
      t.same(narrower.api_key.allowed_cidrs, ['127.0.0.1/32'], 'a narrower allowlist is accepted');

      for (const cidrs of [['10.0.0.0/8'], ['127.0.0.0/7'], ['127.0.0.1', '10.1.2.3'], ['::1']]) {
        const refused = await post(authority, '/v1/api-keys', { name: 'wider', scopes: ['audit:read'], allowed_cidrs: cidrs }, parent);
        t.equal(refused.statusCode, 403, `allowlist ${cidrs.join(', ')} is not within 127.0.0.0/8`);
        t.match(refused.json(), { error: 'forbidden', message: /within its creator's allowlist \(127\.0\.0\.0\/8\); outside it: / });
      }
      const later = await post(authority, '/v1/api-keys', { name: 'later', scopes: ['audit:read'], expires_at: new Date(authority.clock.now() + 2 * hour).toISOString() }, parent);
      t.equal(later.statusCode, 403, 'an expiry later than the creator’s is refused');
      t.match(later.json(), { error: 'forbidden', message: /cannot outlive its creator: expires_at must be no later than / });
      for (const [what, expiresAt] of [['already past', authority.clock.now() - hour], ['exactly now', authority.clock.now()]] as const) {
        const past = await post(authority, '/v1/api-keys', { name: 'past', scopes: ['audit:read'], expires_at: new Date(expiresAt).toISOString() }, authority.acmeAdmin);
        t.equal(past.statusCode, 400, `an expiry ${what} is refused`);
        t.match(past.json(), { error: 'invalid_request', status: 400, request_id: String, message: 'expires_at must be in the future', details: [{ path: 'expires_at', message: 'must be in the future' }] });
      }

      // A grandchild keeps the root owner, and the limits it inherited.
      const child = await mint(authority, parent, { scopes: ['keys:write', 'audit:read'] });
      const grandchild = await mint(authority, child.secret, { scopes: ['audit:read'] });
      t.equal(grandchild.api_key.owner, `api_key:${parentId}`, 'keys minted by keys lead back to one root');
      t.same(grandchild.api_key.allowed_cidrs, ['127.0.0.0/8']);

      // The admin key and an admin user are unrestricted, as before; a user owns what it mints.
      const free = await mint(authority, authority.acmeAdmin, { scopes: ['audit:read'], allowed_cidrs: ['10.0.0.0/8'] });
      t.equal(free.api_key.expires_at, null);
      const admin = await user(authority, 'alice', 'admin');
      const byUser = await mint(authority, admin, { scopes: ['audit:read'], expires_at: new Date(authority.clock.now() + 100 * hour).toISOString() });
      t.equal(byUser.api_key.owner, 'user:alice', 'a key a user creates is owned by that user');
    }),
  );

  t.test(`a key cannot revoke a key holding scopes it lacks, on ${backend.name}`, (t) =>
    withTestAuthority(t, backend, async (authority) => {
      const narrow = await authority.key(['keys:write', 'audit:read']);
      const adminId = await keyId(authority, authority.acmeAdmin);
      const refused = await post(authority, `/v1/api-keys/${adminId}/revoke`, {}, narrow);
      t.equal(refused.statusCode, 403, 'keys:write alone cannot revoke the admin key');
      t.match(refused.json(), { error: 'forbidden', message: /holding scopes this credential lacks cannot be revoked by it; missing: / });
      t.equal((await authority.app.inject({ method: 'GET', url: '/v1/api-keys', headers: authority.bearer(authority.acmeAdmin) })).statusCode, 200, 'the admin key still works');

      const reader = await keyId(authority, await authority.key(['audit:read']));
      const revoked = await post(authority, `/v1/api-keys/${reader}/revoke`, {}, narrow);
      t.equal(revoked.statusCode, 200, 'a key within its own scopes can be revoked');
      t.ok(revoked.json().api_key.revoked_at);
      t.equal((await post(authority, `/v1/api-keys/${adminId}/revoke`, {}, await user(authority, 'alice', 'admin'))).statusCode, 200, 'an admin user can revoke any key');
    }),
  );

  t.test(`the requester of a held action cannot resolve it, through any of its keys, on ${backend.name}`, (t) =>
    withTestAuthority(t, backend, async (authority) => {
      const requester = await authority.key(['evaluate:write', 'keys:write', 'approvals:read', 'approvals:write']);
      const requesterId = await keyId(authority, requester);
      const sibling = (await mint(authority, requester, { scopes: ['approvals:write'] })).secret;
      const held = (await post(authority, '/v1/evaluate', wire(50_000), requester)).json();
      t.equal(held.decision, 'hold');
      const id = held.approval_request_id as string;
      const record = (await authority.app.inject({ method: 'GET', url: `/v1/approvals/${id}`, headers: authority.bearer(requester) })).json();
      t.equal(record.approval.requested_by, `api_key:${requesterId}`, 'the request records who asked, as an identity');

      for (const [name, token] of [['the requesting key', requester], ['another key of the same owner', sibling]] as const) {
        for (const decision of ['approve', 'reject']) {
          const refused = await post(authority, `/v1/approvals/${id}/resolve`, { decision }, token);
          t.equal(refused.statusCode, 403, `${name} cannot ${decision}`);
          t.match(refused.json(), { error: 'forbidden', message: new RegExp(`identity that requested this action \\(api_key:${requesterId}\\) cannot resolve`) });
        }
      }
      const approver = await authority.key(['approvals:write']);
      const approved = await post(authority, `/v1/approvals/${id}/resolve`, { decision: 'approve' }, approver);
      t.equal(approved.statusCode, 200, 'another person approves');
      t.equal(approved.json().approval.status, 'approved');
    }),
  );

  t.test(`a user who asked cannot approve with the keys they minted, on ${backend.name}`, (t) =>
    withTestAuthority(t, backend, async (authority) => {
      const alice = await user(authority, 'alice', 'admin');
      const alicesKey = (await mint(authority, alice, { scopes: ['approvals:write'] })).secret;
      const id = (await post(authority, '/v1/evaluate', wire(50_000), alice)).json().approval_request_id as string;
      for (const token of [alice, alicesKey]) {
        const refused = await post(authority, `/v1/approvals/${id}/resolve`, { decision: 'approve' }, token);
        t.equal(refused.statusCode, 403);
        t.match(refused.json().message, /identity that requested this action \(user:alice\) cannot resolve/);
      }
      t.equal((await post(authority, `/v1/approvals/${id}/resolve`, { decision: 'approve' }, await user(authority, 'bob', 'approver'))).statusCode, 200, 'bob approves');
    }),
  );

  t.test(`escalations: the creator cannot vote, and a quorum counts people, on ${backend.name}`, (t) =>
    withTestAuthority(t, backend, async (authority) => {
      // Opened by evaluate (two_thirds of 3: two approvals decide).
      const requester = await authority.key(['evaluate:write', 'keys:write', 'hitl:approve']);
      const requesterChild = (await mint(authority, requester, { scopes: ['hitl:approve'] })).secret;
      const id = (await post(authority, '/v1/evaluate', wire(2_000_000), requester)).json().escalation_id as string;
      const own = await post(authority, `/v1/escalations/${id}/respond`, { decision: 'approve' }, requesterChild);
      t.equal(own.statusCode, 403, 'a key of the requester’s owner cannot vote');
      t.match(own.json(), { error: 'forbidden', message: /requester of an escalation .* cannot vote/ });

      const approverRoot = await authority.key(['keys:write', 'hitl:approve']);
      const [first, second] = [(await mint(authority, approverRoot, { scopes: ['hitl:approve'] })).secret, (await mint(authority, approverRoot, { scopes: ['hitl:approve'] })).secret];
      const counted = await post(authority, `/v1/escalations/${id}/respond`, { decision: 'approve' }, first);
      t.equal(counted.statusCode, 200);
      t.equal(counted.json().quorumProgress.approvals, 1);
      for (const token of [second, approverRoot]) {
        const again = await post(authority, `/v1/escalations/${id}/respond`, { decision: 'approve' }, token);
        t.equal(again.statusCode, 409, 'another key of the same owner is the same voter');
        t.match(again.json(), { error: 'conflict', message: /this identity has already voted/ });
      }
      const detail = (await authority.app.inject({ method: 'GET', url: `/v1/escalations/${id}`, headers: authority.bearer(authority.acmeAdmin) })).json();
      t.equal(detail.escalation.status, 'pending', 'one person alone does not fill the quorum');
      t.equal(detail.quorumProgress.approvals, 1);
      const decided = await post(authority, `/v1/escalations/${id}/respond`, { decision: 'approve' }, await user(authority, 'bob', 'approver'));
      t.equal(decided.json().escalation.status, 'approved', 'a second person decides');

      // Created through the API: the creator's keys cannot vote either.
      const creator = await authority.key(['keys:write', 'hitl:approve']);
      const creatorChild = (await mint(authority, creator, { scopes: ['hitl:approve'] })).secret;
      const created = (await post(authority, '/v1/escalations', { agentId: 'deploy-bot', escalationReason: 'schema change' }, creator)).json();
      t.equal((await post(authority, `/v1/escalations/${created.id}/respond`, { decision: 'approve' }, creatorChild)).statusCode, 403);
      t.equal((await post(authority, `/v1/escalations/${created.id}/respond`, { decision: 'approve' }, first)).statusCode, 200, 'anyone else votes');
    }),
  );

  t.test(`idempotency is per credential, on ${backend.name}`, (t) =>
    withTestAuthority(t, backend, async (authority) => {
      const demo = { action_type: 'demo.echo', actor_id: 'demo-agent', context: { environment: 'dev', target: { type: 'demo', id: 'order-1' } } };
      const caller = await authority.key(['evaluate:write', 'keys:write']);
      const first = (await post(authority, '/v1/evaluate', { ...demo, request_id: 'order-1-attempt' }, caller)).json();
      t.equal(first.decision, 'allow');
      t.ok(first.permit_token);
      const repeat = (await post(authority, '/v1/evaluate', { ...demo, request_id: 'order-1-attempt' }, caller)).json();
      t.equal(repeat.permit_token, first.permit_token, 'the same credential repeating gets its original answer');

      const sameOwner = (await mint(authority, caller, { scopes: ['evaluate:write'] })).secret;
      for (const [name, token] of [['another key', await authority.key(['evaluate:write'])], ['another key of the same owner', sameOwner], ['a user', await user(authority, 'alice', 'member')]] as const) {
        const stolen = await post(authority, '/v1/evaluate', { ...demo, request_id: 'order-1-attempt' }, token);
        t.equal(stolen.statusCode, 409, `${name} reusing the request_id is a conflict`);
        t.match(stolen.json(), { error: 'conflict', message: /already used by another credential/ });
        t.notMatch(stolen.body, first.permit_token as string, 'and is never given the permit');
      }

      const viaHeader = (token: string) =>
        authority.app.inject({ method: 'POST', url: '/v1/evaluate', headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json', 'x-request-id': 'hdr-req-1' }, payload: JSON.stringify(demo) });
      const byHeader = (await viaHeader(caller)).json();
      t.equal((await viaHeader(caller)).json().permit_id, byHeader.permit_id, 'X-Request-ID is the idempotency key when request_id is absent');
      const other = await viaHeader(sameOwner);
      t.equal(other.statusCode, 409);
      t.notOk(other.json().permit_token);
    }),
  );
}
