/**
 * A caller that gave up spends no permit, on every front door: the gate's store is a Redis of the
 * test's own (test/helpers/redis-process.ts), stopped with SIGSTOP while a check is in flight, with
 * the store's own timeout (1 s) longer than the caller's patience, as with Envoy's default 200 ms
 * ext_authz timeout. The callers are real: a @grpc/grpc-js client with a 200 ms deadline or
 * cancelling its call, an HTTP client giving up at 200 ms or closing its connection (a simulated
 * Envoy), and a client of the forwarding sidecar closing its connection. After Redis resumes, the
 * permit still opens the retry, and the verification stream holds one `permit.verified` for it:
 * the retry's, none for the abandoned check. Counts records and markers, never durations.
 *
 * @example
 *   node test/run.mjs --disable-coverage test/integration/ext-authz-deadlines.test.ts
 */
import { setTimeout as sleep } from 'node:timers/promises';
import { status, type ServiceError } from '@grpc/grpc-js';
import t, { type Test } from 'tap';
import { permitStoreKey, replayEpochKey, verificationStream } from '../../shared/permits/store-keys.js';
import { RedisStore } from '../../shared/store/redis.js';
import { appBackends } from '../helpers/backends.js';
import { checkRequest, fromCheckResponse, startExtAuthz, type ExtAuthzUnderTest } from '../helpers/ext-authz-harness.js';
import { withHarness, type Harness } from '../helpers/proxy-harness.js';
import { startRedisProcess, type RedisProcess } from '../helpers/redis-process.js';

/** Envoy's default ext_authz timeout: the simulated Envoy gives up after this long. */
const ENVOY_TIMEOUT_MS = 200;
/** How long Redis stays stopped: past the caller's patience, within the store's own timeout. */
const STALL_MS = 400;

interface Setup {
  h: Harness;
  redis: RedisProcess;
  store: RedisStore;
  authz: ExtAuthzUnderTest;
  /** The kinds and request ids of the permit's records in the stalled Redis's stream. */
  recordsOf(permitId: string): Promise<Array<[string, string]>>;
  /** Waits until Redis has run what was sent while it was stopped, and (bounded) until no marker of `permitId` is left. */
  settled(permitId: string): Promise<void>;
}

async function setUp(t: Test, h: Harness, options: { checkTimeoutMs?: number } = {}): Promise<Setup | undefined> {
  const redis = await startRedisProcess(t, { persistence: 'none' });
  if (!redis) return undefined;
  const store = new RedisStore({ url: redis.url });
  t.teardown(() => store.close());
  const org = h.authority.acme.id;
  // The harness's permits were issued before this Redis began: an epoch from the start of time
  // keeps the fence from refusing them (a store that lost its state is another test's subject).
  await redis.command('SET', `countersign:epoch:${replayEpochKey(org)}`, '0');
  const authz = await startExtAuthz(t, h, { store, ...options });
  // A first use, so the connection is up and the clock offset known before anything stalls.
  const warm = await h.permit({ id: 'warm-up' });
  t.equal((await authz.check('grpc', { path: '/echo/warm-up', token: warm.token })).allowed, true, 'the store answers before the stall');
  return {
    h,
    redis,
    store,
    authz,
    async recordsOf(permitId) {
      const records = await store.readRecords(verificationStream(org), '0', 1000);
      return records.filter((record) => record.fields.permit_id === permitId).map((record) => [record.fields.kind ?? '', record.fields.request_id ?? '']);
    },
    async settled(permitId) {
      const marker = `countersign:once:${permitStoreKey(org, permitId)}`;
      // A consume undone after it landed leaves its marker until the undo's round trip; one that
      // stays means the permit was spent, which the retry then shows.
      for (let i = 0; i < 50; i++) {
        await store.ping();
        if ((await redis.command('EXISTS', marker)) === ':0') return;
      }
    },
  };
}

/** Stops Redis, runs `giveUp` (which ends with the caller gone), resumes Redis after STALL_MS and waits for what it runs then. */
async function duringStall<T>(s: Setup, permitId: string, giveUp: () => Promise<T>): Promise<T> {
  const started = Date.now();
  s.redis.pause();
  let outcome: T;
  try {
    outcome = await giveUp();
    await sleep(Math.max(0, STALL_MS - (Date.now() - started)));
  } finally {
    s.redis.resume();
  }
  await s.settled(permitId);
  return outcome;
}

/** A Check call as Envoy makes it: with a deadline; resolves the answer, or the call's error. */
function grpcCheck(authz: ExtAuthzUnderTest, path: string, token: string, requestId: string, options: { deadlineMs?: number; cancelAfterMs?: number }) {
  return new Promise<{ error: ServiceError | null; allowed: boolean }>((resolve) => {
    const request = checkRequest({ path, token, headers: { 'x-request-id': requestId } });
    const call = authz.client.Check(request, options.deadlineMs !== undefined ? { deadline: Date.now() + options.deadlineMs } : {}, (error, response) =>
      resolve({ error, allowed: response !== undefined && fromCheckResponse(response).allowed }),
    );
    if (options.cancelAfterMs !== undefined) setTimeout(() => call.cancel(), options.cancelAfterMs);
  });
}

/** An HTTP check as Envoy's http_service sends it, given up (the connection closed) by `signal`. */
async function httpCheck(authz: ExtAuthzUnderTest, path: string, token: string, requestId: string, signal: AbortSignal): Promise<number | 'gave up'> {
  try {
    const response = await fetch(`${authz.httpUrl}${path}`, {
      method: 'POST',
      headers: { 'x-service-permit': token, 'x-actor-id': 'demo-agent', 'x-request-id': requestId },
      signal,
    });
    await response.arrayBuffer();
    return response.status;
  } catch {
    return 'gave up';
  }
}

const backend = appBackends()[0]!;

t.test('ext_authz gRPC: a check past Envoy\'s deadline spends nothing; the retry with the same permit is allowed', (t) =>
  withHarness(t, backend, async (h) => {
    const s = await setUp(t, h);
    if (!s) return;
    const permit = await h.permit({ id: 'grpc-deadline' });
    const path = '/echo/grpc-deadline';
    const abandoned = await duringStall(s, permit.id, () => grpcCheck(s.authz, path, permit.token, 'grpc-abandoned', { deadlineMs: ENVOY_TIMEOUT_MS }));
    t.equal(abandoned.allowed, false, 'the stalled check was not allowed');
    t.ok(abandoned.error === null || abandoned.error.code === status.DEADLINE_EXCEEDED, 'the gate refused it in time, or the deadline passed');
    const retry = await grpcCheck(s.authz, path, permit.token, 'grpc-retry', {});
    t.equal(retry.allowed, true, 'the retry with the same permit is allowed');
    const verified = (await s.recordsOf(permit.id)).filter(([kind]) => kind === 'permit.verified');
    t.same(verified, [['permit.verified', 'grpc-retry']], 'one permit.verified: the retry\'s, none for the abandoned check');
  }),
);

t.test('ext_authz gRPC: a call the client cancels mid-check spends nothing, though its consume ran once Redis resumed', (t) =>
  withHarness(t, backend, async (h) => {
    const s = await setUp(t, h);
    if (!s) return;
    const permit = await h.permit({ id: 'grpc-cancel' });
    const path = '/echo/grpc-cancel';
    const cancelled = await duringStall(s, permit.id, () => grpcCheck(s.authz, path, permit.token, 'grpc-cancelled', { cancelAfterMs: 100 }));
    t.equal(cancelled.error?.code, status.CANCELLED, 'the client cancelled the call');
    const retry = await grpcCheck(s.authz, path, permit.token, 'grpc-retry', {});
    t.equal(retry.allowed, true, 'the retry with the same permit is allowed');
    t.same(
      (await s.recordsOf(permit.id)).filter(([kind]) => kind === 'permit.verified'),
      [['permit.verified', 'grpc-retry']],
      'the cancelled check\'s record was undone with its marker',
    );
  }),
);

t.test('ext_authz HTTP: a check past check_timeout_ms (Envoy gives up at 200 ms) spends nothing; the retry is allowed', (t) =>
  withHarness(t, backend, async (h) => {
    const s = await setUp(t, h);
    if (!s) return;
    const permit = await h.permit({ id: 'http-deadline' });
    const path = '/echo/http-deadline';
    const abandoned = await duringStall(s, permit.id, () => httpCheck(s.authz, path, permit.token, 'http-abandoned', AbortSignal.timeout(ENVOY_TIMEOUT_MS)));
    t.not(abandoned, 200, `the stalled check was not allowed (${abandoned})`);
    t.equal(await httpCheck(s.authz, path, permit.token, 'http-retry', new AbortController().signal), 200, 'the retry with the same permit is allowed');
    t.same((await s.recordsOf(permit.id)).filter(([kind]) => kind === 'permit.verified'), [['permit.verified', 'http-retry']]);
  }),
);

t.test('ext_authz HTTP: Envoy closing the connection mid-check spends nothing, though the consume ran once Redis resumed', (t) =>
  withHarness(t, backend, async (h) => {
    // A long check timeout: only the closed connection stops this check.
    const s = await setUp(t, h, { checkTimeoutMs: 5_000 });
    if (!s) return;
    const permit = await h.permit({ id: 'http-abort' });
    const path = '/echo/http-abort';
    const client = new AbortController();
    const abandoned = await duringStall(s, permit.id, () => {
      setTimeout(() => client.abort(), 100);
      return httpCheck(s.authz, path, permit.token, 'http-aborted', client.signal);
    });
    t.equal(abandoned, 'gave up');
    t.equal(await httpCheck(s.authz, path, permit.token, 'http-retry', new AbortController().signal), 200, 'the retry with the same permit is allowed');
    t.same((await s.recordsOf(permit.id)).filter(([kind]) => kind === 'permit.verified'), [['permit.verified', 'http-retry']]);
  }),
);

t.test('forwarding sidecar: a client that leaves mid-check spends nothing; its retry is forwarded once', (t) =>
  withHarness(t, backend, async (h) => {
    const s = await setUp(t, h);
    if (!s) return;
    const proxy = await h.startProxy({ store: s.store });
    const permit = await h.permit({ id: 'sidecar-abort' });
    const path = '/echo/sidecar-abort';
    const send = (requestId: string, signal: AbortSignal) => httpCheck({ ...s.authz, httpUrl: proxy.url }, path, permit.token, requestId, signal);
    const client = new AbortController();
    const abandoned = await duringStall(s, permit.id, () => {
      setTimeout(() => client.abort(), 100);
      return send('sidecar-aborted', client.signal);
    });
    t.equal(abandoned, 'gave up');
    t.equal(await send('sidecar-retry', new AbortController().signal), 201, 'the retry is forwarded');
    t.equal(h.upstream.received.filter((request) => request.url === path).length, 1, 'the upstream saw the retry only');
    t.same((await s.recordsOf(permit.id)).filter(([kind]) => kind === 'permit.verified'), [['permit.verified', 'sidecar-retry']]);
  }),
);
