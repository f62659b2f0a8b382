/**
 * splitPayload: the evaluation batch appends its events in SQL (migration 0009), which learns each
 * sequence only under the head lock. The two halves around the sequence must give back exactly
 * the canonical text the JS chain hashes, whatever the details hold.
 */
import t from 'tap';
import { computeEventHash, splitPayload } from '../../authority/audit/chain.js';
import type { NewAuditEvent } from '../../authority/audit/types.js';
import { canonicalJson } from '../../shared/canonical-json.js';

const event: NewAuditEvent = {
  orgId: '0b6f3c1e-1111-4222-8333-444455556666',
  type: 'evaluation.decided',
  actorId: 'demo-agent',
  decision: 'allow',
  resourceType: 'evaluation',
  resourceId: 'e1',
  requestId: 'r1',
  credential: 'api_key:k1',
  occurredAt: new Date('2026-11-22T10:00:00.000Z'),
  // Text that looks like the split point, nested where it must not be taken for it.
  details: { note: ',"sequence":0,"type":"x"}', nested: { sequence: 0, type: 'evaluation.decided' }, é: 'ünïcode' },
};

t.test('before + sequence + after is the canonical payload the chain hashes', async (t) => {
  const id = '7a1c0f54-0000-4000-8000-000000000001';
  const recorded = '2026-11-22T10:00:01.000Z';
  const { before, after } = splitPayload(event, id, recorded);
  for (const sequence of [1, 9, 10, 123_456_789]) {
    const expected = canonicalJson({
      id,
      org_id: event.orgId,
      sequence,
      type: event.type,
      actor_id: event.actorId,
      decision: event.decision,
      resource_type: event.resourceType,
      resource_id: event.resourceId,
      request_id: event.requestId,
      credential: event.credential,
      occurred_at: event.occurredAt.toISOString(),
      recorded_at: recorded,
      details: event.details,
    });
    t.equal(before + String(sequence) + after, expected, `sequence ${sequence}`);
    t.equal(computeEventHash('0'.repeat(64), JSON.parse(before + String(sequence) + after)), computeEventHash('0'.repeat(64), JSON.parse(expected)));
  }
});
