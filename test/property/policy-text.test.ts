/**
 * Generated policy text never gets a 5xx: policy documents shaped like real ones, whose every slot
 * may hold arbitrary text (lone and reversed surrogates and NUL among it, written as YAML or JSON
 * escapes, or raw), an arbitrary YAML scalar (numbers past the double range, tags, aliases, deep
 * nesting, keys that are not text), sent over real loopback HTTP to `PUT /v1/policies` and
 * `POST /v1/policies/validate` as YAML, as JSON text and in the document form. Every answer is a
 * 200, or a 4xx in the error envelope, and one the OpenAPI document describes.
 */
import fc from 'fast-check';
import t from 'tap';
import { ErrorEnvelope } from '../../shared/wire/envelope.js';
import { PolicyValidationResponse } from '../../shared/wire/policies.js';
import { withTestAuthority } from '../helpers/authority.js';
import { appBackends } from '../helpers/backends.js';
import { loopbackApi } from '../helpers/loopback-api.js';

const RUNS = 300;

/** Any UTF-16 code units: lone surrogates, pairs in either order and NUL come up often. */
const anyText = fc.oneof(
  fc.string({ unit: fc.integer({ min: 0, max: 0xffff }).map((code) => String.fromCharCode(code)), maxLength: 12 }),
  fc.constantFrom('\uDE00\uD83D', '\uD800', '\uDFFF', 'a\u0000b', '\uD83D\uDE00', '', 'plain'),
);

/** YAML scalars and fragments that parse into something other than plain text, or not at all. */
const rawYaml = fc.constantFrom(
  '1e999', '-1e999', '.inf', '.nan', '~', 'null', 'true', '0x1F', '123456789012345678901234567890',
  '!!binary aGVsbG8=', '!!timestamp 2001-12-14', '!!set { a, b }', '!!omap [ a: 1 ]', '!!str 12', '!foo bar',
  '*nowhere', '&anchor x', '"\\uDE00\\uD83D"', '"\\0"', '"\\uD800"', '[]', '{}', `${'['.repeat(40)}${']'.repeat(40)}`,
  '{ ? [a, b] : 1 }', '{ 1: x, ~: y }', '[*a, *a]', '|\n  block\n', "'it''s'",
);

/** JSON's string escapes are YAML's too: a lone surrogate is written as \udxxx, NUL as \u0000. */
const escaped = anyText.map((text) => JSON.stringify(text));
/** Raw in the text (single-quoted): the API refuses such a body before the policy is parsed. */
const raw = anyText.map((text) => `'${text.replaceAll("'", "''").replace(/[\n\r]/g, ' ')}'`);

/** A slot the document's structure depends on: mostly what fits it, so that many documents are valid. */
const structural = (...fits: string[]) =>
  fc.oneof({ weight: 12, arbitrary: fc.constantFrom(...fits) }, { weight: 1, arbitrary: escaped }, { weight: 1, arbitrary: rawYaml });
/** A slot of free text (names, descriptions, messages): where hostile text is stored when let through. */
const freeText = fc.oneof(
  { weight: 1, arbitrary: fc.constantFrom('a description', '"text"') },
  { weight: 4, arbitrary: escaped },
  { weight: 1, arbitrary: raw },
  { weight: 1, arbitrary: rawYaml },
);

const yamlPolicy = fc
  .record({
    version: structural('1'),
    name: freeText,
    group: structural('ops', '"ops"'),
    member: structural('a', 'finance-bot'),
    classId: structural('tools', 'payments'),
    pattern: structural('tools.*', 'payments.wire'),
    when: structural('"true"', '"context.x == \\"a\\""'),
    decision: structural('allow', 'deny', 'hold', 'escalate'),
    ruleId: structural('r1'),
    reason: structural('RULE_MATCHED', 'R'),
    lifetime: structural('60', '1', '300'),
    base: structural('0.5', '0'),
    weight: structural('0.5', '-0.5', '0'),
    mode: structural('mode'),
    text: freeText,
  })
  .map(
    (s) => `version: ${s.version}
name: ${s.name}
description: ${s.text}
actor_groups:
  ${s.group}: [${s.member}]
action_classes:
  - id: ${s.classId}
    description: ${s.text}
    match: { action_type: ${s.pattern}, when: ${s.when} }
    actors: ['*', ${s.member}]
    default: ${s.decision}
    ${s.mode}: live
    permit: { lifetime_seconds: ${s.lifetime} }
    risk:
      base: ${s.base}
      factors: [{ name: ${s.ruleId}, when: ${s.when}, weight: ${s.weight}, description: ${s.text} }]
    rules:
      - { id: ${s.ruleId}, description: ${s.name}, when: ${s.when}, decision: ${s.decision}, reason: ${s.reason}, remediation: { code: ${s.reason}, message: ${s.text} } }
`,
  );

/** The same shape as a JS value: JSON text and the document form carry its strings escaped. */
const documentPolicy = fc.record({
  version: fc.oneof(fc.constant(1), fc.jsonValue()),
  name: anyText,
  actor_groups: fc.oneof(fc.constant({}), fc.dictionary(anyText, fc.array(anyText, { maxLength: 2 }), { maxKeys: 2 })),
  action_classes: fc.array(
    fc.record({
      id: fc.oneof(fc.constant('tools'), anyText),
      description: anyText,
      match: fc.record({ action_type: fc.oneof(fc.constant('tools.*'), anyText) }),
      actors: fc.constant(['*']),
      default: fc.constantFrom('allow', 'deny'),
      rules: fc.array(fc.record({ id: fc.constant('r1'), when: fc.oneof(fc.constant('true'), anyText), decision: fc.constant('deny'), reason: fc.constant('R'), description: anyText }), { maxLength: 1 }),
    }),
    { maxLength: 2 },
  ),
});

const submission = fc.oneof(
  { weight: 3, arbitrary: yamlPolicy.map((source) => ({ source, format: 'yaml' })) },
  { weight: 1, arbitrary: documentPolicy.map((document) => ({ source: JSON.stringify(document), format: 'json' })) },
  { weight: 1, arbitrary: documentPolicy.map((document) => ({ document })) },
);

t.test('generated policy text to PUT /v1/policies and validate over HTTP: never a 5xx, 4xx in the envelope', (t) =>
  withTestAuthority(t, appBackends()[0]!, async (authority) => {
    const { call, problems } = await loopbackApi(authority);
    const statuses: Record<string, number> = {};
    let answered = 0;
    await fc.assert(
      fc.asyncProperty(submission, async (body) => {
        for (const [method, url] of [['PUT', '/v1/policies'], ['POST', '/v1/policies/validate']] as const) {
          const reply = await call(method, url, { body });
          answered += 1;
          statuses[`${method} ${reply.status}`] = (statuses[`${method} ${reply.status}`] ?? 0) + 1;
          if (reply.status >= 500) throw new Error(`${method} ${url} answered ${reply.status}: ${reply.text}`);
          if (reply.status >= 400) ErrorEnvelope.parse(reply.body);
          else if (method === 'POST') PolicyValidationResponse.parse(reply.body);
        }
      }),
      { numRuns: RUNS },
    );
    t.equal(answered, 2 * RUNS, `${2 * RUNS} requests answered without a 5xx`, { statuses });
    t.ok(statuses['PUT 200'], 'some generated policies were valid and stored', { statuses });
    t.same(problems, [], 'every answer is one the OpenAPI document describes');
  }),
);
