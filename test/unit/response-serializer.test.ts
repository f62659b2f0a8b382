/**
 * The authority's response serializer: answers are checked against their zod schema with zod's
 * `parse` where that gives what `encode` gives (fastify-type-provider-zod's serializer, which it
 * replaces on the hot path), and with `encode` where a schema has a part whose encoding differs.
 * Either way an answer that breaks the contract is a ResponseSerializationError, never sent.
 */
import { serializerCompiler } from 'fastify-type-provider-zod';
import t from 'tap';
import { z } from 'zod';
import { encodeDiffersFromParse, responseSerializerCompiler } from '../../authority/http/response-serializer.js';
import { EvaluateResponse } from '../../shared/wire/evaluate.js';

const route = { method: 'POST', url: '/v1/evaluate', httpStatus: '200' };
/** fastify-type-provider-zod's ResponseSerializationError, for the route: what the error handler answers 500. */
const serializationError = { code: 'FST_ERR_RESPONSE_SERIALIZATION', method: route.method, url: route.url };

function evaluateAnswer(): EvaluateResponse {
  const risk = { score: 0.05, base: 0.05, band: 'low' as const, factors: [{ name: 'environment', weight: 0, description: 'dev' }] };
  return {
    decision: 'allow',
    authorization_state: { permit_requirement: 'required', permit_status: 'present', verification_status: 'not_verified' },
    request_id: 'req-1',
    evaluation_id: '6f1c2a7e-3b1d-4f55-9a0e-0c2b7d9e8f10',
    mode: 'live',
    human_approval_required: false,
    human_approval_status: 'not_required',
    expires_at: '2026-11-28T08:00:00.000Z',
    permit_expires_at: '2026-11-28T08:00:00.000Z',
    risk_score: 0.05,
    risk_envelope: risk,
    decisionObject: {
      decision: 'allow',
      reason_codes: ['DEFAULT_ALLOW'],
      action_class: 'demo',
      matched_rules: ['demo-echo'],
      policy: { id: 'p1', version: 1 },
      binding_hash: 'b'.repeat(43),
      bound_facts: ['action_type', 'actor_id', 'environment', 'target'],
      risk_envelope: risk,
      approvals: [],
    },
    permit_token: 'eyJ.eyJ.sig',
    permit_id: 'prm_1',
  };
}

t.test("evaluate's answer is checked with parse and gives the text the encoding serializer gives", async (t) => {
  t.equal(encodeDiffersFromParse(EvaluateResponse), false, 'EvaluateResponse has no part whose encoding differs');
  const answer = Object.assign(evaluateAnswer(), { not_in_the_contract: 'dropped' });
  const text = responseSerializerCompiler({ schema: EvaluateResponse, ...route })(answer);
  t.equal(text, serializerCompiler({ schema: EvaluateResponse, ...route })(answer));
  t.notMatch(text, /not_in_the_contract/, 'a key outside the contract is not sent');
  t.same(JSON.parse(text), evaluateAnswer());
});

t.test('an answer that breaks the contract is a ResponseSerializationError', async (t) => {
  const serialize = responseSerializerCompiler({ schema: EvaluateResponse, ...route });
  t.throws(() => serialize(Object.assign(evaluateAnswer(), { decision: 'maybe' })), serializationError, 'a value outside an enum');
  t.throws(() => serialize({ decision: 'allow' }), serializationError, 'missing fields');
});

t.test('a schema with a part whose encoding differs keeps encode', async (t) => {
  const differs = {
    transform: z.object({ a: z.string().transform((value) => value.length) }),
    pipe: z.object({ a: z.array(z.string().pipe(z.string().min(1))) }),
    default: z.object({ a: z.number().default(1) }),
    prefault: z.object({ a: z.string().prefault('x') }),
    catch: z.union([z.object({ a: z.number().catch(0) }), z.null()]),
    'an overwriting check (trim)': z.object({ a: z.string().trim() }),
    lazy: z.object({ a: z.lazy(() => z.string()) }),
    'a record of them': z.record(z.string(), z.object({ n: z.number().default(0) })),
  };
  for (const [name, schema] of Object.entries(differs)) t.equal(encodeDiffersFromParse(schema), true, name);

  // The same verdict as fastify-type-provider-zod's: encoding does not fill a default in.
  const serialize = responseSerializerCompiler({ schema: differs.default, ...route });
  t.throws(() => serialize({}), serializationError, 'ours');
  t.throws(() => serializerCompiler({ schema: differs.default, ...route })({}), serializationError, "fastify-type-provider-zod's");
  t.equal(serialize({ a: 2 }), '{"a":2}');
});

t.test('a schema of plain parts is checked with parse', async (t) => {
  const plain = z.object({
    a: z.string().min(1).nullable().optional(),
    b: z.union([z.literal('x'), z.number().int()]),
    c: z.record(z.string(), z.array(z.boolean())),
    d: z.tuple([z.string(), z.enum(['one', 'two'])]),
    e: z.discriminatedUnion('kind', [z.object({ kind: z.literal('k'), v: z.string().regex(/^v/) })]),
  });
  t.equal(encodeDiffersFromParse(plain), false);
  const value = { a: null, b: 'x', c: { k: [true] }, d: ['s', 'one'], e: { kind: 'k', v: 'v1' } };
  t.equal(responseSerializerCompiler({ schema: plain, ...route })(value), serializerCompiler({ schema: plain, ...route })(value));
});

t.test('a route whose response schema is not zod fails when it is compiled, at start-up', async (t) => {
  t.throws(() => responseSerializerCompiler({ schema: { type: 'object' }, ...route }), TypeError);
});
