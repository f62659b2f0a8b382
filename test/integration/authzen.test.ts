/**
 * The AuthZEN 1.0 facade over real loopback HTTP: how a request maps onto an evaluation (as the
 * evaluation.decided event records it), the answers to allow, deny, hold (then approved) and
 * escalate, that no permit exists anywhere after any of them, the batch form with each semantic
 * and its defaults, the rate limit a batch draws, the discovery document, and the refusals
 * (credential, scope, malformed bodies), each in the error envelope. Every answer is also checked
 * against the OpenAPI document. Runs on PGlite + the in-process store, and on Postgres + Redis
 * when they are available.
 */
import t from 'tap';
import { AuthzenConfiguration, AuthzenDecision, AuthzenEvaluationsResponse, MAX_AUTHZEN_EVALUATIONS } from '../../shared/wire/authzen.js';
import { ErrorEnvelope } from '../../shared/wire/envelope.js';
import { EvaluateResponse } from '../../shared/wire/evaluate.js';
import { GENEROUS_LIMITS, withTestAuthority } from '../helpers/authority.js';
import { appBackends, realServersMissing } from '../helpers/backends.js';
import { access, auditOf, decided, finance, payee, permitCount, production, refusedAt, wire } from '../helpers/authzen-scenario.js';
import { loopbackApi as loopback, type Reply } from '../helpers/loopback-api.js';

for (const backend of appBackends()) {
  t.test(`one evaluation: the mapping, allow, deny, hold and escalate, and never a permit, on ${backend.name}`, (t) =>
    withTestAuthority(t, backend, async (authority) => {
      const { call, problems } = await loopback(authority);
      const evaluation = '/access/v1/evaluation';

      // Allow: the mapping as the audit log records it.
      const request = {
        subject: { ...finance, properties: { team: 'treasury' } },
        action: { ...wire, properties: { channel: 'swift' } },
        resource: { ...payee(), properties: { country: 'DE' } },
        context: production(500),
      };
      const allowed = await call('POST', evaluation, { body: request, requestId: 'authzen-allow-1' });
      const allow = decided(t, allowed, 'allow');
      t.equal(allowed.headers.get('x-request-id'), 'authzen-allow-1', 'X-Request-ID is echoed');
      t.ok(allowed.headers.get('x-ratelimit-remaining'), 'the answer carries the rate-limit headers');
      t.equal(allow.decision, true, 'allow is decision: true');
      t.match(allow.context, { decision: 'allow', reason_codes: ['AMOUNT_WITHIN_LIMIT'], request_id: 'authzen-allow-1', mode: 'live', human_approval_status: 'not_required' });
      t.notMatch(allowed.text, /permit|eyJ/, 'no permit and no token anywhere in the answer');
      const [event, ...others] = await auditOf(authority, 'authzen-allow-1');
      t.same(others, [], 'one event: the decision, no permit.issued');
      t.equal(event?.type, 'evaluation.decided');
      t.equal(event?.resource_id, allow.context.evaluation_id, 'the event is the evaluation the answer names');
      t.same(
        event?.payload.details,
        {
          ...event?.payload.details,
          action_type: 'payments.wire',
          actor_id: 'finance-bot',
          context: { ...production(500), subject: request.subject, action: request.action, resource: request.resource, target: payee() },
          via: 'authzen',
          permit_status: 'not_issued',
          permit_id: null,
        },
        'action.name → action_type, subject.id → actor_id, the entities into the context, the resource as the bound target',
      );
      t.ok((event?.payload.details.bound_facts as string[]).includes('target'), 'the resource is a bound fact');
      t.equal(await permitCount(authority), 0, 'no permit row exists');

      // The same X-Request-ID: the recorded decision again. Another question under it is decided
      // under an id of its own (<id>#<digest>), and is idempotent in turn.
      t.equal(decided(t, await call('POST', evaluation, { body: request, requestId: 'authzen-allow-1' }), 'repeat').context.evaluation_id, allow.context.evaluation_id, 'a repeat decides nothing new');
      const other = decided(t, await call('POST', evaluation, { body: { ...request, context: production(600) }, requestId: 'authzen-allow-1' }), 'another question under the same id');
      t.equal(other.decision, true);
      t.not(other.context.evaluation_id, allow.context.evaluation_id, 'another question is decided anew, not refused');
      t.match(other.context.request_id, /^authzen-allow-1#[A-Za-z0-9_-]{16}$/, 'recorded under the id and the digest of the question');
      t.same((await auditOf(authority, other.context.request_id!)).map((e) => e.type), ['evaluation.decided']);
      const otherAgain = decided(t, await call('POST', evaluation, { body: { ...request, context: production(600) }, requestId: 'authzen-allow-1' }), 'that question again');
      t.equal(otherAgain.context.evaluation_id, other.context.evaluation_id, 'idempotent in turn');
      const crossed = await call('POST', '/v1/evaluate', {
        body: { action_type: 'payments.wire', actor_id: 'finance-bot', context: (event?.payload.details as { context: object }).context, request_id: 'authzen-allow-1' },
      });
      t.equal(crossed.status, 409, 'the request id of a permit-less AuthZEN decision cannot fetch an answer from evaluate');

      // Any action name, a free-form context and a long subject id: decided, never refused.
      const mapped = decided(
        t,
        await call('POST', evaluation, {
          body: { subject: { type: 'user', id: 'u'.repeat(300) }, action: { name: 'GET' }, resource: payee(), context: { environment: { region: 'eu' }, target: 'elsewhere', amount_usd: 'lots', note: 'kept' } },
          requestId: 'authzen-mapped-1',
        }),
        'a gateway-style request',
      );
      t.equal(mapped.context.action_type, 'http.get', 'GET is http.get');
      const [mappedEvent] = await auditOf(authority, 'authzen-mapped-1');
      t.match(mappedEvent?.payload.details, {
        action_type: 'http.get',
        actor_id: /^sha256:[0-9a-f]{64}$/,
        context: { note: 'kept', target: payee(), authzen_context: { environment: { region: 'eu' }, target: 'elsewhere', amount_usd: 'lots' } },
      }, 'keys of ours with other types are set aside under authzen_context; the long id is its digest');
      t.equal(decided(t, await call('POST', evaluation, { body: { ...access(500), action: { name: 'Wire Payment' } } }), 'another name').context.action_type.startsWith('authzen.wire_payment.'), true, 'other names are encoded');

      // Deny: false, with the reasons.
      const stranger = decided(t, await call('POST', evaluation, { body: { ...access(500), subject: { type: 'service', id: 'unknown-bot' } } }), 'deny');
      t.equal(stranger.decision, false);
      t.match(stranger.context, { decision: 'deny', reason_codes: ['ACTOR_NOT_AUTHORIZED'] });
      t.ok(stranger.context.remediation?.length, 'a deny carries remediation hints');

      // Escalate: false, with the escalation it opened.
      const escalated = decided(t, await call('POST', evaluation, { body: access(2_000_000) }), 'escalate');
      t.equal(escalated.decision, false);
      t.equal(escalated.context.decision, 'escalate');
      t.ok(escalated.context.escalation_id, 'the escalation id');
      t.equal((await authority.app.inject({ method: 'GET', url: `/v1/escalations/${escalated.context.escalation_id}`, headers: authority.bearer(authority.acmeAdmin) })).statusCode, 200, 'the escalation exists');

      // Hold: false with the approval request; approved, the same evaluation with the approval is true.
      const held = decided(t, await call('POST', evaluation, { body: access(50_000), requestId: 'authzen-hold-1' }), 'hold');
      t.equal(held.decision, false);
      t.match(held.context, { decision: 'hold', reason_codes: ['AMOUNT_OVER_HOLD_THRESHOLD'], human_approval_status: 'pending' });
      const approvalId = held.context.approval_request_id as string;
      t.ok(approvalId, 'the hold opened an approval request');
      const pending = decided(t, await call('POST', evaluation, { body: access(50_000, { approvals: [approvalId] }) }), 'before approval');
      t.equal(pending.context.decision, 'deny', 'a pending approval does not allow');
      t.equal(pending.context.reason_codes[0], 'APPROVAL_PENDING');
      const approver = await authority.key(['approvals:read', 'approvals:write']);
      t.equal((await call('POST', `/v1/approvals/${approvalId}/resolve`, { token: approver, body: { decision: 'approve' } })).status, 200, 'approved by another identity');
      const approved = decided(t, await call('POST', evaluation, { body: access(50_000, { approvals: [approvalId] }), requestId: 'authzen-hold-2' }), 'after approval');
      t.equal(approved.decision, true, 'the same evaluation with the approval is true');
      t.match(approved.context, { decision: 'allow', human_approval_status: 'approved' });
      const elsewhere = decided(t, await call('POST', evaluation, { body: { ...access(50_000, { approvals: [approvalId] }), resource: payee('globex-ltd') } }), 'another resource');
      t.equal(elsewhere.decision, false, 'the approval is bound to the resource it was asked for');
      t.equal(elsewhere.context.reason_codes[0], 'APPROVAL_BINDING_MISMATCH');
      t.equal(await permitCount(authority), 0, 'still no permit row');
      t.same((await auditOf(authority, 'authzen-hold-2')).map((entry) => entry.type), ['evaluation.decided'], 'the approved decision issued no permit either');

      // The approval was not used up: it still backs one permit on /v1/evaluate.
      const permitted = await call('POST', '/v1/evaluate', {
        body: { action_type: 'payments.wire', actor_id: 'finance-bot', context: { ...production(50_000), target: payee(), approvals: [approvalId] } },
      });
      t.equal(permitted.status, 200);
      const evaluate = EvaluateResponse.parse(permitted.body);
      t.equal(evaluate.decision, 'allow');
      t.ok(evaluate.permit_token, 'evaluate issues the permit');
      t.equal(await permitCount(authority), 1);

      t.same(problems, [], 'every answer matches the OpenAPI document');
    }),
  );

  t.test(`batches: defaults, the three semantics, entry errors and the single form, on ${backend.name}`, (t) =>
    withTestAuthority(t, backend, async (authority) => {
      const { call, problems } = await loopback(authority);
      const batch = (body: unknown, requestId: string) => call('POST', '/access/v1/evaluations', { body, requestId });
      const answers = (reply: Reply, what: string) => {
        t.equal(reply.status, 200, `${what}: 200`);
        return AuthzenEvaluationsResponse.parse(reply.body).evaluations;
      };
      const decisions = (list: Array<{ decision: boolean }>) => list.map((entry) => entry.decision);
      const defaults = { subject: finance, action: wire, resource: payee(), context: production(500, { note: 'default' }) };
      const entries = [{}, { context: production(50_000) }, { resource: payee('globex-ltd') }];

      const bare = answers(await batch({ ...defaults, evaluations: entries }, 'batch-bare'), 'without include_context');
      t.same(bare, [{ decision: true }, { decision: false }, { decision: true }], 'decided entries are bare decisions unless asked');
      const all = answers(await batch({ ...defaults, options: { include_context: true }, evaluations: entries }, 'batch-all'), 'execute_all');
      t.same(decisions(all), [true, false, true], 'execute_all decides every entry, in order');
      t.match(all[1]?.context, { decision: 'hold', approval_request_id: String });
      const recorded = await Promise.all([0, 1, 2].map(async (i) => (await auditOf(authority, `batch-all/${i}`)).filter((event) => event.type === 'evaluation.decided')));
      t.same(recorded.map((events) => events.length), [1, 1, 1], 'each entry is an evaluation of its own, recorded as <X-Request-ID>/<i>');
      const contextOf = (i: number) => recorded[i]![0]!.payload.details.context as Record<string, unknown>;
      t.equal(contextOf(0).note, 'default', 'an entry without context takes the default');
      t.equal(contextOf(1).note, undefined, "an entry's context replaces the default, not merged with it");
      t.same(contextOf(2).target, payee('globex-ltd'), "an entry's resource replaces the default");
      t.same(contextOf(0).target, payee(), 'the default resource elsewhere');
      t.equal(await permitCount(authority), 0, 'a batch issues no permit');

      const order = [{}, { context: production(50_000) }, { context: production(700) }];
      const denyFirst = answers(await batch({ ...defaults, options: { evaluations_semantic: 'deny_on_first_deny' }, evaluations: order }, 'batch-deny'), 'deny_on_first_deny');
      t.same(decisions(denyFirst), [true, false], 'deny_on_first_deny stops after the first false');
      t.same(await auditOf(authority, 'batch-deny/2'), [], 'the entry after the stop is neither decided nor recorded');
      const permitFirst = answers(
        await batch({ ...defaults, options: { evaluations_semantic: 'permit_on_first_permit', another_option: 'ignored' }, evaluations: order.slice(1).concat([{}]) }, 'batch-permit'),
        'permit_on_first_permit',
      );
      t.same(decisions(permitFirst), [false, true], 'permit_on_first_permit stops after the first true');
      t.same(await auditOf(authority, 'batch-permit/2'), [], 'and decides nothing after it');
      t.same(decisions(answers(await batch({ ...defaults, options: { evaluations_semantic: 'execute_all' }, evaluations: order }, 'batch-explicit'), 'explicit execute_all')), [true, false, true]);

      // The same batch id again: entries repeat one by one; an entry with another question is decided under an id of its own.
      const again = answers(await batch({ ...defaults, options: { include_context: true }, evaluations: [{ context: production(900) }, entries[1], entries[2]] }, 'batch-all'), 'a repeated batch');
      t.match(again[0], { decision: true, context: { request_id: /^batch-all\/0#/ } }, 'another question at entry 0 is decided anew');
      t.equal((again[1]?.context as { evaluation_id: string }).evaluation_id, (all[1]?.context as { evaluation_id: string }).evaluation_id, 'an unchanged entry returns its recorded decision');
      // Another credential asking that same question under that id: both ids are the first credential's, so 409.
      const other = await authority.key(['evaluate:write']);
      const denyOnError = answers(
        await call('POST', '/access/v1/evaluations', { body: { ...defaults, options: { evaluations_semantic: 'deny_on_first_deny' }, evaluations: [{ context: production(900) }, {}] }, requestId: 'batch-all', token: other }),
        'error under deny_on_first_deny',
      );
      t.match(denyOnError[0], { decision: false, context: { error: { status: 409, code: 'conflict', message: String } } }, 'an entry that cannot be decided is false with its error');
      t.same(decisions(denyOnError), [false], 'an entry error is a denial for deny_on_first_deny');

      // Entries read one by one: an incomplete or malformed one is false with its error, decided by nobody; the others are decided.
      const mixed = answers(
        await batch({ subject: finance, action: wire, resource: {}, context: production(500), evaluations: [{ resource: payee() }, {}, 'an entry', { resource: { id: 'x', type: 7 } }, { resource: payee('globex-ltd'), extra: 1 }] }, 'batch-mixed'),
        'mixed entries',
      );
      t.same(decisions(mixed), [true, false, false, false, true], 'the complete entries are decided; `"resource": {}` is a default');
      t.match(mixed[1], { decision: false, context: { error: { status: 400, code: 'invalid_request', details: [{ path: 'evaluations.1.resource.type' }, { path: 'evaluations.1.resource.id' }] } } });
      t.match(mixed[2], { decision: false, context: { error: { code: 'invalid_request', details: [{ path: 'evaluations.2' }] } } });
      t.match(mixed[3], { decision: false, context: { error: { code: 'invalid_request', details: [{ path: 'evaluations.3.resource.type' }] } } });
      t.same(await auditOf(authority, 'batch-mixed/1'), [], 'a refused entry is not recorded');
      t.same((await auditOf(authority, 'batch-mixed/4')).map((event) => event.type), ['evaluation.decided']);
      const merged = (await auditOf(authority, 'batch-mixed/0'))[0]?.payload.details.context as Record<string, unknown>;
      t.same(merged.target, payee(), 'the entry resource completes the empty default');

      // No entries, or an empty list: one evaluation, answered in the single form.
      for (const [body, what] of [[access(500), 'no evaluations'], [{ ...access(500), evaluations: [] }, 'an empty list']] as const) {
        const single = await call('POST', '/access/v1/evaluations', { body });
        t.equal(single.status, 200, what);
        t.match(AuthzenDecision.parse(single.body), { decision: true, context: { decision: 'allow' } }, `${what}: {decision, context}`);
      }

      t.same(problems, [], 'every answer matches the OpenAPI document');
    }),
  );

  t.test(`a batch draws one evaluate token per entry, before deciding any, on ${backend.name}`, (t) =>
    withTestAuthority(
      t,
      backend,
      async (authority) => {
        const { call, problems } = await loopback(authority);
        const body = (n: number) => ({ ...access(500), evaluations: Array.from({ length: n }, () => ({})) });
        const first = await call('POST', '/access/v1/evaluations', { body: body(4), requestId: 'drawn-4' });
        t.equal(first.status, 200);
        t.equal(first.headers.get('x-ratelimit-remaining'), '1', 'four entries drew four of the five tokens');
        const refused = await call('POST', '/access/v1/evaluations', { body: body(3), requestId: 'drawn-3' });
        t.equal(refused.status, 429, 'three entries do not fit in what is left');
        const envelope = ErrorEnvelope.parse(refused.body);
        t.equal(envelope.error, 'unavailable', 'the evaluate bucket answers 429 unavailable');
        t.ok((envelope.retry_after_ms ?? 0) > 0, 'with retry_after_ms');
        t.ok(refused.headers.get('retry-after'), 'and Retry-After');
        t.equal(refused.headers.get('x-request-id'), 'drawn-3');
        for (const i of [0, 1, 2]) t.same(await auditOf(authority, `drawn-3/${i}`), [], `entry ${i} of the refused batch was not decided`);
        t.same(problems, [], 'every answer matches the OpenAPI document');
      },
      { rate_limits: { ...GENEROUS_LIMITS.rate_limits, evaluate: { per_minute: 5, burst: 5 } } },
    ),
  );

  t.test(`refusals: credential, scope and malformed bodies, in the error envelope, on ${backend.name}`, (t) =>
    withTestAuthority(t, backend, async (authority) => {
      const { call, problems } = await loopback(authority);
      for (const path of ['/access/v1/evaluation', '/access/v1/evaluations']) {
        const anonymous = await call('POST', path, { token: null, body: { nonsense: true }, requestId: 'who-1' });
        t.equal(anonymous.status, 401, `${path} without a credential: 401, before the body is looked at`);
        t.match(ErrorEnvelope.parse(anonymous.body), { error: 'unauthorized', request_id: 'who-1' });
        t.equal(anonymous.headers.get('x-request-id'), 'who-1');
        t.equal(anonymous.headers.get('www-authenticate'), 'Bearer', 'a 401 names the scheme');
        const unknown = await call('POST', path, { token: `ask_live_${'A'.repeat(40)}`, body: access(500) });
        t.equal(unknown.status, 401, `${path} with an unknown key: 401`);
        t.equal(unknown.headers.get('www-authenticate'), 'Bearer');
        const auditor = await call('POST', path, { token: await authority.key(['audit:read', 'approvals:write']), body: access(500) });
        t.equal(auditor.status, 403, `${path} without evaluate:write: 403`);
        t.equal(ErrorEnvelope.parse(auditor.body).error, 'forbidden');
        t.equal((await call('POST', path, { token: await authority.key(['evaluate:write']), body: access(500) })).status, 200, `${path} with evaluate:write alone: 200`);
      }

      const one = (body: unknown) => call('POST', '/access/v1/evaluation', { body });
      const many = (body: unknown) => call('POST', '/access/v1/evaluations', { body });
      refusedAt(t, await one({ action: wire, resource: payee() }), 'subject', 'no subject');
      refusedAt(t, await one({ ...access(500), subject: { id: 'finance-bot' } }), 'subject.type', 'a subject without a type');
      refusedAt(t, await one({ ...access(500), resource: { type: 'payee' } }), 'resource.id', 'a resource without an id');
      refusedAt(t, await one({ ...access(500), action: { name: 7 } }), 'action.name', 'an action name that is not a string');
      refusedAt(t, await one({ ...access(500), subject: { ...finance, properties: { note: 'a\u0000b' } } }), 'body.subject.properties.note', 'NUL in a property (bounded input)');
      refusedAt(t, await call('POST', '/access/v1/evaluation', { raw: `${JSON.stringify(access(500)).slice(0, -1)},"foo":{"deep":1e999}}` }), 'body.foo.deep', 'bounded input holds for keys that are ignored, too');
      refusedAt(t, await many({ ...access(500), evaluations: Array.from({ length: MAX_AUTHZEN_EVALUATIONS + 1 }, () => ({})) }), 'evaluations', `more than ${MAX_AUTHZEN_EVALUATIONS} entries`);
      refusedAt(t, await many({ action: wire }), 'subject', 'no entries and no subject');
      refusedAt(t, await many({ ...access(500), subject: 'finance-bot', evaluations: [{}] }), 'subject', 'a default that is not an entity');
      refusedAt(t, await many({ ...access(500), options: { evaluations_semantic: 'first_wins' } }), 'options.evaluations_semantic', 'an unknown semantic');
      for (const [raw, contentType, what] of [['{"subject":', 'application/json', 'not JSON'], ['', 'application/json', 'empty'], [JSON.stringify(access(500)), 'text/plain', 'JSON sent as text/plain'], ['subject=x', 'application/x-www-form-urlencoded', 'a form']] as const) {
        for (const path of ['/access/v1/evaluation', '/access/v1/evaluations', '/access/v1/search/action']) {
          const refused = await call('POST', path, { raw, contentType });
          t.equal(refused.status, 400, `${path}, a body ${what}: 400`);
          t.equal(ErrorEnvelope.parse(refused.body).error, 'invalid_request');
        }
      }
      t.equal((await call('POST', '/v1/evaluate', { raw: 'subject=x', contentType: 'text/plain' })).status, 415, 'the rest of the API still answers 415');
      t.equal((await call('GET', '/access/v1/evaluation')).status, 405, 'only POST');
      t.same(await auditOf(authority, 'who-1'), [], 'nothing refused was decided');

      t.same(problems, [], 'every answer matches the OpenAPI document');
    }),
  );

  t.test(`an audit log that cannot be written fails the answer (503), never a decision, on ${backend.name}`, (t) =>
    withTestAuthority(t, backend, async (authority) => {
      const { call, problems } = await loopback(authority);
      // Every audit append of these requests fails, except entry 0 of a batch.
      await authority.backend.db.exec(`
        CREATE FUNCTION countersign_test_fail_audit() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN RAISE EXCEPTION 'audit storage is failing (test)'; END $$;
        CREATE TRIGGER countersign_test_fail_audit BEFORE INSERT ON audit_events
          FOR EACH ROW WHEN (NEW.org_id = '${authority.acme.id}' AND NEW.request_id LIKE 'doomed-%' AND NEW.request_id NOT LIKE '%/0')
          EXECUTE FUNCTION countersign_test_fail_audit();
      `);
      const single = await call('POST', '/access/v1/evaluation', { body: access(500), requestId: 'doomed-1' });
      t.equal(single.status, 503);
      t.equal(ErrorEnvelope.parse(single.body).error, 'audit_unavailable', 'no decision exists, so none is answered');
      t.ok(single.headers.get('retry-after'));
      const batch = await call('POST', '/access/v1/evaluations', { body: { ...access(500), evaluations: [{}, {}, {}] }, requestId: 'doomed-2' });
      t.equal(batch.status, 503, 'a batch fails as a whole');
      t.equal(ErrorEnvelope.parse(batch.body).error, 'audit_unavailable');
      t.same((await auditOf(authority, 'doomed-2/0')).map((event) => event.type), ['evaluation.decided'], 'the entry decided before the failure stays recorded');
      t.same(await auditOf(authority, 'doomed-2/1'), [], 'the failing entry is not');
      t.same(await auditOf(authority, 'doomed-2/2'), [], 'and nothing after it was decided');
      t.equal(await permitCount(authority), 0);
      t.same(problems, [], 'every answer matches the OpenAPI document');
    }),
  );

  t.test(`the discovery document, from the request or from console.public_url, on ${backend.name}`, async (t) => {
    await t.test('from the request', (t) =>
      withTestAuthority(t, backend, async (authority) => {
        const { base, call, problems } = await loopback(authority);
        const reply = await call('GET', '/.well-known/authzen-configuration', { token: null, requestId: 'discover-1' });
        t.equal(reply.status, 200, 'no credential needed');
        t.equal(reply.headers.get('x-request-id'), 'discover-1');
        t.equal(reply.headers.get('cache-control'), 'no-store', 'built from the Host header: not for shared caches');
        t.same(AuthzenConfiguration.strict().parse(reply.body), {
          policy_decision_point: base,
          access_evaluation_endpoint: `${base}/access/v1/evaluation`,
          access_evaluations_endpoint: `${base}/access/v1/evaluations`,
          search_subject_endpoint: `${base}/access/v1/search/subject`,
          search_action_endpoint: `${base}/access/v1/search/action`,
        });
        t.notOk(reply.headers.get('x-ratelimit-limit'), 'drawn from no bucket');
        const bad = await call('GET', '/.well-known/authzen-configuration', { token: 'not-a-credential' });
        t.equal(bad.status, 200, 'a bad credential does not matter to a public document');
        const advertised = await fetch(reply.body.access_evaluation_endpoint, {
          method: 'POST',
          headers: { authorization: `Bearer ${authority.acmeAdmin}`, 'content-type': 'application/json' },
          body: JSON.stringify(access(500)),
        });
        t.equal(advertised.status, 200, 'the advertised endpoint answers');
        t.equal(AuthzenDecision.parse(await advertised.json()).decision, true);
        t.same(problems, [], 'every answer matches the OpenAPI document');
      }),
    );
    await t.test('from console.public_url', (t) =>
      withTestAuthority(
        t,
        backend,
        async (authority) => {
          const { call } = await loopback(authority);
          const reply = await call('GET', '/.well-known/authzen-configuration', { token: null });
          t.equal(reply.headers.get('cache-control'), 'public, max-age=3600');
          t.same(reply.body, {
            policy_decision_point: 'https://countersign.example.com',
            access_evaluation_endpoint: 'https://countersign.example.com/access/v1/evaluation',
            access_evaluations_endpoint: 'https://countersign.example.com/access/v1/evaluations',
            search_subject_endpoint: 'https://countersign.example.com/access/v1/search/subject',
            search_action_endpoint: 'https://countersign.example.com/access/v1/search/action',
          });
        },
        { console: { public_url: 'https://countersign.example.com/' } },
      ),
    );
  });
}

const missing = realServersMissing();
if (missing) t.comment(`the Postgres + Redis variant did not run: ${missing}`);
