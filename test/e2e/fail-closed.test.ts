/**
 * Fail closed when the replay store fails, end to end on loopback (test/helpers/fail-closed-stack.ts:
 * a real authority, the proxy process, a recording upstream and a Redis of the test's own):
 *
 * - Redis stopped: a request with a valid permit gets 503 `gate_unavailable` and the upstream is
 *   not reached; Redis back: requests with fresh permits work again.
 * - Redis emptied: permits issued before the loss are refused as `REPLAY_STATE_RESET` (used,
 *   revoked or not), and permits issued after it work.
 * - Redis paused past the gate's timeout: 503, and the stalled consume, landing late, leaves the
 *   permit usable.
 *
 * Waiting is bounded polling only; no timing assertions. Needs `redis-server`; without it the
 * test says so and passes.
 *
 * @example
 *   npx tap --disable-coverage test/e2e/fail-closed.test.ts
 */
import t from 'tap';
import { Redis } from 'ioredis';
import { request } from 'undici';
import { CountersignClient } from '../../shared/client/client.js';
import { AuditEventsResponse } from '../../shared/wire/audit.js';
import { PermitResponse } from '../../shared/wire/permits.js';
import { eventually, redisPing, setUp } from '../helpers/fail-closed-stack.js';

// Redis servers, an authority and proxies stopped and started again: longer than .taprc's
// two minutes per file while the other test files keep a 2-core machine busy.
t.setTimeout(6 * 60_000);

t.test('Redis stopped: 503 gate_unavailable and the upstream is not reached; Redis back: works again', async (t) => {
  const s = await setUp(t);
  if (!s) return;

  const before = await s.permit('before');
  const ok = await s.send('/echo/before', before.token);
  t.equal(ok.status, 200, 'with Redis up a permitted request is forwarded');
  t.same(s.upstream.received, ['POST /echo/before']);

  // Evaluated while Redis is up: the authority's evaluate needs Redis for its rate limits.
  const fresh = await s.permit('down');
  await s.redis.stop();
  t.notOk(await redisPing(s.redis.port), 'Redis is down');

  const refused = await s.send('/echo/down', fresh.token);
  t.equal(refused.status, 503, 'fail closed');
  t.match(refused.json(), { error: 'gate_unavailable', status: 503 });
  t.same(s.upstream.received, ['POST /echo/before'], 'the upstream received nothing');
  const notReady = await request(`${s.proxy.adminUrl}/readyz`);
  t.equal(notReady.statusCode, 503, 'the proxy is not ready without Redis');
  t.match(await notReady.body.json(), { checks: { keys: 'ok', store: 'unavailable' } });

  await s.redis.start();
  // Each attempt uses a new permit: the authority and the proxy reconnect on their own.
  let attempts = 0;
  let recovered: { id: string } | null = null;
  await eventually('a request through the proxy to succeed again', async () => {
    attempts += 1;
    let permit: { token: string; id: string };
    try {
      permit = await s.permit(`after-${attempts}`);
    } catch {
      return false; // the authority has not reconnected yet
    }
    const response = await s.send(`/echo/after-${attempts}`, permit.token);
    if (response.status === 200) {
      recovered = permit;
      return true;
    }
    t.equal(response.status, 503, `attempt ${attempts}: still failing closed while reconnecting`);
    return false;
  });
  t.ok(recovered, 'a fresh permit is accepted once Redis is back');
  t.comment(`recovered on attempt ${attempts}`);
  const ready = await request(`${s.proxy.adminUrl}/readyz`);
  t.equal(ready.statusCode, 200, 'ready again');
  await ready.body.dump();
  t.same(s.upstream.received, ['POST /echo/before', `POST /echo/after-${attempts}`], 'the upstream got that request exactly once, and none of the refused ones');
});

t.test('Redis emptied (FLUSHALL): used and revoked permits are refused as REPLAY_STATE_RESET, new ones work', async (t) => {
  const s = await setUp(t);
  if (!s) return;
  const used = await s.permit('used');
  t.equal((await s.send('/echo/used', used.token)).status, 200, 'the first use is forwarded');
  // The authority's own record of the use: verify-permit reads it before the store, so whether
  // the drain had brought it in before the loss would otherwise decide verify-permit's answer.
  await eventually('the drain to record the first use', async () => {
    const response = await s.api(`/v1/permits/${used.id}`);
    return response.status === 200 && PermitResponse.parse(response.body).permit.status === 'consumed';
  }, 20_000, 250);
  // Issued before the loss and never used: nothing but the store could say whether it was.
  const unused = await s.permit('unused');
  const revoked = await s.permit('revoked');
  const client = new CountersignClient({ baseUrl: s.authority.apiUrl, apiKey: s.adminKey });
  t.teardown(() => client.close());
  t.equal((await client.revokePermit(revoked.id, 'test')).status, 'revoked', 'revoked');

  // Everything the store held is lost, the epoch key with it.
  const flush = new Redis(s.redis.url, { maxRetriesPerRequest: 0 });
  t.teardown(() => flush.disconnect());
  t.equal(await flush.flushall(), 'OK');

  const replay = await s.send('/echo/used', used.token);
  t.equal(replay.status, 403, 'the replay is refused');
  t.match(replay.json(), { error: 'permit_rejected', reason: 'REPLAY_STATE_RESET' });
  const afterRevoke = await s.send('/echo/revoked', revoked.token);
  t.match(afterRevoke.json(), { error: 'permit_rejected', reason: 'REPLAY_STATE_RESET' }, 'the revoked permit is refused');
  t.same(s.upstream.received, ['POST /echo/used'], 'the upstream saw the used permit once and the revoked one never');

  t.match(await client.verifyPermit({ permit_token: unused.token }), { valid: false, verify_error_code: 'REPLAY_STATE_RESET' }, 'verify-permit refuses the unused permit issued before the loss');
  t.match(await client.verifyPermit({ permit_token: used.token }), { valid: false, verify_error_code: 'PERMIT_ALREADY_USED' }, "verify-permit refuses the used one from the authority's own record");

  // Permits issued after the authority read the new epoch (it reads it every few seconds) work.
  let fresh = 0;
  await eventually('a permit issued after the loss to be forwarded', async () => {
    const permit = await s.permit(`fresh-${fresh++}`);
    return (await s.send(`/echo/fresh-${fresh - 1}`, permit.token)).status === 200;
  }, 20_000, 500);
  t.ok(fresh >= 1);

  // The refusals are on the record, with their code.
  let codes: string[] = [];
  await eventually('the drain to record the refusals', async () => {
    const response = await s.api('/v1/audit/events?types=permit.rejected&limit=500');
    if (response.status !== 200) return false;
    codes = AuditEventsResponse.parse(response.body).events.flatMap((event) => {
      const details = (event.payload as { details?: { verify_error_code?: string | null } }).details;
      return details?.verify_error_code ? [details.verify_error_code] : [];
    });
    return codes.filter((code) => code === 'REPLAY_STATE_RESET').length >= 2;
  }, 20_000, 250);
  t.ok(codes.filter((code) => code === 'REPLAY_STATE_RESET').length >= 2, 'two permit.rejected records with REPLAY_STATE_RESET');
});

t.test('Redis paused past the gate timeout: 503, nothing reaches the upstream, and the permit stays usable', async (t) => {
  const s = await setUp(t);
  if (!s) return;
  const permits = [await s.permit('stalled-1'), await s.permit('stalled-2')];
  s.redis.pause();
  for (const [i, permit] of permits.entries()) {
    const refused = await s.send(`/echo/stalled-${i + 1}`, permit.token);
    t.equal(refused.status, 503, `request ${i + 1}: fail closed while Redis is stalled`);
    t.match(refused.json(), { error: 'gate_unavailable' });
  }
  t.same(s.upstream.received, [], 'the upstream received nothing');
  s.redis.resume();
  // The stalled consumes reach Redis now, late: they must change nothing.
  await eventually('Redis to answer again', () => redisPing(s.redis.port));
  for (const [i, permit] of permits.entries()) {
    let answer = 0;
    await eventually(`request ${i + 1} to go through with the same permit`, async () => {
      answer = (await s.send(`/echo/stalled-${i + 1}`, permit.token)).status;
      return answer !== 503;
    });
    t.equal(answer, 200, `request ${i + 1}: the permit was not consumed by the refused attempt`);
  }
  t.same(s.upstream.received, ['POST /echo/stalled-1', 'POST /echo/stalled-2'], 'one effect per permit');

  let events: Array<{ type: string; resource_id: string | null }> = [];
  await eventually('the drain to record the two uses', async () => {
    const response = await s.api('/v1/audit/events?types=permit.verified&limit=500');
    if (response.status !== 200) return false;
    events = AuditEventsResponse.parse(response.body).events.filter((event) => permits.some((p) => p.id === event.resource_id));
    return events.length >= 2;
  }, 20_000, 250);
  for (const permit of permits) {
    t.equal(events.filter((event) => event.resource_id === permit.id).length, 1, `${permit.id}: exactly one permit.verified`);
  }
});
