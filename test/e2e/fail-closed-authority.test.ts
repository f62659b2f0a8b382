/**
 * Fail closed without the authority, end to end on loopback (test/helpers/fail-closed-stack.ts: a
 * real authority, the proxy process, a recording upstream and a Redis of the test's own). With the
 * authority stopped, permits still verify with the proxy's cached keys (consume-once and the
 * records live in Redis), and once the authority is back its drain brings the records into the
 * audit log, each exactly once, and marks the permits consumed.
 *
 * Waiting is bounded polling only; no timing assertions. Needs `redis-server`; without it the
 * test says so and passes.
 *
 * @example
 *   npx tap --disable-coverage test/e2e/fail-closed-authority.test.ts
 */
import t from 'tap';
import { request } from 'undici';
import { AuditEventsResponse } from '../../shared/wire/audit.js';
import { PermitResponse } from '../../shared/wire/permits.js';
import { eventually, setUp, sleep } from '../helpers/fail-closed-stack.js';

// Redis servers, an authority and proxies stopped and started again: longer than .taprc's
// two minutes per file while the other test files keep a 2-core machine busy.
t.setTimeout(6 * 60_000);

t.test('authority stopped: permits verify with the cached keys; their records reach the audit log once it is back', async (t) => {
  const s = await setUp(t);
  if (!s) return;

  const permits = [await s.permit('a-1'), await s.permit('a-2'), await s.permit('a-3')];
  await s.authority.close();
  await t.rejects(request(`${s.authority.apiUrl}/healthz`), 'the authority is down');

  for (const [i, permit] of permits.entries()) {
    const response = await s.send(`/echo/a-${i + 1}`, permit.token);
    t.equal(response.status, 200, `permit ${i + 1} verified with the cached keys`);
  }
  t.same(s.upstream.received, ['POST /echo/a-1', 'POST /echo/a-2', 'POST /echo/a-3'], 'the upstream got the 3 requests');
  const replay = await s.send('/echo/a-1', permits[0]!.token);
  t.equal(replay.status, 403, 'consume-once holds without the authority');
  t.equal(s.upstream.received.length, 3, 'the replay did not reach the upstream');

  await s.startAuthority();
  const ids = new Set(permits.map((permit) => permit.id));
  type Event = AuditEventsResponse['events'][number];
  let events: Event[] = [];
  const relevant = () => events.filter((event) => event.resource_id !== null && ids.has(event.resource_id));
  const count = (type: string, id: string) => relevant().filter((event) => event.type === type && event.resource_id === id).length;
  await eventually(
    'the drain to record 3 permit.verified and 3 execution.observed events',
    async () => {
      const response = await s.api('/v1/audit/events?types=permit.verified,execution.observed&limit=500');
      if (response.status !== 200) return false;
      events = AuditEventsResponse.parse(response.body).events;
      return [...ids].every((id) => count('permit.verified', id) >= 1 && count('execution.observed', id) >= 1);
    },
    20_000,
    250,
  );
  // Give the drain (every second) another run or two: it must not add duplicates. A wait, not a
  // timing assertion.
  await sleep(2_500);
  const again = await s.api('/v1/audit/events?types=permit.verified,execution.observed&limit=500');
  t.equal(again.status, 200, 'GET /v1/audit/events');
  events = AuditEventsResponse.parse(again.body).events;
  for (const id of ids) {
    t.equal(count('permit.verified', id), 1, `permit ${id}: one permit.verified event`);
    t.equal(count('execution.observed', id), 1, `permit ${id}: one execution.observed event`);
  }
  t.equal(relevant().filter((event) => event.type === 'permit.verified').length, 3, '3 permit.verified events in all');
  t.equal(relevant().filter((event) => event.type === 'execution.observed').length, 3, '3 execution.observed events in all');

  for (const id of ids) {
    const response = await s.api(`/v1/permits/${id}`);
    t.equal(response.status, 200, `GET /v1/permits/${id}`);
    t.equal(PermitResponse.parse(response.body).permit.status, 'consumed', `permit ${id} is consumed`);
  }
});
