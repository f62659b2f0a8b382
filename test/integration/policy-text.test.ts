/**
 * Policy text the API refuses, over real loopback HTTP, on PGlite and on Postgres: text that
 * parses into what the API refuses as input (lone or reversed surrogates and NUL made by escapes,
 * in values and keys; numbers past the double range; nesting past 32 levels or past what the
 * parser can follow), keys that are not text, YAML tags that make no JSON value, alias bombs,
 * duplicate keys, and documents that are a scalar, a list or several. `PUT /v1/policies` answers
 * 400 `invalid_request` in the envelope with the path (and position) of the bad field and stores
 * nothing (no version, no `policy.updated` event); `POST /v1/policies/validate` reports the same
 * error. A surrogate pair in order is text like any other and is stored.
 */
import t from 'tap';
import { ErrorEnvelope } from '../../shared/wire/envelope.js';
import { PolicyResponse, PolicyValidationResponse } from '../../shared/wire/policies.js';
import { withTestAuthority, type TestAuthority } from '../helpers/authority.js';
import { appBackends } from '../helpers/backends.js';
import { loopbackApi } from '../helpers/loopback-api.js';

/** A valid policy with `name` spliced in as YAML, and more top-level YAML after it. */
const policy = (name: string, more = '') => `version: 1
name: ${name}
action_classes:
  - id: tools
    match: { action_type: tools.* }
    actors: ['*']
    default: allow
${more}`;

const deep = (depth: number) => `${'['.repeat(depth)}${']'.repeat(depth)}`;
const laughs = ['a: &a [x, x, x, x, x, x, x, x, x]', ...'bcdefgh'.split('').map((name, i) => `${name}: &${name} [${Array(9).fill(`*${'abcdefgh'[i]}`).join(', ')}]`)].join('\n');

interface Refused {
  name: string;
  source: string;
  format?: 'yaml' | 'json';
  /** The path of the first error. */
  path: string;
  message: RegExp;
  /** Its line, when the case pins it. */
  line?: number;
}

const REFUSED: Refused[] = [
  { name: 'a reversed surrogate pair ("\\uDE00\\uD83D")', source: policy('"\\uDE00\\uD83D"'), path: 'name', message: /well-formed Unicode/, line: 2 },
  { name: 'a lone high surrogate', source: policy('"x\\uD83D"'), path: 'name', message: /well-formed Unicode/ },
  { name: 'a lone low surrogate in a condition', source: policy('t', '    rules:\n      - { id: r, when: "context.s == \\"\\uDC00\\"", decision: deny, reason: R }\n'), path: 'action_classes.0.rules.0.when', message: /well-formed Unicode/ },
  { name: 'NUL in a value', source: policy('"a\\0b"'), path: 'name', message: /NUL/ },
  { name: 'NUL in a key', source: policy('t', 'actor_groups:\n  "ops\\0": [a]\n'), path: 'actor_groups.ops\u0000', message: /^a key: text must not contain NUL/, line: 9 },
  { name: 'a reversed surrogate pair in a key', source: policy('t', 'actor_groups:\n  "\\uDE00\\uD83D": [a]\n'), path: 'actor_groups.\uDE00\uD83D', message: /^a key: .*well-formed Unicode/ },
  { name: 'a number past the double range (1e999)', source: policy('t', 'defaults:\n  permit:\n    lifetime_seconds: 1e999\n'), path: 'defaults.permit.lifetime_seconds', message: /finite/, line: 10 },
  { name: 'an infinite number (.inf)', source: policy('t', 'defaults:\n  permit:\n    lifetime_seconds: .inf\n'), path: 'defaults.permit.lifetime_seconds', message: /finite/ },
  { name: 'flow nesting past 32 levels', source: policy('t', `description: ${deep(40)}\n`), path: `description${'.0'.repeat(31)}`, message: /deeper than 32 levels/ },
  { name: 'block nesting past 32 levels', source: policy('t', Array.from({ length: 40 }, (_, i) => `${' '.repeat(2 * i)}k${i}:`).join('\n') + ' 1\n'), path: Array.from({ length: 32 }, (_, i) => `k${i}`).join('.'), message: /deeper than 32 levels/ },
  { name: 'nesting past what the parser can follow', source: policy('t', `description: ${deep(20_000)}\n`), path: '', message: /nested too deeply to read/ },
  { name: 'an alias bomb ("billion laughs")', source: policy('t', `${laughs}\n`), path: '', message: /alias/i },
  { name: 'a duplicate key', source: policy('t', 'name: again\n'), path: '', message: /unique/ },
  { name: 'a number as a key', source: policy('t', 'actor_groups:\n  1: [a]\n'), path: 'actor_groups.1', message: /a key must be text/, line: 9 },
  { name: 'null as a key', source: policy('t', 'actor_groups:\n  ~: [a]\n'), path: 'actor_groups.null', message: /a key must be text/ },
  { name: 'a list as a key', source: policy('t', 'actor_groups:\n  ? [a, b]\n  : [a]\n'), path: 'actor_groups.["a","b"]', message: /a key must be text/ },
  { name: 'a !!binary value', source: policy('!!binary aGVsbG8='), path: 'name', message: /a value must be text, a number, a boolean, null, a list or a mapping/ },
  { name: 'a !!timestamp value', source: policy('!!timestamp 2001-12-14'), path: 'name', message: /a value must be text/ },
  { name: 'a !!set value', source: policy('!!set { a, b }'), path: 'name', message: /a value must be text/ },
  { name: 'a document that is a scalar', source: 'just text\n', path: '', message: /a policy document is a mapping/ },
  { name: 'a document that is a list', source: '- version: 1\n', path: '', message: /a policy document is a mapping/ },
  { name: 'two documents', source: `${policy('t')}---\n${policy('u')}`, path: '', message: /multiple documents/ },
  { name: 'a lone surrogate escaped in JSON', format: 'json', source: '{"version": 1, "name": "\\udc00", "action_classes": []}', path: 'name', message: /well-formed Unicode/, line: 1 },
  { name: 'NUL escaped in a JSON key', format: 'json', source: '{"version": 1, "actor_groups": {"\\u0000": []}, "action_classes": []}', path: 'actor_groups.\u0000', message: /^a key: text must not contain NUL/ },
];

/** The organization's policy versions and policy.updated events: what a refused PUT must not add. */
async function records(authority: TestAuthority): Promise<{ versions: number; events: number }> {
  const [versions] = await authority.backend.db.query<{ n: number }>('SELECT count(*)::int AS n FROM policies WHERE org_id = $1', [authority.acme.id]);
  const [events] = await authority.backend.db.query<{ n: number }>("SELECT count(*)::int AS n FROM audit_events WHERE org_id = $1 AND type = 'policy.updated'", [authority.acme.id]);
  return { versions: versions!.n, events: events!.n };
}

for (const backend of appBackends()) {
  t.test(`policy text the API refuses is 400 with the bad field's path, and nothing is stored, on ${backend.name}`, (t) =>
    withTestAuthority(t, backend, async (authority) => {
      const { call, problems } = await loopbackApi(authority);
      const before = await records(authority);
      for (const refused of REFUSED) {
        const body = { source: refused.source, format: refused.format ?? 'yaml' };
        const put = await call('PUT', '/v1/policies', { body });
        t.equal(put.status, 400, `${refused.name}: PUT answers 400`);
        const envelope = ErrorEnvelope.safeParse(put.body);
        t.ok(envelope.success, `${refused.name}: in the error envelope`);
        if (!envelope.success) continue;
        t.equal(envelope.data.error, 'invalid_request', `${refused.name}: invalid_request`);
        const detail = envelope.data.details?.[0] as { path: string; message: string; line?: number } | undefined;
        t.equal(detail?.path, refused.path, `${refused.name}: the path names the field`);
        t.match(detail?.message, refused.message, `${refused.name}: the message says what is wrong (${detail?.message})`);
        if (refused.line !== undefined) t.equal(detail?.line, refused.line, `${refused.name}: at line ${refused.line}`);

        const validate = await call('POST', '/v1/policies/validate', { body });
        t.equal(validate.status, 200, `${refused.name}: validate answers`);
        const report = PolicyValidationResponse.parse(validate.body);
        t.equal(report.valid, false, `${refused.name}: validate says invalid`);
        t.equal(report.errors[0]?.path, refused.path, `${refused.name}: validate names the same field`);
      }
      t.same(await records(authority), before, 'no policy version and no policy.updated event was added');

      const document = await call('PUT', '/v1/policies', { raw: '{"document": {"version": 1, "name": "\\uDE00\\uD83D", "action_classes": []}}' });
      t.equal(document.status, 400, 'the document form with a reversed pair: 400 at the edge');
      t.equal(ErrorEnvelope.parse(document.body).details?.[0]?.path, 'body.document.name', 'with its path in the body');

      const paired = await call('PUT', '/v1/policies', { body: { source: policy('"\\uD83D\\uDE00 ok"') } });
      t.equal(paired.status, 200, 'a surrogate pair in order is accepted');
      t.equal((PolicyResponse.parse(paired.body).policy?.document as { name?: string }).name, '\u{1F600} ok', 'and stored as the text it escapes');
      t.same(await records(authority), { versions: before.versions + 1, events: before.events + 1 }, 'one version and one policy.updated event for it');
      t.same(problems, [], 'every answer is one the OpenAPI document describes');
    }),
  );
}
