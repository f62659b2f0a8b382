/**
 * `GET /console/api/identities`, over real HTTP: what the console shows instead of a bare key id.
 * Any credential of the organization (an approver's key without keys:write included) learns the
 * name, display prefix, owner and revocation of its organization's API keys, never a secret; a
 * key of another organization, a user and an unknown id are left out; a query that is not a list
 * of identities is a 400 envelope.
 */
import t from 'tap';
import { ConsoleIdentitiesResponse } from '../../shared/wire/console.js';
import { ErrorEnvelope } from '../../shared/wire/envelope.js';
import { withTestAuthority } from '../helpers/authority.js';
import { appBackends } from '../helpers/backends.js';
import { loopbackApi } from '../helpers/loopback-api.js';

for (const backend of appBackends()) {
  t.test(`the console names the identities it shows, on ${backend.name}`, (t) =>
    withTestAuthority(t, backend, async (authority) => {
      const { call } = await loopbackApi(authority);
      const approver = await authority.key(['approvals:write', 'hitl:approve']);
      const made = await call('POST', '/v1/api-keys', { body: { name: 'payments agent', scopes: ['evaluate:write'] } });
      t.equal(made.status, 201);
      const agent = made.body as { api_key: { id: string; prefix: string; owner: string }; secret: string };
      const revoked = await call('POST', '/v1/api-keys', { body: { name: 'old agent', scopes: ['evaluate:write'] } });
      const revokedId = (revoked.body as { api_key: { id: string } }).api_key.id;
      t.equal((await call('POST', `/v1/api-keys/${revokedId}/revoke`, { body: {} })).status, 200);
      const globex = await call('GET', '/v1/api-key-self', { token: authority.globexAdmin });
      const globexKey = (globex.body as { key_id: string }).key_id;

      const ids = [`api_key:${agent.api_key.id}`, `api_key:${revokedId}`, `api_key:${globexKey}`, 'user:alice', 'api_key:00000000-0000-4000-8000-000000000000', 'api_key:not-a-uuid'];
      const answer = await call('GET', `/console/api/identities?ids=${encodeURIComponent(ids.join(','))}`, { token: approver });
      t.equal(answer.status, 200, 'a credential without keys:write may ask');
      const { identities } = ConsoleIdentitiesResponse.parse(answer.body);
      t.same(
        [...identities].sort((a, b) => a.name.localeCompare(b.name)),
        [
          { identity: `api_key:${revokedId}`, name: 'old agent', prefix: (revoked.body as { api_key: { prefix: string } }).api_key.prefix, owner: agent.api_key.owner, revoked: true },
          { identity: `api_key:${agent.api_key.id}`, name: 'payments agent', prefix: agent.api_key.prefix, owner: agent.api_key.owner, revoked: false },
        ],
        "its organization's keys, by name, prefix, owner and whether revoked; nothing of another organization, a user or an unknown id",
      );
      t.notMatch(answer.text, agent.secret, 'never a secret');

      const tooMany = Array.from({ length: 51 }, (_, index) => `user:u${index}`).join(',');
      for (const query of ['', `?ids=${tooMany}`]) {
        const refused = await call('GET', `/console/api/identities${query}`, { token: approver });
        t.equal(refused.status, 400, `a bad query (${query === '' ? 'none' : 'too many'}) is refused`);
        t.equal(ErrorEnvelope.parse(refused.body).error, 'invalid_request');
      }
      t.equal((await call('GET', '/console/api/identities?ids=user:alice', { token: null })).status, 401, 'and a caller without a credential is not told anything');
    }),
  );
}
