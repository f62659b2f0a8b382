/**
 * The SDK's audit calls with its event type names, over real loopback HTTP as the SDKs send them
 * (test/helpers/sdk-requests.ts): `evaluate.allow` and its siblings filter the list to
 * `evaluation.decided` events with that decision, mixed freely with our own names; an export with
 * the SDK's filters is the gap-free piece of the chain from the first matching event to the last,
 * and verifies offline. Runs on PGlite + the in-process store, and on Postgres + Redis when they
 * are available.
 */
import t from 'tap';
import { verifyAuditBundle } from '../../authority/audit/verify-bundle.js';
import { AuditBundle, AuditEventsResponse, AuditKeysResponse } from '../../shared/wire/audit.js';
import { ErrorEnvelope } from '../../shared/wire/envelope.js';
import { withTestAuthority } from '../helpers/authority.js';
import { appBackends } from '../helpers/backends.js';
import { SDK, sdkLoopback } from '../helpers/sdk-requests.js';

const demo = (id: string) => ({ environment: 'dev', target: { type: 'demo', id } });
const wire = (amount: number) => ({ environment: 'production', amount_usd: amount, account_code: 'OPS-001' });

for (const backend of appBackends()) {
  t.test(`the SDK's event type names filter the audit list and export, on ${backend.name}`, (t) =>
    withTestAuthority(t, backend, async (authority) => {
      const { send, problems } = await sdkLoopback(authority);
      const decisions = [
        await send(SDK.ts.evaluate('demo.echo', 'demo-agent', demo('a'))),
        await send(SDK.ts.evaluate('demo.echo', 'unknown-bot', demo('b'))),
        await send(SDK.ts.evaluate('payments.wire', 'finance-bot', wire(50_000))),
        await send(SDK.ts.evaluate('demo.echo', 'demo-agent', demo('c'))),
      ].map((reply) => reply.body.decision);
      t.same(decisions, ['allow', 'deny', 'hold', 'allow']);

      const list = async (types: string) => {
        const reply = await send(SDK.ts.listAuditEvents(types));
        t.equal(reply.status, 200, types);
        return AuditEventsResponse.parse(reply.body);
      };
      const allowed = await list('evaluate.allow');
      t.equal(allowed.total, 2, 'evaluate.allow: the two allows');
      t.ok(allowed.events.every((e) => e.type === 'evaluation.decided' && e.decision === 'allow'));
      t.same((await list('evaluate.deny,evaluate.hold')).events.map((e) => e.decision), ['deny', 'hold'], 'two aliases');
      t.equal((await list('evaluate.escalate')).total, 0, 'none escalated');
      const mixed = await list('evaluate.allow,permit.issued');
      t.same(mixed.events.map((e) => e.type), ['evaluation.decided', 'permit.issued', 'evaluation.decided', 'permit.issued'], 'with our own names');
      const both = await send({ method: 'GET', path: '/v1/audit/events?type=evaluation.decided&types=evaluate.deny' });
      t.equal(AuditEventsResponse.parse(both.body).total, 4, 'a plain type takes every decision');
      const typo = await send(SDK.ts.listAuditEvents('evaluate.maybe'));
      t.equal(typo.status, 400, 'an unknown name is refused, not an empty page');
      t.equal(ErrorEnvelope.parse(typo.body).error, 'invalid_request');

      const pem = AuditKeysResponse.parse((await send({ method: 'GET', path: '/v1/audit/keys' })).body).keys[0]!.public_key_pem;
      const exported = async (request: ReturnType<typeof SDK.py.createAuditExport>) => {
        const reply = await send(request);
        t.equal(reply.status, 200, JSON.stringify(request.body));
        t.same(verifyAuditBundle(JSON.parse(reply.text), pem).problems, [], 'the bundle verifies as a piece of the chain');
        return AuditBundle.parse(reply.body);
      };
      const denies = await exported(SDK.ts.createAuditExport({ types: 'evaluate.deny' }));
      t.same(denies.events.map((e) => e.decision), ['deny'], 'the deny alone: it is its own first and last match');
      const allows = await exported(SDK.py.createAuditExport('evaluate.allow'));
      t.equal(allows.events[0]!.decision, 'allow', 'from the first allow');
      t.equal(allows.events.at(-1)!.decision, 'allow', 'to the last');
      t.ok(allows.events.some((e) => e.decision === 'deny'), 'with the events between them');
      const sequences = allows.events.map((e) => e.sequence);
      t.same(sequences, sequences.map((_, i) => sequences[0]! + i), 'gap-free');
      const byActor = await exported(SDK.ts.createAuditExport({ types: 'evaluate.allow,evaluate.deny,evaluate.hold', actor_id: 'finance-bot' }));
      t.same(byActor.events.map((e) => e.actor_id), ['finance-bot'], 'actor_id narrows it');
      const none = await exported(SDK.ts.createAuditExport({ types: 'evaluate.escalate' }));
      t.equal(none.event_count, 0, 'nothing matches: an empty bundle');
      const later = await exported(SDK.ts.createAuditExport({ types: 'evaluate.allow', from: new Date(authority.clock.now() + 60_000).toISOString() }));
      t.equal(later.event_count, 0, 'from and to bound occurred_at');
      t.same(problems, [], 'every answer is one the OpenAPI document describes');
    }),
  );
}
