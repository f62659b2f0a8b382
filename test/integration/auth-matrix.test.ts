/**
 * The authentication matrix: every endpoint that exists × every kind of credential → the exact
 * status and error code. Runs on PGlite + the in-process store, and on Postgres + Redis when
 * they are available.
 */
import t from 'tap';
import { createApiKey } from '../../authority/api-keys/keys.js';
import { ErrorEnvelope } from '../../shared/wire/envelope.js';
import { createTestAuthority, type TestAuthority } from '../helpers/authority.js';
import { appBackends, realServersMissing } from '../helpers/backends.js';
import { createTestIdp } from '../helpers/jwt.js';

type EndpointName = 'healthz' | 'readyz' | 'session' | 'key_self' | 'list_keys' | 'create_key' | 'revoke_key';

interface Credential {
  headers: Record<string, string>;
  remoteAddress?: string;
}

const ENDPOINTS: Record<EndpointName, { method: 'GET' | 'POST'; url: (victimKeyId: string) => string; body?: unknown }> = {
  healthz: { method: 'GET', url: () => '/healthz' },
  readyz: { method: 'GET', url: () => '/readyz' },
  session: { method: 'GET', url: () => '/v1/session' },
  key_self: { method: 'GET', url: () => '/v1-api-key-self' },
  list_keys: { method: 'GET', url: () => '/v1/api-keys' },
  create_key: { method: 'POST', url: () => '/v1/api-keys', body: { name: 'made in the matrix', scopes: ['audit:read'] } },
  revoke_key: { method: 'POST', url: (id) => `/v1/api-keys/${id}/revoke` },
};

const U = [401, 'unauthorized'] as const;
const F = [403, 'forbidden'] as const;
const N = [404, 'not_found'] as const;
const OK = [200, null] as const;
const CREATED = [201, null] as const;
type Expect = readonly [number, string | null];
type Row = Record<EndpointName, Expect>;

const refusedEverywhere = (expect: Expect): Row => ({
  healthz: OK,
  readyz: OK,
  session: expect,
  key_self: expect,
  list_keys: expect,
  create_key: expect,
  revoke_key: expect,
});

// The victim key lives in acme; "another organization" is globex.
const MATRIX: Record<string, Row> = {
  no_credential: refusedEverywhere(U),
  malformed_scheme: refusedEverywhere(U),
  malformed_token: refusedEverywhere(U),
  malformed_key: refusedEverywhere(U),
  unknown_key: refusedEverywhere(U),
  revoked_key: refusedEverywhere(U),
  expired_key: refusedEverywhere(U),
  key_without_scope: { healthz: OK, readyz: OK, session: F, key_self: OK, list_keys: F, create_key: F, revoke_key: F },
  key_of_other_org: { healthz: OK, readyz: OK, session: F, key_self: OK, list_keys: OK, create_key: CREATED, revoke_key: N },
  key_outside_allowlist: refusedEverywhere(F),
  key_inside_allowlist: { healthz: OK, readyz: OK, session: F, key_self: OK, list_keys: OK, create_key: CREATED, revoke_key: OK },
  x_service_key: { healthz: OK, readyz: OK, session: F, key_self: OK, list_keys: OK, create_key: CREATED, revoke_key: OK },
  expired_jwt: refusedEverywhere(U),
  jwt_wrong_issuer: refusedEverywhere(U),
  jwt_wrong_audience: refusedEverywhere(U),
  jwt_foreign_signer: refusedEverywhere(U),
  jwt_unknown_org: refusedEverywhere(U),
  jwt_admin: { healthz: OK, readyz: OK, session: OK, key_self: F, list_keys: OK, create_key: CREATED, revoke_key: OK },
  jwt_approver: { healthz: OK, readyz: OK, session: OK, key_self: F, list_keys: F, create_key: F, revoke_key: F },
  jwt_member: { healthz: OK, readyz: OK, session: OK, key_self: F, list_keys: F, create_key: F, revoke_key: F },
  jwt_viewer: { healthz: OK, readyz: OK, session: OK, key_self: F, list_keys: F, create_key: F, revoke_key: F },
  jwt_without_role: { healthz: OK, readyz: OK, session: F, key_self: F, list_keys: F, create_key: F, revoke_key: F },
};

async function credentials(authority: TestAuthority): Promise<Record<keyof typeof MATRIX, Credential>> {
  const { acme, idp, clock } = authority;
  const bearer = (token: string): Credential => ({ headers: { authorization: `Bearer ${token}` } });
  const revoked = await createApiKey(authority.backend.db, { org: acme, name: 'revoked', scopes: ['keys:write'], createdBy: 'test' }, clock);
  await authority.app.inject({ method: 'POST', url: `/v1/api-keys/${revoked.key.id}/revoke`, headers: authority.bearer(authority.acmeAdmin) });
  const user = (role?: string) => ({ sub: `user-${role ?? 'none'}`, org_id: acme.id, email: 'ana@example.com', ...(role ? { role } : {}) });
  const foreignIdp = await createTestIdp();
  const allowlisted = await authority.key(['keys:write', 'audit:read'], { allowedCidrs: ['10.0.0.0/8', '2001:db8::/32'] });
  return {
    no_credential: { headers: {} },
    malformed_scheme: { headers: { authorization: `Basic ${Buffer.from('a:b').toString('base64')}` } },
    malformed_token: bearer('not-a-credential'),
    malformed_key: bearer('ask_live_tooShort'),
    unknown_key: bearer(`ask_live_${'A'.repeat(40)}`),
    revoked_key: bearer(revoked.secret),
    expired_key: bearer(await authority.key(['keys:write'], { expiresAt: new Date(clock.now() - 1000) })),
    key_without_scope: bearer(await authority.key(['audit:read'])),
    key_of_other_org: bearer(authority.globexAdmin),
    key_outside_allowlist: { ...bearer(allowlisted), remoteAddress: '192.0.2.7' },
    key_inside_allowlist: { ...bearer(allowlisted), remoteAddress: '10.1.2.3' },
    x_service_key: { headers: { 'x-service-key': authority.acmeAdmin } },
    expired_jwt: bearer(await idp.sign(user('admin'), { expiresIn: Math.floor(Date.now() / 1000) - 3600 })),
    jwt_wrong_issuer: bearer(await idp.sign(user('admin'), { issuer: 'https://evil.test/' })),
    jwt_wrong_audience: bearer(await idp.sign(user('admin'), { audience: 'someone-else' })),
    jwt_foreign_signer: bearer(await foreignIdp.sign(user('admin'))),
    jwt_unknown_org: bearer(await idp.sign({ ...user('admin'), org_id: '00000000-0000-4000-8000-000000000000' })),
    jwt_admin: bearer(await idp.sign(user('admin'))),
    jwt_approver: bearer(await idp.sign(user('approver'))),
    jwt_member: bearer(await idp.sign(user('member'))),
    jwt_viewer: bearer(await idp.sign(user('viewer'))),
    jwt_without_role: bearer(await idp.sign(user())),
  };
}

const generous = { rate_limits: { plans: { community: { per_minute: 100_000, burst: 100_000 }, business: { per_minute: 100_000, burst: 100_000 } } } };

for (const backend of appBackends()) {
  t.test(`authentication matrix on ${backend.name}`, async (t) => {
    const opened = await backend.open();
    const authority = await createTestAuthority(opened, { config: generous });
    t.teardown(async () => {
      await authority.close();
      await opened.cleanup();
    });
    const victim = await createApiKey(opened.db, { org: authority.acme, name: 'victim', scopes: ['audit:read'], createdBy: 'test' }, authority.clock);
    const creds = await credentials(authority);

    for (const [credentialName, row] of Object.entries(MATRIX)) {
      const credential = creds[credentialName] as Credential;
      for (const [endpointName, [status, code]] of Object.entries(row) as Array<[EndpointName, Expect]>) {
        const endpoint = ENDPOINTS[endpointName];
        const response = await authority.app.inject({
          method: endpoint.method,
          url: endpoint.url(victim.key.id),
          headers: { ...credential.headers, ...(endpoint.body ? { 'content-type': 'application/json' } : {}) },
          ...(endpoint.body ? { payload: JSON.stringify(endpoint.body) } : {}),
          ...(credential.remoteAddress ? { remoteAddress: credential.remoteAddress } : {}),
        });
        const label = `${credentialName} → ${endpoint.method} ${endpointName}`;
        t.equal(response.statusCode, status, label);
        if (code !== null) {
          const envelope = ErrorEnvelope.parse(response.json());
          t.equal(envelope.error, code, `${label}: code`);
          t.equal(envelope.status, status, `${label}: status in body`);
        }
      }
    }
  });
}

const missing = realServersMissing();
if (missing) t.comment(`the Postgres + Redis variant did not run: ${missing}`);
