/**
 * `GET /v1/audit/status`: the chain's head, its last signed checkpoint, and a range verified as
 * `countersign audit verify` would; a stored event changed behind the chain's back (triggers off,
 * as only a superuser could) shows as a `modified` problem with its sequence.
 */
import t from 'tap';
import { writeCheckpoints } from '../../authority/audit/checkpoints.js';
import { AuditStatusResponse } from '../../shared/wire/audit.js';
import { createOrganization } from '../../authority/orgs/organizations.js';
import { auditKeysFrom } from '../../authority/signing/audit-keys.js';
import { type TestAuthority, withTestAuthority } from '../helpers/authority.js';
import { appBackends } from '../helpers/backends.js';

const demo = (id: string) => ({ action_type: 'demo.echo', actor_id: 'demo-agent', context: { environment: 'dev', target: { type: 'demo', id } } });

async function status(authority: TestAuthority, query = '') {
  const response = await authority.app.inject({ method: 'GET', url: `/v1/audit/status${query}`, headers: authority.bearer(authority.acmeAdmin) });
  return { code: response.statusCode, body: response.json() };
}

for (const backend of appBackends()) {
  t.test(`audit status on ${backend.name}`, (t) =>
    withTestAuthority(t, backend, async (authority) => {
      const newcomer = await createOrganization(authority.backend.db, { name: `newcomer-${Date.now()}` }, authority.clock);
      const reader = await authority.key(['audit:read'], { org: newcomer });
      const empty = AuditStatusResponse.parse((await authority.app.inject({ method: 'GET', url: '/v1/audit/status', headers: authority.bearer(reader) })).json());
      t.match(empty, { head: null, last_checkpoint: null, verification: { ok: true, events: 0, checkpoint: 'none' } }, 'an organization with no events yet');

      for (const id of ['a', 'b', 'c']) {
        const response = await authority.app.inject({
          method: 'POST',
          url: '/v1/evaluate',
          headers: { ...authority.bearer(authority.acmeAdmin), 'content-type': 'application/json' },
          payload: JSON.stringify(demo(id)),
        });
        t.equal(response.statusCode, 200);
      }
      const signer = await auditKeysFrom(authority.keys).signer();
      t.equal(await writeCheckpoints(authority.backend.db, signer, authority.clock), 2, 'a checkpoint per organization with events');

      const fine = AuditStatusResponse.parse((await status(authority)).body);
      t.ok(fine.head !== null && fine.head.sequence >= 3, `the head is the newest event (${fine.head?.sequence})`);
      t.match(fine.last_checkpoint, { org_id: authority.acme.id, sequence: fine.head?.sequence, head_hash: fine.head?.hash });
      t.match(fine.verification, { ok: true, from_sequence: 1, to_sequence: fine.head?.sequence, events: fine.head?.sequence, checkpoint: 'matched', problems: [] }, 'the whole chain verifies, up to the checkpoint');

      const part = AuditStatusResponse.parse((await status(authority, '?from_sequence=2&to_sequence=2')).body);
      t.match(part.verification, { ok: true, from_sequence: 2, to_sequence: 2, events: 1, checkpoint: 'not_covered' }, 'a range of it, short of the checkpoint');
      t.equal((await status(authority, '?from_sequence=3&to_sequence=2')).code, 400, 'an upside-down range is refused');

      const { db } = authority.backend;
      await db.exec('ALTER TABLE audit_events DISABLE TRIGGER USER');
      await db.query(`UPDATE audit_events SET payload = jsonb_set(payload, '{actor_id}', '"someone-else"') WHERE org_id = $1 AND sequence = 2`, [authority.acme.id]);
      await db.exec('ALTER TABLE audit_events ENABLE TRIGGER USER');
      const tampered = AuditStatusResponse.parse((await status(authority)).body);
      t.equal(tampered.verification.ok, false, 'a changed event fails the verification');
      t.match(tampered.verification.problems, [{ kind: 'modified', sequence: 2 }], 'and is named, with its sequence');
    }),
  );
}
