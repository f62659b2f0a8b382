/**
 * The AuthZEN mapping without a server: an access evaluation as an evaluate request (entities
 * into the context, the resource as the bound target, the action-name rule, the context's
 * placement, long subject ids), a batch with its defaults and per-entry refusals, what the wire
 * schema ignores and refuses, the
 * answer built from an evaluate response (only named fields, so never a permit), and where each
 * semantic stops.
 *
 * @example
 *   npx tap --disable-coverage test/unit/authzen-mapping.test.ts
 */
import t from 'tap';
import { actionNameMapping, encodedActionType } from '../../authority/authzen/action-names.js';
import { actorIdOf, decisionOf, errorDecisionOf, placeContext, planEvaluations, stopsAfter, toEvaluateRequest as toEvaluate, type AuthzenEvaluation } from '../../authority/authzen/mapping.js';
import { AUTHZEN_DEFAULTS } from '../../authority/authzen/settings.js';
import { CountersignError } from '../../shared/errors.js';
import { AuthzenEvaluationRequest, AuthzenEvaluationsRequest, MAX_AUTHZEN_EVALUATIONS } from '../../shared/wire/authzen.js';
import { bindingHash, boundFacts } from '../../shared/permits/binding.js';
import type { EvaluateResponse } from '../../shared/wire/evaluate.js';

const names = actionNameMapping(AUTHZEN_DEFAULTS);
const toEvaluateRequest = (evaluation: AuthzenEvaluation) => toEvaluate(evaluation, names);

const subject = { type: 'user', id: 'alice@example.com', properties: { department: 'Sales' } };
const action = { name: 'documents.read', properties: { method: 'GET' } };
const resource = { type: 'document', id: 'boxcarring.md' };

t.test('an access evaluation becomes an evaluate request', async (t) => {
  const request = toEvaluateRequest({ subject, action, resource, context: { environment: 'production', time: '1985-10-26T01:22-07:00' } });
  t.same(request, {
    action_type: 'documents.read',
    actor_id: 'alice@example.com',
    context: {
      environment: 'production',
      time: '1985-10-26T01:22-07:00',
      subject,
      action,
      resource,
      target: { type: 'document', id: 'boxcarring.md' },
    },
  });
  t.same(toEvaluateRequest({ subject, action, resource }).context.target, { type: 'document', id: 'boxcarring.md' }, 'without a context too');

  const facts = (id: string) => boundFacts(toEvaluateRequest({ subject, action, resource: { ...resource, id } }), []);
  t.ok(facts('a').keys.includes('target'), 'the resource is a bound fact');
  t.not(bindingHash('org', facts('a').facts), bindingHash('org', facts('b').facts), 'so another resource is another action');
  t.equal(
    bindingHash('org', facts('a').facts),
    bindingHash('org', boundFacts({ action_type: 'documents.read', actor_id: 'alice@example.com', context: { target: { type: 'document', id: 'a' } } }, []).facts),
    'and the same action as evaluate sees it with that target',
  );
});

t.test('the wire schema ignores unknown keys and refuses what AuthZEN requires', async (t) => {
  const paths = (body: unknown, schema: typeof AuthzenEvaluationRequest | typeof AuthzenEvaluationsRequest = AuthzenEvaluationRequest) => {
    const parsed = schema.safeParse(body);
    return parsed.success ? [] : parsed.error.issues.map((issue) => issue.path.join('.'));
  };
  t.same(paths({ subject, action, resource }), [], 'a good request');
  t.same(paths({ subject, action: { name: 'Read Documents' }, resource }), [], 'any action name');
  t.same(paths({ subject: { ...subject, id: 'x'.repeat(5000) }, action, resource }), [], 'a subject id of any length');
  t.same(paths({ subject: { ...subject, id: '' }, action, resource }), ['subject.id']);
  t.same(paths({ subject, action: { name: 123 }, resource }), ['action.name']);
  t.same(paths({ subject, action, resource, context: { amount_usd: -1, environment: { region: 'eu' }, target: 'x' } }), [], 'a free-form context');
  t.same(AuthzenEvaluationRequest.parse({ subject: { ...subject, identity: 'x' }, action, resource: { ...resource, owner: 'bob' }, foo: 'bar' }), { subject, action, resource }, 'unknown keys are dropped');
  t.same(paths({ evaluations: [{ subject, action, resource }] }, AuthzenEvaluationsRequest), [], 'a batch without defaults');
  t.same(paths({ subject, action, resource: {}, evaluations: [{ resource }, {}, 'not an entry'] }, AuthzenEvaluationsRequest), [], 'partial defaults; entries are read one by one');
  t.same(paths({ subject, action, resource, evaluations: Array.from({ length: MAX_AUTHZEN_EVALUATIONS + 1 }, () => ({})) }, AuthzenEvaluationsRequest), ['evaluations'], 'bounded');
  t.same(paths({ subject, action, resource, options: { evaluations_semantic: 'execute_all', page_size: 3 } }, AuthzenEvaluationsRequest), [], 'unknown options are ignored');
});

t.test('action names: configured, already a type, HTTP methods, and everything else encoded', async (t) => {
  const configured = actionNameMapping({ action_names: { can_read: 'documents.read', GET: 'api.read' }, http_method_prefix: 'route' });
  t.equal(configured.toActionType('can_read'), 'documents.read', 'the configured table first');
  t.equal(configured.toActionType('GET'), 'api.read', 'even over the HTTP rule');
  t.equal(configured.toActionType('POST'), 'route.post', 'the configured prefix');
  t.equal(names.toActionType('GET'), 'http.get');
  t.equal(names.toActionType('DELETE'), 'http.delete');
  t.equal(names.toActionType('payments.wire'), 'payments.wire', 'a valid type is itself');
  t.equal(names.toActionType('can_read_user'), 'can_read_user');
  t.equal(names.toActionType('get'), 'get', 'a lowercase method is a valid type, not the method');
  const encoded = names.toActionType('Read Documents');
  t.match(encoded, /^authzen\.read_documents\.[0-9a-f]{12}$/, 'another name is encoded');
  t.equal(names.toActionType('Read Documents'), encoded, 'deterministically');
  t.not(names.toActionType('read documents'), encoded, 'names differing in case are different types');
  t.ok(names.toActionType('read documents').startsWith('authzen.read_documents.'), 'sharing the prefix');
  t.not(names.toActionType('document:read'), names.toActionType('document/read'), 'names differing in punctuation too');
  t.equal(names.toActionType('authzen.read'), encodedActionType('authzen.read'), 'a name in the authzen namespace is encoded, so none collides with an encoded one');
  t.match(names.toActionType('x'.repeat(300)), /^authzen\.x{64}\.[0-9a-f]{12}$/, 'a name too long for a type is encoded');
  t.match(names.toActionType('日本'), /^authzen\._\.[0-9a-f]{12}$/, 'a name with no ASCII letter');
});

t.test('the context: keys of ours only with our types, the rest set aside', async (t) => {
  t.same(placeContext({ environment: 'production', amount_usd: 5, time: 'noon' }), { environment: 'production', amount_usd: 5, time: 'noon' });
  t.same(
    placeContext({ environment: { region: 'eu' }, amount_usd: 'five', approvals: ['a'], subject: 'x', target: { type: 'a', id: 'b' }, authzen_context: 1, time: 'noon' }),
    { approvals: ['a'], time: 'noon', authzen_context: { environment: { region: 'eu' }, amount_usd: 'five', subject: 'x', target: { type: 'a', id: 'b' }, authzen_context: 1 } },
  );
  const request = toEvaluateRequest({ subject, action, resource, context: { target: { type: 'document', id: 'other.md' }, resource: 'forged' } });
  t.same(request.context.target, { type: 'document', id: 'boxcarring.md' }, 'the context cannot bind another resource');
  t.same(request.context.resource, resource, 'nor pose as an entity');
  t.equal(actorIdOf('alice'), 'alice');
  t.match(actorIdOf('a'.repeat(257)), /^sha256:[0-9a-f]{64}$/, 'a subject id over 256 characters is its digest');
  t.equal(toEvaluateRequest({ subject: { type: 'user', id: 'a'.repeat(257) }, action, resource }).actor_id, actorIdOf('a'.repeat(257)));
});

t.test('a batch: the top-level keys are defaults, replaced as a whole', async (t) => {
  const request = AuthzenEvaluationsRequest.parse({
    subject,
    action,
    context: { time: 'noon', channel: 'web' },
    resource: { type: 'document', properties: { shared: true } },
    options: { evaluations_semantic: 'deny_on_first_deny' },
    evaluations: [
      { resource },
      { resource: { type: 'document', id: 'other.md' }, context: { time: 'night' } },
      { resource, action: { name: 'documents.write' } },
      { resource: { id: 'typed-by-default.md' } },
      {},
      { subject: 'alice' },
    ],
  });
  const plan = planEvaluations(request);
  if (plan.form !== 'batch') throw new Error('expected a batch');
  t.equal(plan.semantic, 'deny_on_first_deny');
  t.equal(plan.includeContext, false);
  t.same(plan.entries.slice(0, 4), [
    { ok: true, evaluation: { subject, action, resource, context: { time: 'noon', channel: 'web' } } },
    { ok: true, evaluation: { subject, action, resource: { type: 'document', id: 'other.md' }, context: { time: 'night' } } },
    { ok: true, evaluation: { subject, action: { name: 'documents.write' }, resource, context: { time: 'noon', channel: 'web' } } },
    { ok: true, evaluation: { subject, action, resource: { type: 'document', id: 'typed-by-default.md' }, context: { time: 'noon', channel: 'web' } } },
  ], "an entry's entity replaces the default's, its properties too, but a required field it lacks comes from the default");
  const refused = plan.entries.slice(4).map((entry) => (entry.ok ? null : entry.error.details?.map((detail) => detail.path)));
  t.same(refused, [['evaluations.4.resource.id'], ['evaluations.5.subject']], 'an incomplete or malformed entry is refused on its own');
  t.match(planEvaluations(AuthzenEvaluationsRequest.parse({ subject, action, resource, evaluations: [] })), { form: 'single', evaluation: { subject, action, resource } }, 'an empty list is the single form');
  t.throws(() => planEvaluations(AuthzenEvaluationsRequest.parse({ subject, action })), { code: 'invalid_request' }, 'the single form must be complete');
  const unset = planEvaluations(AuthzenEvaluationsRequest.parse({ evaluations: [{ subject, action, resource }] }));
  t.equal(unset.form === 'batch' && unset.semantic, 'execute_all', 'execute_all by default');
});

const response = (overrides: Partial<EvaluateResponse>): EvaluateResponse => ({
  decision: 'allow',
  authorization_state: { permit_requirement: 'required', permit_status: 'present', verification_status: 'not_verified' },
  permit_token: 'eyJhbGciOiJFZERTQSJ9.e30.c2ln',
  permit_id: 'pmt_1',
  request_id: 'req-1',
  evaluation_id: 'ev-1',
  mode: 'live',
  human_approval_required: false,
  human_approval_status: 'not_required',
  expires_at: '2026-01-01T00:01:00.000Z',
  permit_expires_at: '2026-01-01T00:01:00.000Z',
  risk_score: 0.1,
  risk_envelope: { score: 0.1, base: 0.1, band: 'low', factors: [] },
  decisionObject: {
    decision: 'allow',
    reason_codes: ['OK'],
    action_class: 'docs',
    matched_rules: ['r'],
    policy: { id: 'p', version: 1 },
    binding_hash: 'h',
    bound_facts: ['action_type'],
    risk_envelope: { score: 0.1, base: 0.1, band: 'low', factors: [] },
    approvals: [],
  },
  ...overrides,
});

t.test('the answer: true only for allow, and nothing the facade does not name', async (t) => {
  const allow = decisionOf(response({}), 'docs.read');
  t.same(allow, {
    decision: true,
    context: { decision: 'allow', reason_codes: ['OK'], action_type: 'docs.read', request_id: 'req-1', evaluation_id: 'ev-1', mode: 'live', risk_score: 0.1, human_approval_status: 'not_required' },
  });
  t.notMatch(JSON.stringify(allow), /permit|eyJ/, 'a permit handed to it never reaches the answer');
  for (const decision of ['deny', 'hold', 'escalate'] as const) {
    t.equal(decisionOf(response({ decision }), 'docs.read').decision, false, `${decision} is false`);
  }
  const held = decisionOf(response({ decision: 'hold', approval_request_id: 'apr-1', remediation: [{ code: 'WAIT', message: 'wait' }] }), 'docs.read');
  t.match(held.context, { decision: 'hold', approval_request_id: 'apr-1', remediation: [{ code: 'WAIT' }] });
  t.match(decisionOf(response({ decision: 'escalate', escalation_id: 'esc-1' }), 'docs.read').context, { escalation_id: 'esc-1' });
  t.same(errorDecisionOf(new CountersignError('conflict', 'used')), { decision: false, context: { error: { status: 409, code: 'conflict', message: 'used' } } });
});

t.test('where each semantic stops', async (t) => {
  const yes = { decision: true, context: errorDecisionOf(new CountersignError('conflict')).context };
  const no = errorDecisionOf(new CountersignError('conflict'));
  t.same([stopsAfter('execute_all', yes), stopsAfter('execute_all', no)], [false, false]);
  t.same([stopsAfter('deny_on_first_deny', yes), stopsAfter('deny_on_first_deny', no)], [false, true]);
  t.same([stopsAfter('permit_on_first_permit', yes), stopsAfter('permit_on_first_permit', no)], [true, false]);
});
