/**
 * Every input is bounded at the edge (crafted input once gave 500, and a deeply nested context
 * broke the organization's audit export): numbers that overflow to Infinity, lone surrogates, NUL,
 * JSON nested past the depth limit, in bodies, keys, queries and cursors, are 400
 * `invalid_request` with the field's path, on PGlite and on Postgres; nothing of them is stored;
 * and what is accepted at the limit can still be exported and proved.
 */
import t from 'tap';
import { ErrorEnvelope } from '../../shared/wire/envelope.js';
import { inputProblem } from '../../authority/http/bounded-input.js';
import { encodePageCursor } from '../../authority/http/page-cursor.js';
import { appBackends } from '../helpers/backends.js';
import { withTestAuthority, type TestAuthority } from '../helpers/authority.js';

const nested = (depth: number): unknown => {
  let value: unknown = 'leaf';
  for (let i = 0; i < depth; i++) value = { n: value };
  return value;
};

t.test('inputProblem names the first bad field', async (t) => {
  t.same(inputProblem({ a: [1, 'x\u0000'] }, 'body', 32), { path: 'body.a.1', message: 'text must not contain NUL' });
  t.match(inputProblem({ a: '\uD800' }, 'body', 32), { path: 'body.a', message: /lone surrogates/ });
  t.match(inputProblem({ a: '\uDC00x' }, 'body', 32), { path: 'body.a' }, 'a low surrogate alone');
  t.equal(inputProblem({ a: '\uD83D\uDE00' }, 'body', 32), null, 'a surrogate pair is well-formed');
  t.match(inputProblem({ a: '\uDE00\uD83D' }, 'body', 32), { path: 'body.a', message: /lone surrogates/ }, 'a pair in the wrong order');
  for (const [name, value] of [['a Buffer', Buffer.from('x')], ['a Date', new Date(0)], ['a Map', new Map()], ['a Set', new Set()]] as const) {
    t.same(inputProblem({ a: [value] }, 'body', 32), { path: 'body.a.0', message: 'a value must be text, a number, a boolean, null, a list or a mapping' }, `${name} is no JSON value`);
  }
  const routerParams = Object.assign(Object.create(Object.create(null) as object) as object, { id: 'x' });
  t.equal(inputProblem(routerParams, 'params', 2), null, 'an ordinary object of another prototype (the router\'s params) is one');
  t.match(inputProblem({ ['k\u0000']: 1 }, 'body', 32), { message: /a key/ });
  t.same(inputProblem({ a: Infinity }, 'body', 32), { path: 'body.a', message: 'numbers must be finite' });
  t.equal(inputProblem(nested(31), 'body', 32), null, '32 levels (the leaf object included) pass');
  t.match(inputProblem(nested(33), 'body', 32), { message: /deeper than 32/ });
});

const json = (authority: TestAuthority) => ({ ...authority.bearer(authority.acmeAdmin), 'content-type': 'application/json' });

for (const backend of appBackends()) {
  t.test(`crafted input is 400 with the field's path, and nothing is stored, on ${backend.name}`, (t) =>
    withTestAuthority(t, backend, async (authority) => {
      const evaluate = (payload: string) => authority.app.inject({ method: 'POST', url: '/v1/evaluate', headers: json(authority), payload });
      const base = (context: string) => `{"action_type":"demo.echo","actor_id":"demo-agent","context":${context}}`;
      const cases: Array<[string, string, string]> = [
        ['1e999 in the context', base('{"amount_usd":1e999}'), 'body.context.amount_usd'],
        ['a lone surrogate', base('{"note":"\\ud800"}'), 'body.context.note'],
        ['NUL in a value', base('{"note":"a\\u0000b"}'), 'body.context.note'],
        ['NUL in a key', base('{"a\\u0000":1}'), 'body.context.a\u0000'],
        ['5,000 levels of nesting', base(`${'{"n":'.repeat(5000)}1${'}'.repeat(5000)}`), 'body.context'],
      ];
      for (const [name, payload, path] of cases) {
        const response = await evaluate(payload);
        t.equal(response.statusCode, 400, name);
        const envelope = ErrorEnvelope.parse(response.json());
        t.equal(envelope.error, 'invalid_request', `${name}: invalid_request`);
        t.ok(envelope.details?.[0]?.path.startsWith(path), `${name}: the path names the field (${envelope.details?.[0]?.path})`);
      }
      const key = await authority.app.inject({ method: 'POST', url: '/v1/api-keys', headers: json(authority), payload: '{"name":"k\\u0000","scopes":["audit:read"]}' });
      t.equal(key.statusCode, 400, 'NUL in a key name');
      const effect = await authority.app.inject({ method: 'POST', url: '/v1/effects', headers: json(authority), payload: '{"permit_id":"x","summary":"\\udfff"}' });
      t.equal(effect.statusCode, 400, 'a lone surrogate in an effect summary');

      for (const url of [
        '/v1/permits?actor_id=%00',
        '/v1/audit/events?type=%ED%A0%80',
        `/v1/permits?cursor=${encodePageCursor(new Date(Date.UTC(-200000, 0, 1)), 'AAAAAAAAAAAAAAAAAAAAAA')}`,
        `/v1/permits?cursor=${Buffer.from('2026-01-01T00:00:00.000Z|not a permit id').toString('base64url')}`,
        `/v1/approvals?cursor=${encodePageCursor(new Date(), 'not-a-uuid')}`,
        `/v1/approvals?cursor=${encodePageCursor(new Date(Date.UTC(20000, 0, 1)), '00000000-0000-4000-8000-000000000000')}`,
      ]) {
        const response = await authority.app.inject({ method: 'GET', url, headers: authority.bearer(authority.acmeAdmin) });
        t.equal(response.statusCode, 400, `GET ${url}`);
        t.equal(ErrorEnvelope.parse(response.json()).error, 'invalid_request');
      }

      // Nothing of the refused requests reached the chain, and what is at the limit is accepted and exported.
      const deep = await evaluate(JSON.stringify({ action_type: 'demo.echo', actor_id: 'demo-agent', context: { environment: 'dev', target: { type: 'demo', id: 'deep' }, extra: nested(29) } }));
      t.equal(deep.statusCode, 200, 'a context 32 levels deep is accepted');
      const exported = await authority.app.inject({ method: 'POST', url: '/v1/audit/exports', headers: json(authority), payload: {} });
      t.equal(exported.statusCode, 200, 'the export still works');
      const events = exported.json().events as Array<{ type: string }>;
      t.equal(events.filter((event) => event.type === 'evaluation.decided').length, 1, 'only the accepted evaluation is on the record');
      const proof = await authority.app.inject({ method: 'GET', url: `/v1/permits/${deep.json().permit_id}/proof`, headers: authority.bearer(authority.acmeAdmin) });
      t.equal(proof.statusCode, 200, 'and its proof');
    }),
  );
}
