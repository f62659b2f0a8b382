/**
 * The AuthZEN mapping without a server: an access evaluation as an evaluate request (entities
 * into the context, the resource as the bound target, evaluate's validation), a batch with its
 * defaults (an entry's key replaces the default as a whole), the wire schema's refusals, the
 * answer built from an evaluate response (only named fields, so never a permit), and where each
 * semantic stops.
 *
 * @example
 *   npx tap --disable-coverage test/unit/authzen-mapping.test.ts
 */
import t from 'tap';
import { decisionOf, errorDecisionOf, planEvaluations, stopsAfter, toEvaluateRequest } from '../../authority/authzen/mapping.js';
import { CountersignError } from '../../shared/errors.js';
import { AuthzenEvaluationRequest, AuthzenEvaluationsRequest, MAX_AUTHZEN_EVALUATIONS } from '../../shared/wire/authzen.js';
import { bindingHash, boundFacts } from '../../shared/permits/binding.js';
import type { EvaluateResponse } from '../../shared/wire/evaluate.js';

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

t.test('the wire schema refuses what evaluate would, and the keys the entities fill', async (t) => {
  const paths = (body: unknown, schema: typeof AuthzenEvaluationRequest | typeof AuthzenEvaluationsRequest = AuthzenEvaluationRequest) => {
    const parsed = schema.safeParse(body);
    return parsed.success ? [] : parsed.error.issues.map((issue) => issue.path.join('.'));
  };
  t.same(paths({ subject, action, resource }), [], 'a good request');
  t.same(paths({ subject, action: { name: 'Read Documents' }, resource }), ['action.name'], 'action.name follows action_type\'s rules');
  t.same(paths({ subject: { ...subject, id: '' }, action, resource }), ['subject.id']);
  t.same(paths({ subject, action, resource, context: { amount_usd: -1 } }), ['context.amount_usd'], 'the context follows evaluate\'s');
  t.same(paths({ subject, action, resource: { ...resource, owner: 'bob' } }), ['resource'], 'entities are strict: extra attributes go in properties');
  for (const key of ['subject', 'action', 'resource', 'target']) {
    t.same(paths({ subject, action, resource, context: { [key]: { type: 'document', id: 'other.md' } } }), [`context.${key}`], `context.${key} is refused`);
  }
  t.same(paths({ evaluations: [{ subject, action, resource }] }, AuthzenEvaluationsRequest), [], 'a batch without defaults');
  t.same(paths({ subject, evaluations: [{ action, resource }, { action }] }, AuthzenEvaluationsRequest), ['evaluations.1.resource'], 'an entry must end up complete');
  t.same(paths({ subject, action }, AuthzenEvaluationsRequest).sort(), ['resource'], 'no entries: the top level is the evaluation');
  t.same(paths({ subject, action, resource, evaluations: Array.from({ length: MAX_AUTHZEN_EVALUATIONS + 1 }, () => ({})) }, AuthzenEvaluationsRequest), ['evaluations'], 'bounded');
  t.same(paths({ subject, action, resource, options: { evaluations_semantic: 'execute_all', page_size: 3 } }, AuthzenEvaluationsRequest), [], 'unknown options are ignored');
});

t.test('a batch: the top-level keys are defaults, replaced as a whole', async (t) => {
  const request = AuthzenEvaluationsRequest.parse({
    subject,
    action,
    context: { time: 'noon', channel: 'web' },
    options: { evaluations_semantic: 'deny_on_first_deny' },
    evaluations: [{ resource }, { resource: { type: 'document', id: 'other.md' }, context: { time: 'night' } }, { resource, action: { name: 'documents.write' } }],
  });
  const plan = planEvaluations(request);
  if (plan.form !== 'batch') throw new Error('expected a batch');
  t.equal(plan.semantic, 'deny_on_first_deny');
  t.same(plan.evaluations, [
    { subject, action, resource, context: { time: 'noon', channel: 'web' } },
    { subject, action, resource: { type: 'document', id: 'other.md' }, context: { time: 'night' } },
    { subject, action: { name: 'documents.write' }, resource, context: { time: 'noon', channel: 'web' } },
  ]);
  t.match(planEvaluations(AuthzenEvaluationsRequest.parse({ subject, action, resource, evaluations: [] })), { form: 'single', evaluation: { subject, action, resource } }, 'an empty list is the single form');
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
  const allow = decisionOf(response({}));
  t.same(allow, {
    decision: true,
    context: { decision: 'allow', reason_codes: ['OK'], request_id: 'req-1', evaluation_id: 'ev-1', mode: 'live', risk_score: 0.1, human_approval_status: 'not_required' },
  });
  t.notMatch(JSON.stringify(allow), /permit|eyJ/, 'a permit handed to it never reaches the answer');
  for (const decision of ['deny', 'hold', 'escalate'] as const) {
    t.equal(decisionOf(response({ decision })).decision, false, `${decision} is false`);
  }
  const held = decisionOf(response({ decision: 'hold', approval_request_id: 'apr-1', remediation: [{ code: 'WAIT', message: 'wait' }] }));
  t.match(held.context, { decision: 'hold', approval_request_id: 'apr-1', remediation: [{ code: 'WAIT' }] });
  t.match(decisionOf(response({ decision: 'escalate', escalation_id: 'esc-1' })).context, { escalation_id: 'esc-1' });
  t.same(errorDecisionOf(new CountersignError('conflict', 'used')), { decision: false, context: { error: { status: 409, code: 'conflict', message: 'used' } } });
});

t.test('where each semantic stops', async (t) => {
  const yes = { decision: true, context: errorDecisionOf(new CountersignError('conflict')).context };
  const no = errorDecisionOf(new CountersignError('conflict'));
  t.same([stopsAfter('execute_all', yes), stopsAfter('execute_all', no)], [false, false]);
  t.same([stopsAfter('deny_on_first_deny', yes), stopsAfter('deny_on_first_deny', no)], [false, true]);
  t.same([stopsAfter('permit_on_first_permit', yes), stopsAfter('permit_on_first_permit', no)], [true, false]);
});
