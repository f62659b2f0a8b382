/**
 * The SDK's evaluate calls over real loopback HTTP, sent exactly as the SDKs build them
 * (test/helpers/sdk-requests.ts): the preflight (`?include=constraint_trace`, in the canonical
 * and the legacy names) and the streaming protect (`POST /v1-evaluate-stream`, read as the SDK
 * parses its events): the decision, its permit and its audit record as evaluate makes them,
 * errors before the stream as envelopes and after it as an `error` event, the shared rate limit.
 * Runs on PGlite + the in-process store, and on Postgres + Redis when they are available.
 */
import t from 'tap';
import { AuditEventsResponse } from '../../shared/wire/audit.js';
import { ErrorEnvelope } from '../../shared/wire/envelope.js';
import { ConstraintTrace, EvaluateResponse } from '../../shared/wire/evaluate.js';
import { ListPermitsResponse, VerifyPermitResponse } from '../../shared/wire/permits.js';
import { withTestAuthority, type TestAuthority } from '../helpers/authority.js';
import { appBackends } from '../helpers/backends.js';
import { SDK, sdkLoopback } from '../helpers/sdk-requests.js';

const demo = (id: string) => ({ environment: 'dev', target: { type: 'demo', id } });

interface StreamEvent {
  event: string;
  data: any;
}

/** The events of a stream as the SDK's parser splits them: blocks, `event: ` and `data: ` lines. */
function sseEvents(text: string): StreamEvent[] {
  return text
    .split('\n\n')
    .filter((block) => block.trim() !== '')
    .map((block) => {
      let event = 'message';
      let data = '';
      for (const line of block.split('\n')) {
        if (line.startsWith('event: ')) event = line.slice(7).trim();
        else if (line.startsWith('data: ')) data = line.slice(6);
      }
      return { event, data: JSON.parse(data) };
    });
}

async function eventsFor(authority: TestAuthority, type: string) {
  const response = await authority.app.inject({ method: 'GET', url: `/v1/audit/events?limit=500&type=${type}`, headers: authority.bearer(authority.acmeAdmin) });
  return AuditEventsResponse.parse(response.json()).events;
}

for (const backend of appBackends()) {
  t.test(`the preflight's constraint trace, in each SDK's shape, on ${backend.name}`, (t) =>
    withTestAuthority(t, backend, async (authority) => {
      const { send, problems } = await sdkLoopback(authority);
      const shapes = [
        ['TypeScript', SDK.ts.evaluatePreflight('demo.echo', 'demo-agent', demo('pre-1'))],
        ['Python', SDK.py.evaluatePreflight('demo.echo', 'demo-agent', demo('pre-2'))],
        ['TypeScript 2.2 (legacy names)', SDK.ts.evaluatePreflightLegacy('demo.echo', 'demo-agent', demo('pre-3'))],
      ] as const;
      for (const [name, request] of shapes) {
        const reply = await send(request);
        t.equal(reply.status, 200, name);
        const answer = EvaluateResponse.parse(reply.body);
        t.equal(answer.decision, 'allow', `${name}: decided as evaluate decides`);
        const trace = ConstraintTrace.parse(answer.constraint_trace);
        t.equal(trace.rules_evaluated.length, 1, 'the organization has one policy');
        t.match(trace.rules_evaluated[0], { decision: 'allow', fingerprint: `v${authority.acme.policyVersion}` });
        t.ok(trace.rules_evaluated[0]!.stages.some((stage) => stage.matched), 'the rule that allowed it is marked');
        t.same(trace.rules_evaluated[0]!.stages.map((stage) => stage.order), trace.rules_evaluated[0]!.stages.map((_, i) => i), 'in order');
        t.equal(trace.matching_policy_id, null, 'no policy refused it');
      }
      const denied = EvaluateResponse.parse((await send(SDK.ts.evaluatePreflight('demo.echo', 'unknown-bot', demo('pre-4')))).body);
      t.equal(denied.decision, 'deny');
      t.equal(denied.constraint_trace?.matching_policy_id, denied.decisionObject.policy.id, 'a deny names the policy');

      const plain = EvaluateResponse.parse((await send(SDK.ts.evaluate('demo.echo', 'demo-agent', demo('plain')))).body);
      t.notOk('constraint_trace' in plain, 'without include, no trace');
      const unknown = await send({ method: 'POST', path: '/v1-evaluate?include=everything', body: { action_type: 'demo.echo', actor_id: 'demo-agent' } });
      t.equal(unknown.status, 400, 'an unknown include');
      const legacyBad = await send(SDK.ts.evaluatePreflightLegacy('Not An Action', 'demo-agent'));
      t.equal(legacyBad.status, 400);
      t.match(ErrorEnvelope.parse(legacyBad.body).details, [{ path: 'action' }], 'errors name the legacy field');
      t.same(problems, [], 'every answer is one the OpenAPI document describes');
    }),
  );

  t.test(`protectStream: the decision as events, its permit verifiable, on ${backend.name}`, (t) =>
    withTestAuthority(t, backend, async (authority) => {
      const { send, problems } = await sdkLoopback(authority);
      const key = authority.acmeAdmin;
      const decidedBefore = (await eventsFor(authority, 'evaluation.decided')).length;

      const allowed = await send(SDK.ts.protectStream('demo.echo', 'demo-agent', key, demo('stream-1')));
      t.equal(allowed.status, 200);
      t.match(allowed.headers.get('content-type'), /^text\/event-stream/);
      const events = sseEvents(allowed.text);
      t.same(events.map((e) => e.event), ['progress', 'decision', 'done'], 'progress, the decision, done');
      const decision = events[1]!.data;
      t.match(decision, { permitted: true, decision: 'allow', is_final: true });
      t.equal(decision.decision_id, decision.permit_token, 'decision_id is the permit token the SDK verifies');
      t.equal(EvaluateResponse.parse(decision.evaluation).permit_id, decision.permit_id, 'with the whole evaluate answer');
      const verdict = VerifyPermitResponse.parse((await send(SDK.ts.verifyPermit(decision.decision_id))).body);
      t.match(verdict, { valid: true, permit_id: decision.permit_id }, 'the permit verifies at the gate');
      t.notOk(authority.logs.join('').includes(key), 'the API key the SDK puts in the body is never logged');

      const denied = sseEvents((await send(SDK.ts.protectStream('demo.echo', 'unknown-bot', key, demo('stream-2')))).text);
      t.match(denied[1], { event: 'decision', data: { permitted: false, decision: 'deny', permit_token: null } });
      t.equal(denied[1]!.data.decision_id, denied[1]!.data.evaluation_id, 'a deny carries its evaluation id');

      const functions = await send({ ...SDK.ts.protectStream('demo.echo', 'demo-agent', key, demo('stream-3')), path: '/functions/v1/v1-evaluate-stream' });
      t.equal(sseEvents(functions.text)[1]!.data.decision, 'allow', 'the hosted runtime path');
      t.equal((await eventsFor(authority, 'evaluation.decided')).length, decidedBefore + 3, 'each stream recorded its evaluation once');

      const unauthenticated = await send(SDK.ts.protectStream('demo.echo', 'demo-agent', key), 'ask_live_' + 'x'.repeat(40));
      t.equal(unauthenticated.status, 401, 'before the stream: an envelope with its status');
      t.equal(ErrorEnvelope.parse(unauthenticated.body).error, 'unauthorized');
      const readOnly = await authority.key(['audit:read']);
      t.equal((await send(SDK.ts.protectStream('demo.echo', 'demo-agent', readOnly), readOnly)).status, 403, 'evaluate:write is required');
      const malformed = await send(SDK.ts.protectStream('Not An Action', 'demo-agent', key));
      t.equal(malformed.status, 400);
      t.match(ErrorEnvelope.parse(malformed.body).details, [{ path: 'action' }]);

      const first = await send({ method: 'POST', path: '/v1-evaluate-stream', body: { action_type: 'demo.echo', actor_id: 'demo-agent', context: demo('a'), request_id: 'once' }, accept: 'text/event-stream' });
      t.equal(sseEvents(first.text)[1]!.event, 'decision');
      const reused = sseEvents((await send({ method: 'POST', path: '/v1-evaluate-stream', body: { action_type: 'demo.echo', actor_id: 'demo-agent', context: demo('b'), request_id: 'once' }, accept: 'text/event-stream' })).text);
      t.same(reused.map((e) => e.event), ['progress', 'error'], 'after the stream started: an error event, then the end');
      t.match(ErrorEnvelope.parse(reused[1]!.data), { error: 'conflict', status: 409 });
      t.same(problems, [], 'every answer is one the OpenAPI document describes');
    }),
  );

  t.test(`a failing audit append is an error event and leaves no permit, on ${backend.name}`, (t) =>
    withTestAuthority(t, backend, async (authority) => {
      const { send } = await sdkLoopback(authority);
      await authority.backend.db.exec(`
        CREATE FUNCTION countersign_test_fail_audit() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN RAISE EXCEPTION 'audit storage is failing (test)'; END $$;
        CREATE TRIGGER countersign_test_fail_audit BEFORE INSERT ON audit_events
          FOR EACH ROW WHEN (NEW.org_id = '${authority.acme.id}') EXECUTE FUNCTION countersign_test_fail_audit();
      `);
      const events = sseEvents((await send(SDK.ts.protectStream('demo.echo', 'demo-agent', authority.acmeAdmin, demo('doomed')))).text);
      t.same(events.map((e) => e.event), ['progress', 'error']);
      t.match(ErrorEnvelope.parse(events[1]!.data), { error: 'audit_unavailable', status: 503 });
      await authority.backend.db.exec('DROP TRIGGER countersign_test_fail_audit ON audit_events');
      const permits = ListPermitsResponse.parse((await send({ method: 'GET', path: '/v1/permits' })).body);
      t.equal(permits.total, 0, 'no permit exists anywhere');
    }),
  );
}

t.test('the stream draws from the evaluate bucket, refused before it starts', (t) =>
  withTestAuthority(
    t,
    appBackends()[0]!,
    async (authority) => {
      const { send } = await sdkLoopback(authority);
      t.equal((await send(SDK.ts.protectStream('demo.echo', 'demo-agent', authority.acmeAdmin, demo('r-1')))).status, 200);
      t.equal((await send(SDK.ts.evaluate('demo.echo', 'demo-agent', demo('r-2')))).status, 200, 'evaluate shares it');
      const limited = await send(SDK.ts.protectStream('demo.echo', 'demo-agent', authority.acmeAdmin, demo('r-3')));
      t.equal(limited.status, 429);
      t.match(ErrorEnvelope.parse(limited.body), { error: 'unavailable' });
      t.ok(limited.headers.get('retry-after'), 'with Retry-After');
    },
    { rate_limits: { evaluate: { per_minute: 2, burst: 2 } } },
  ),
);
