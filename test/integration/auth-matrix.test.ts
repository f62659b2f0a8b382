/**
 * The authentication matrix: every endpoint that exists × every kind of credential → the exact
 * status and error code. Each credential's permissions are written out here from the documented
 * scopes and roles (docs/operations.md, "Credentials"; not taken from the code), and the test fails when the app serves a
 * route this matrix does not list. Runs on PGlite + the in-process store, and on Postgres + Redis
 * when they are available.
 */
import t from 'tap';
import { createApiKey } from '../../authority/api-keys/keys.js';
import { readBootstrapPolicy } from '../../authority/orgs/bootstrap.js';
import { ErrorEnvelope } from '../../shared/wire/envelope.js';
import { servedRoutes } from '../helpers/served-routes.js';
import { createTestAuthority, type TestAuthority } from '../helpers/authority.js';
import { appBackends, realServersMissing } from '../helpers/backends.js';
import { createTestIdp } from '../helpers/jwt.js';

// Over a thousand requests per backend, on both backends: longer than .taprc's two minutes per
// file while the other test files keep a 2-core machine busy.
t.setTimeout(5 * 60_000);

const ALL = [
  'evaluate:write', 'verify:execute', 'audit:read', 'approvals:read', 'approvals:write', 'policy:read', 'policy:write',
  'webhooks:write', 'permits:read', 'permits:write', 'effects:write', 'hitl:approve', 'keys:write',
];
/** The roles of a user's JWT (docs/operations.md, "Credentials"). */
const ROLE_PERMISSIONS: Record<string, string[]> = {
  admin: ALL,
  approver: ['evaluate:write', 'permits:read', 'permits:write', 'audit:read', 'approvals:read', 'approvals:write', 'hitl:approve'],
  member: ['evaluate:write', 'permits:read', 'verify:execute'],
  viewer: ['audit:read', 'policy:read', 'permits:read'],
};

interface Fixture {
  victimKeyId: string;
  permitId: string;
  permitToken: string;
  /** Another permit, never verified, so that revoking it is always possible (and idempotent). */
  revocablePermitId: string;
  policySource: string;
  /** Created by a credential outside the matrix (so no matrix credential is its requester), and open long enough for every vote. */
  escalationId: string;
  /** An approval request opened by a hold (for the reads). */
  approvalId: string;
  /** A fresh pending approval request on each call: a resolved one cannot be resolved again. */
  nextApprovalId(): string;
}

interface Endpoint {
  method: 'GET' | 'POST' | 'PUT';
  route: string;
  url: (f: Fixture) => string;
  body?: (f: Fixture) => unknown;
  /** null: public. [] : any valid credential. Otherwise any one of these permissions. */
  anyOf: string[] | null;
  only?: 'user' | 'api_key';
  /** Addresses an acme resource: another organization gets 404. */
  acmeResource?: boolean;
  success: number;
}

const demo = { action_type: 'demo.echo', actor_id: 'demo-agent', context: { environment: 'dev', target: { type: 'demo', id: 'matrix' } } };
/** The same action as an AuthZEN access evaluation. */
const authzenDemo = { subject: { type: 'agent', id: 'demo-agent' }, action: { name: 'demo.echo' }, resource: { type: 'demo', id: 'matrix' }, context: { environment: 'dev' } };
const ENDPOINTS: Endpoint[] = [
  { method: 'GET', route: '/healthz', url: () => '/healthz', anyOf: null, success: 200 },
  { method: 'GET', route: '/readyz', url: () => '/readyz', anyOf: null, success: 200 },
  { method: 'GET', route: '/openapi.json', url: () => '/openapi.json', anyOf: null, success: 200 },
  { method: 'GET', route: '/v1/session', url: () => '/v1/session', anyOf: [], only: 'user', success: 200 },
  ...['/v1/api-key-self', '/v1-api-key-self'].map(
    (route): Endpoint => ({ method: 'GET', route, url: () => route, anyOf: [], only: 'api_key', success: 200 }),
  ),
  { method: 'GET', route: '/v1/api-keys', url: () => '/v1/api-keys', anyOf: ['keys:write'], success: 200 },
  { method: 'POST', route: '/v1/api-keys', url: () => '/v1/api-keys', body: () => ({ name: 'matrix', scopes: ['audit:read'] }), anyOf: ['keys:write'], success: 201 },
  { method: 'POST', route: '/v1/api-keys/:id/revoke', url: (f) => `/v1/api-keys/${f.victimKeyId}/revoke`, anyOf: ['keys:write'], acmeResource: true, success: 200 },
  ...['/v1/evaluate', '/v1-evaluate', '/functions/v1/v1-evaluate'].map(
    (route): Endpoint => ({ method: 'POST', route, url: () => route, body: () => demo, anyOf: ['evaluate:write'], success: 200 }),
  ),
  // The SDK's streaming evaluate: what evaluate needs.
  ...['/v1/evaluate-stream', '/v1-evaluate-stream', '/functions/v1/v1-evaluate-stream'].map(
    (route): Endpoint => ({ method: 'POST', route, url: () => route, body: () => demo, anyOf: ['evaluate:write'], success: 200 }),
  ),
  // AuthZEN (docs/api.md): the evaluations need what evaluate needs; discovery is public, like /openapi.json.
  { method: 'POST', route: '/access/v1/evaluation', url: () => '/access/v1/evaluation', body: () => authzenDemo, anyOf: ['evaluate:write'], success: 200 },
  { method: 'POST', route: '/access/v1/evaluations', url: () => '/access/v1/evaluations', body: () => ({ ...authzenDemo, evaluations: [{}, {}] }), anyOf: ['evaluate:write'], success: 200 },
  { method: 'POST', route: '/access/v1/search/subject', url: () => '/access/v1/search/subject', body: () => authzenDemo, anyOf: ['evaluate:write'], success: 200 },
  { method: 'POST', route: '/access/v1/search/action', url: () => '/access/v1/search/action', body: () => authzenDemo, anyOf: ['evaluate:write'], success: 200 },
  { method: 'GET', route: '/.well-known/authzen-configuration', url: () => '/.well-known/authzen-configuration', anyOf: null, success: 200 },
  ...['/v1/verify-permit', '/v1-verify-permit', '/functions/v1/v1-verify-permit'].map(
    (route): Endpoint => ({ method: 'POST', route, url: () => route, body: (f) => ({ permit_token: f.permitToken, ...demo }), anyOf: ['verify:execute'], success: 200 }),
  ),
  ...['/v1/webhooks', '/v1-webhooks', '/functions/v1/v1-webhooks'].map(
    (route): Endpoint => ({ method: 'POST', route, url: () => route, body: () => ({ action: 'list' }), anyOf: ['webhooks:write'], success: 200 }),
  ),
  { method: 'GET', route: '/v1/permit-keys', url: () => '/v1/permit-keys', anyOf: ['verify:execute'], success: 200 },
  { method: 'GET', route: '/v1/permits', url: () => '/v1/permits', anyOf: ['permits:read'], success: 200 },
  { method: 'GET', route: '/v1/permits/:id', url: (f) => `/v1/permits/${f.permitId}`, anyOf: ['permits:read'], acmeResource: true, success: 200 },
  { method: 'POST', route: '/v1/permits/:id/revoke', url: (f) => `/v1/permits/${f.revocablePermitId}/revoke`, body: () => ({}), anyOf: ['permits:write'], acmeResource: true, success: 200 },
  // Verify by id, as verify-permit: a verdict for any organization's caller (a bare id is MISSING_PERMIT, nothing consumed).
  { method: 'POST', route: '/v1/permits/:id/verify', url: (f) => `/v1/permits/${f.permitId}/verify`, body: () => ({}), anyOf: ['verify:execute'], success: 200 },
  // The deprecated revoke: what the slash path needs.
  ...['/v1/revoke-permit', '/v1-revoke-permit', '/functions/v1/v1-revoke-permit'].map(
    (route): Endpoint => ({ method: 'POST', route, url: () => route, body: (f) => ({ decision_id: f.revocablePermitId }), anyOf: ['permits:write'], acmeResource: true, success: 200 }),
  ),
  { method: 'GET', route: '/v1/permits/:id/proof', url: (f) => `/v1/permits/${f.permitId}/proof`, anyOf: ['permits:read', 'audit:read'], acmeResource: true, success: 200 },
  { method: 'POST', route: '/v1/effects', url: () => '/v1/effects', body: (f) => ({ permit_id: f.permitId, status: 'succeeded' }), anyOf: ['effects:write'], acmeResource: true, success: 201 },
  { method: 'GET', route: '/v1/policies', url: () => '/v1/policies', anyOf: ['policy:read', 'policy:write'], success: 200 },
  { method: 'GET', route: '/v1/policies/versions/:version', url: () => '/v1/policies/versions/1', anyOf: ['policy:read', 'policy:write'], success: 200 },
  { method: 'PUT', route: '/v1/policies', url: () => '/v1/policies', body: (f) => ({ source: f.policySource, format: 'yaml' }), anyOf: ['policy:write'], success: 200 },
  { method: 'POST', route: '/v1/policies/validate', url: () => '/v1/policies/validate', body: (f) => ({ source: f.policySource }), anyOf: ['policy:write'], success: 200 },
  ...['/v1/audit/events', '/v1-audit/events'].map((route): Endpoint => ({ method: 'GET', route, url: () => route, anyOf: ['audit:read'], success: 200 })),
  ...['/v1/audit/exports', '/v1-audit/exports'].map((route): Endpoint => ({ method: 'POST', route, url: () => route, body: () => ({}), anyOf: ['audit:read'], success: 200 })),
  { method: 'GET', route: '/v1/audit/keys', url: () => '/v1/audit/keys', anyOf: ['audit:read'], success: 200 },
  { method: 'GET', route: '/v1/audit/status', url: () => '/v1/audit/status', anyOf: ['audit:read'], success: 200 },
  { method: 'GET', route: '/v1/gates/readiness', url: () => '/v1/gates/readiness', anyOf: ['audit:read'], success: 200 },
  // Escalations: any credential creates and reads (its own organization's); responding needs
  // hitl:approve (the roles admin and approver hold it; docs/approvals.md).
  { method: 'GET', route: '/v1/approvals', url: () => '/v1/approvals', anyOf: ['approvals:read', 'approvals:write'], success: 200 },
  { method: 'GET', route: '/v1/approvals/:id', url: (f) => `/v1/approvals/${f.approvalId}`, anyOf: ['approvals:read', 'approvals:write'], acmeResource: true, success: 200 },
  { method: 'POST', route: '/v1/approvals/:id/resolve', url: (f) => `/v1/approvals/${f.nextApprovalId()}/resolve`, body: () => ({ decision: 'approve' }), anyOf: ['approvals:write'], acmeResource: true, success: 200 },
  { method: 'POST', route: '/v1/escalations', url: () => '/v1/escalations', body: () => ({ agentId: 'matrix-agent', escalationReason: 'matrix' }), anyOf: [], success: 200 },
  { method: 'GET', route: '/v1/escalations', url: () => '/v1/escalations', anyOf: [], success: 200 },
  { method: 'GET', route: '/v1/escalations/:id', url: (f) => `/v1/escalations/${f.escalationId}`, anyOf: [], acmeResource: true, success: 200 },
  // The console's own routes (docs/console.md): its pages and session are public; signing in with a
  // key is off in this configuration (404 to any valid credential), as is the identity provider.
  { method: 'GET', route: '/console', url: () => '/console', anyOf: null, success: 308 },
  { method: 'GET', route: '/console/*', url: () => '/console/inbox', anyOf: null, success: 200 },
  { method: 'GET', route: '/console/api/session', url: () => '/console/api/session', anyOf: null, success: 200 },
  { method: 'GET', route: '/console/api/identities', url: (f) => `/console/api/identities?ids=api_key:${f.victimKeyId}`, anyOf: [], success: 200 },
  { method: 'POST', route: '/console/api/sign-in/api-key', url: () => '/console/api/sign-in/api-key', anyOf: [], success: 404 },
  { method: 'POST', route: '/console/api/sign-out', url: () => '/console/api/sign-out', anyOf: [], success: 204 },
  { method: 'GET', route: '/console/sign-in/oidc', url: () => '/console/sign-in/oidc', anyOf: null, success: 404 },
  { method: 'GET', route: '/console/sign-in/callback', url: () => '/console/sign-in/callback', anyOf: null, success: 404 },
  { method: 'POST', route: '/v1/escalations/:id/respond', url: (f) => `/v1/escalations/${f.escalationId}/respond`, body: () => ({ decision: 'approve' }), anyOf: ['hitl:approve'], acmeResource: true, success: 200 },
];

type Credential =
  | { name: string; invalid: true; headers: Record<string, string> }
  | { name: string; invalid?: false; headers: Record<string, string>; kind: 'api_key' | 'user'; org: 'acme' | 'globex'; permissions: string[]; remoteAddress?: string; outsideAllowlist?: boolean; roleless?: boolean };

function expected(credential: Credential, endpoint: Endpoint): [number, string | null] {
  if (endpoint.anyOf === null) return [endpoint.success, null];
  if (credential.invalid) return [401, 'unauthorized'];
  if (credential.outsideAllowlist) return [403, 'forbidden'];
  if (endpoint.only !== undefined && endpoint.only !== credential.kind) return [403, 'forbidden'];
  if (endpoint.only === 'user' && credential.roleless) return [403, 'forbidden'];
  if (endpoint.anyOf.length > 0 && !endpoint.anyOf.some((permission) => credential.permissions.includes(permission))) return [403, 'forbidden'];
  if (endpoint.acmeResource && credential.org !== 'acme') return [404, 'not_found'];
  return [endpoint.success, null];
}

async function credentials(authority: TestAuthority): Promise<Credential[]> {
  const { acme, idp, clock } = authority;
  const bearer = (token: string) => ({ authorization: `Bearer ${token}` });
  const revoked = await createApiKey(authority.backend.db, { org: acme, name: 'revoked', scopes: ['keys:write'], createdBy: 'test' }, clock);
  await authority.app.inject({ method: 'POST', url: `/v1/api-keys/${revoked.key.id}/revoke`, headers: authority.bearer(authority.acmeAdmin) });
  const user = (role?: string) => ({ sub: `user-${role ?? 'none'}`, org_id: acme.id, email: 'ana@example.com', ...(role ? { role } : {}) });
  const foreignIdp = await createTestIdp();
  const allowlistedScopes = ['keys:write', 'audit:read', 'evaluate:write'];
  const allowlisted = await authority.key(allowlistedScopes as never, { allowedCidrs: ['10.0.0.0/8', '2001:db8::/32'] });
  const invalid = (name: string, headers: Record<string, string>): Credential => ({ name, invalid: true, headers });
  const key = (name: string, token: string, permissions: string[], extra: Partial<Credential> = {}): Credential => ({ name, headers: bearer(token), kind: 'api_key', org: 'acme', permissions, ...extra }) as Credential;
  const jwt = async (role: string): Promise<Credential> => ({ name: `jwt_${role}`, headers: bearer(await idp.sign(user(role))), kind: 'user', org: 'acme', permissions: ROLE_PERMISSIONS[role] as string[] });
  return [
    invalid('no_credential', {}),
    invalid('malformed_scheme', { authorization: `Basic ${Buffer.from('a:b').toString('base64')}` }),
    invalid('malformed_token', bearer('not-a-credential')),
    invalid('malformed_key', bearer('ask_live_tooShort')),
    invalid('unknown_key', bearer(`ask_live_${'A'.repeat(40)}`)),
    invalid('revoked_key', bearer(revoked.secret)),
    invalid('expired_key', bearer(await authority.key(['keys:write'], { expiresAt: new Date(clock.now() - 1000) }))),
    invalid('expired_jwt', bearer(await idp.sign(user('admin'), { expiresIn: Math.floor(Date.now() / 1000) - 3600 }))),
    invalid('jwt_wrong_issuer', bearer(await idp.sign(user('admin'), { issuer: 'https://evil.test/' }))),
    invalid('jwt_wrong_audience', bearer(await idp.sign(user('admin'), { audience: 'someone-else' }))),
    invalid('jwt_foreign_signer', bearer(await foreignIdp.sign(user('admin')))),
    invalid('jwt_unknown_org', bearer(await idp.sign({ ...user('admin'), org_id: '00000000-0000-4000-8000-000000000000' }))),
    key('key_without_scope', await authority.key(['audit:read']), ['audit:read']),
    key('key_of_other_org', authority.globexAdmin, ALL, { org: 'globex' }),
    key('key_outside_allowlist', allowlisted, allowlistedScopes, { remoteAddress: '192.0.2.7', outsideAllowlist: true }),
    key('key_inside_allowlist', allowlisted, allowlistedScopes, { remoteAddress: '10.1.2.3' }),
    { name: 'x_service_key', headers: { 'x-service-key': authority.acmeAdmin }, kind: 'api_key', org: 'acme', permissions: ALL },
    await jwt('admin'),
    await jwt('approver'),
    await jwt('member'),
    await jwt('viewer'),
    { name: 'jwt_without_role', headers: bearer(await idp.sign(user())), kind: 'user', org: 'acme', permissions: [], roleless: true },
  ];
}

// Hundreds of bad credentials from one address: the per-address limit would answer them 429.
const generous = {
  rate_limits: {
    evaluate: { per_minute: 1_000_000, burst: 1_000_000 },
    plans: { community: { per_minute: 1_000_000, burst: 1_000_000 }, business: { per_minute: 1_000_000, burst: 1_000_000 } },
    unauthenticated: { per_minute: 1_000_000, burst: 1_000_000 },
  },
};

for (const backend of appBackends()) {
  t.test(`authentication matrix on ${backend.name}`, async (t) => {
    const opened = await backend.open();
    const authority = await createTestAuthority(opened, { config: generous });
    t.teardown(async () => {
      await authority.close();
      await opened.cleanup();
    });

    t.same(servedRoutes(authority.app), ENDPOINTS.map((endpoint) => `${endpoint.method} ${endpoint.route}`).sort(), 'the matrix lists every route the app serves');

    const victim = await createApiKey(opened.db, { org: authority.acme, name: 'victim', scopes: ['audit:read'], createdBy: 'test' }, authority.clock);
    const evaluate = () => authority.app.inject({ method: 'POST', url: '/v1/evaluate', headers: { ...authority.bearer(authority.acmeAdmin), 'content-type': 'application/json' }, payload: demo });
    const [decision, revocable] = [(await evaluate()).json(), (await evaluate()).json()];
    const escalation = await authority.app.inject({
      method: 'POST',
      url: '/v1/escalations',
      headers: { ...authority.bearer(await authority.key(['evaluate:write'])), 'content-type': 'application/json' },
      payload: { agentId: 'matrix-agent', escalationReason: 'matrix', quorumConfig: { quorumRequired: 'unanimous', approverPoolSize: 1000 } },
    });
    const hold = (amount: number) => ({ action_type: 'payments.wire', actor_id: 'finance-bot', context: { environment: 'production', amount_usd: amount, account_code: 'OPS-001' } });
    const approvalIds: string[] = [];
    // Requested by a key of its own: the requester may not resolve its approval (separation of duties).
    const requester = await authority.key(['evaluate:write']);
    for (let i = 0; i <= 22; i++) {
      const held = await authority.app.inject({ method: 'POST', url: '/v1/evaluate', headers: { ...authority.bearer(requester), 'content-type': 'application/json' }, payload: hold(20_000 + i) });
      approvalIds.push(held.json().approval_request_id);
    }
    const fixture: Fixture = {
      approvalId: approvalIds[0] as string,
      nextApprovalId: () => {
        const id = approvalIds.pop();
        if (!id) throw new Error('the matrix ran out of approval requests');
        return id;
      },
      victimKeyId: victim.key.id,
      permitId: decision.permit_id,
      permitToken: decision.permit_token,
      revocablePermitId: revocable.permit_id,
      policySource: (await readBootstrapPolicy(undefined)).source,
      escalationId: escalation.json().id,
    };

    let checked = 0;
    for (const credential of await credentials(authority)) {
      for (const endpoint of ENDPOINTS) {
        const body = endpoint.body?.(fixture);
        const response = await authority.app.inject({
          method: endpoint.method,
          url: endpoint.url(fixture),
          headers: { ...credential.headers, ...(body === undefined ? {} : { 'content-type': 'application/json' }) },
          ...(body === undefined ? {} : { payload: JSON.stringify(body) }),
          ...(!credential.invalid && credential.remoteAddress ? { remoteAddress: credential.remoteAddress } : {}),
        });
        const [status, code] = expected(credential, endpoint);
        const label = `${credential.name} → ${endpoint.method} ${endpoint.route}`;
        t.equal(response.statusCode, status, label);
        if (code !== null) {
          const envelope = ErrorEnvelope.parse(response.json());
          t.equal(envelope.error, code, `${label}: code`);
          t.equal(envelope.status, status, `${label}: status in body`);
        }
        checked += 1;
      }
    }
    t.equal(checked, 22 * ENDPOINTS.length, 'every credential met every endpoint');
  });
}

const missing = realServersMissing();
if (missing) t.comment(`the Postgres + Redis variant did not run: ${missing}`);
