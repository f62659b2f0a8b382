/**
 * Credentials speak only for their actors, over real loopback HTTP on every backend: a key created
 * with `allowed_actors` (exact ids and `prefix*` patterns) shows them when created, listed and read
 * back; it is decided for as an allowed actor and refused (403 `forbidden`, reason
 * ACTOR_NOT_ALLOWED_FOR_CREDENTIAL, nothing decided or recorded) as any other, on evaluate (all
 * three body forms), the evaluate stream, the AuthZEN evaluations and action search, and escalation
 * creation; subject search lists only its actors. Keys it mints inherit the list, may narrow it,
 * and are refused anything wider. Unrestricted keys and user tokens are unchanged.
 */
import t, { type Test } from 'tap';
import { ACTOR_NOT_ALLOWED_REASON } from '../../authority/api-keys/actors.js';
import { ErrorEnvelope } from '../../shared/wire/envelope.js';
import { type TestAuthority, withTestAuthority } from '../helpers/authority.js';
import { appBackends, realServersMissing } from '../helpers/backends.js';
import { finance, payee, production, wire } from '../helpers/authzen-scenario.js';
import { loopbackApi, type Reply } from '../helpers/loopback-api.js';

/** erin is in the example policy's finance group: the policy would let her wire, the key may not ask. */
const erin = { type: 'user', id: 'erin' };
const evaluation = (actorId: string, requestId: string) => ({ action_type: 'payments.wire', actor_id: actorId, context: production(500), request_id: requestId });

/** What a refused request could have left behind: evaluations, audit events, permits, escalations. */
async function recorded(authority: TestAuthority): Promise<Record<string, number>> {
  const count = async (table: string) =>
    (await authority.backend.db.query<{ n: number }>(`SELECT count(*)::int AS n FROM ${table} WHERE org_id = $1`, [authority.acme.id]))[0]!.n;
  return { evaluations: await count('evaluations'), audit_events: await count('audit_events'), permits: await count('permits'), escalations: await count('escalations') };
}

function refusedActor(t: Test, reply: Reply, actorId: string, what: string): void {
  t.equal(reply.status, 403, `${what}: 403`);
  const envelope = ErrorEnvelope.parse(reply.body);
  t.equal(envelope.error, 'forbidden', `${what}: forbidden`);
  t.equal(envelope.reason, ACTOR_NOT_ALLOWED_REASON, `${what}: the stable reason`);
  t.ok(envelope.message.includes(`"${actorId}"`) && envelope.message.includes('may speak only for its allowed actors'), `${what}: the message names the actor (${envelope.message})`);
}

for (const backend of appBackends()) {
  t.test(`a key speaks only for its allowed actors, on ${backend.name}`, (t) =>
    withTestAuthority(
      t,
      backend,
      async (authority) => {
        const { call, problems } = await loopbackApi(authority);
        const created = await call('POST', '/v1/api-keys', { body: { name: 'finance agent', scopes: ['evaluate:write'], allowed_actors: ['finance-bot', 'agent:*'] } });
        t.equal(created.status, 201);
        t.same(created.body.api_key.allowed_actors, ['finance-bot', 'agent:*'], 'the create answer shows the allowed actors');
        const key: string = created.body.secret;
        const listed = (await call('GET', '/v1/api-keys')).body.api_keys.find((found: { id: string }) => found.id === created.body.api_key.id);
        t.same(listed.allowed_actors, ['finance-bot', 'agent:*'], 'the list shows them');
        t.same((await call('GET', '/v1/api-key-self', { token: key })).body.allowed_actors, ['finance-bot', 'agent:*'], 'the key sees its own');
        t.equal((await call('GET', '/v1/api-key-self')).body.allowed_actors, null, 'a key created without them speaks for any actor');
        for (const bad of [['age*nt'], [' agent:*'], [''], ['a', 'a'], []]) {
          const refused = await call('POST', '/v1/api-keys', { body: { name: 'bad', scopes: ['evaluate:write'], allowed_actors: bad } });
          t.equal(refused.status, 400, `allowed_actors ${JSON.stringify(bad)} is refused`);
        }

        const allowed = await call('POST', '/v1/evaluate', { token: key, body: evaluation('finance-bot', 'allowed-1') });
        t.equal(allowed.status, 200, 'evaluate as an allowed actor');
        t.equal(allowed.body.decision, 'allow');
        t.equal((await call('POST', '/v1/evaluate', { token: key, body: evaluation('agent:billing', 'allowed-2') })).status, 200, 'a pattern admits its actors (decided by the policy)');

        const before = await recorded(authority);
        refusedActor(t, await call('POST', '/v1/evaluate', { token: key, body: evaluation('erin', 'refused-1') }), 'erin', 'evaluate as another actor');
        refusedActor(t, await call('POST', '/v1-evaluate', { token: key, body: { actor: { id: 'erin' }, action: { type: 'payments.wire' }, context: production(500) } }), 'erin', 'the agent form, on an alias');
        refusedActor(t, await call('POST', '/functions/v1/v1-evaluate', { token: key, body: { action: 'payments.wire', agent: 'finance-bot-2', context: production(500) } }), 'finance-bot-2', 'the legacy form: an exact id is not a prefix');
        const stream = await call('POST', '/v1-evaluate-stream', { token: key, body: evaluation('erin', 'refused-2') });
        refusedActor(t, stream, 'erin', 'the evaluate stream');
        t.match(stream.headers.get('content-type'), /^application\/json/, 'refused before the stream starts');
        refusedActor(t, await call('POST', '/access/v1/evaluation', { token: key, body: { subject: erin, action: wire, resource: payee(), context: production(500) } }), 'erin', 'an AuthZEN evaluation');
        refusedActor(t, await call('POST', '/access/v1/evaluations', { token: key, body: { subject: erin, action: wire, resource: payee(), context: production(500) } }), 'erin', 'the batch endpoint without entries');
        refusedActor(t, await call('POST', '/access/v1/search/action', { token: key, body: { subject: erin, resource: payee(), context: production(500) } }), 'erin', 'an AuthZEN action search');
        refusedActor(t, await call('POST', '/v1/escalations', { token: key, body: { agentId: 'erin', escalationReason: 'a wire for erin' } }), 'erin', 'an escalation for another agent');
        t.same(await recorded(authority), before, 'no refused request decided or recorded anything');

        const batch = await call('POST', '/access/v1/evaluations', {
          token: key,
          body: { action: wire, resource: payee(), context: production(500), evaluations: [{ subject: finance }, { subject: erin }] },
          requestId: 'batch-1',
        });
        t.equal(batch.status, 200, 'a batch is answered entry by entry');
        t.equal(batch.body.evaluations[0].decision, true, 'the allowed actor is decided');
        t.match(batch.body.evaluations[1], { decision: false, context: { error: { status: 403, code: 'forbidden' } } }, 'the other is false with its 403, as other entry errors');

        const stream200 = await call('POST', '/v1-evaluate-stream', { token: key, body: evaluation('finance-bot', 'stream-ok') });
        t.equal(stream200.status, 200, 'the stream as an allowed actor');
        t.match(stream200.text, /event: decision/);
        t.equal((await call('POST', '/access/v1/evaluation', { token: key, body: { subject: finance, action: wire, resource: payee(), context: production(500) } })).body.decision, true);
        t.equal((await call('POST', '/access/v1/search/action', { token: key, body: { subject: finance, resource: payee(), context: production(500) } })).status, 200);
        t.equal((await call('POST', '/v1/escalations', { token: key, body: { agentId: 'agent:support', escalationReason: 'a refund' } })).status, 200, 'an escalation for an allowed agent');

        const searchBody = { subject: { type: 'service' }, action: wire, resource: payee(), context: production(500) };
        const everyone = (await call('POST', '/access/v1/search/subject', { body: searchBody })).body.results.map((found: { id: string }) => found.id);
        t.ok(everyone.includes('finance-bot') && everyone.includes('erin'), 'an unrestricted key finds both');
        const own = (await call('POST', '/access/v1/search/subject', { token: key, body: searchBody })).body.results.map((found: { id: string }) => found.id);
        t.same(own, ['finance-bot'], 'a restricted key finds only actors it may speak for');

        t.equal((await call('POST', '/v1/evaluate', { body: evaluation('erin', 'admin-1') })).status, 200, 'a key without allowed_actors speaks for any actor');
        const user = await authority.idp.sign({ sub: 'alice', org_id: authority.acme.id, role: 'admin' });
        t.equal((await call('POST', '/v1/evaluate', { token: user, body: evaluation('erin', 'user-1') })).status, 200, 'a user token is not restricted');
        t.same(problems, [], 'every answer matches the OpenAPI document');
      },
    ),
  );

  t.test(`keys minted by a restricted key inherit its actors and never widen them, on ${backend.name}`, (t) =>
    withTestAuthority(t, backend, async (authority) => {
      const { call, problems } = await loopbackApi(authority);
      const mint = (token: string, allowedActors?: string[]) =>
        call('POST', '/v1/api-keys', { token, body: { name: 'minted', scopes: ['keys:write', 'evaluate:write'], ...(allowedActors ? { allowed_actors: allowedActors } : {}) } });
      const parent = await mint(authority.acmeAdmin, ['agent:*']);
      t.equal(parent.status, 201);

      const inherited = await mint(parent.body.secret);
      t.equal(inherited.status, 201);
      t.same(inherited.body.api_key.allowed_actors, ['agent:*'], 'a child given no actors inherits its creator’s');
      const grandchild = await mint(inherited.body.secret);
      t.same(grandchild.body.api_key.allowed_actors, ['agent:*'], 'and passes them on');
      refusedActor(t, await call('POST', '/v1/evaluate', { token: grandchild.body.secret, body: evaluation('finance-bot', 'grandchild-1') }), 'finance-bot', 'the inherited list is enforced');

      const narrower = await mint(parent.body.secret, ['agent:billing*', 'agent:x']);
      t.equal(narrower.status, 201, 'a narrower pattern and an exact id within it are accepted');
      t.same(narrower.body.api_key.allowed_actors, ['agent:billing*', 'agent:x']);
      for (const wider of [['*'], ['finance-bot'], ['agent*'], ['agent:x', 'human:alice']]) {
        const refused = await mint(parent.body.secret, wider);
        t.equal(refused.status, 403, `${wider.join(', ')} is wider than agent:*`);
        t.match(refused.body, { error: 'forbidden', message: /actors its creator may speak for \(agent:\*\); beyond them: / });
      }
      const fromNarrower = await mint(narrower.body.secret, ['agent:x']);
      t.equal(fromNarrower.status, 201, 'within one of several patterns');
      t.equal((await mint(narrower.body.secret, ['agent:*'])).status, 403, 'a child cannot win back what its creator gave up');
      const free = await mint(authority.acmeAdmin, ['*']);
      t.same(free.body.api_key.allowed_actors, ['*'], 'an unrestricted creator may give any list, * included');
      t.same(problems, [], 'every answer matches the OpenAPI document');
    }),
  );
}

const missing = realServersMissing();
if (missing) t.comment(`the Postgres + Redis variant did not run: ${missing}`);
