/**
 * Honest execution records, unit level: classifyUpstreamFailure puts each class of undici / node
 * error on the right side of "the request never left" (`not_reached`) versus "it may have run"
 * (`unknown`), with a stable code; executionOutcome and executionRecord carry that into the
 * `execution.observed` record; the caller's 502 says which it was; and the drain reads records
 * written before the `upstream` field existed. A regression test: every upstream failure used to
 * be recorded as `UPSTREAM_ERROR` with no status and no way to tell them apart.
 *
 * @example
 *   npx tap --disable-coverage test/unit/upstream-outcome.test.ts
 */
import t from 'tap';
import { errors } from 'undici';
import { executionOutcome, unavailableError } from '../../proxy/forward.js';
import { executionRecord } from '../../proxy/gate-records.js';
import { classifyUpstreamFailure, ClientGone, ProxyStopped } from '../../proxy/upstream-outcome.js';
import { upstreamOutcomeOf, VerificationRecord } from '../../shared/wire/verification-records.js';

const coded = (code: string, message = code) => Object.assign(new Error(message), { code });
const sent = { dispatched: true, clientGone: false };
const waiting = { dispatched: false, clientGone: false };

t.test('not reached: errors that only happen while connecting, whatever undici says about dispatching', async (t) => {
  const cases: Array<[string, Error, string]> = [
    ['connection refused', coded('ECONNREFUSED', 'connect ECONNREFUSED 127.0.0.1:9'), 'UPSTREAM_REFUSED'],
    ['DNS: no such name', coded('ENOTFOUND', 'getaddrinfo ENOTFOUND upstream.invalid'), 'UPSTREAM_DNS_FAILURE'],
    ['DNS: temporary failure', coded('EAI_AGAIN'), 'UPSTREAM_DNS_FAILURE'],
    ['connect timeout', new errors.ConnectTimeoutError(), 'UPSTREAM_CONNECT_TIMEOUT'],
    ['no route to host', coded('EHOSTUNREACH'), 'UPSTREAM_NO_ROUTE'],
    ['network unreachable', coded('ENETUNREACH'), 'UPSTREAM_NO_ROUTE'],
  ];
  for (const [name, error, code] of cases) {
    for (const context of [waiting, sent]) {
      t.match(classifyUpstreamFailure(error, context), { upstream: 'not_reached', code, reason: /never left the proxy/ }, `${name} (dispatched: ${context.dispatched})`);
    }
  }
});

t.test('not reached: anything before the request was handed to a connection', async (t) => {
  t.match(classifyUpstreamFailure(coded('ERR_SSL_WRONG_VERSION_NUMBER'), waiting), { upstream: 'not_reached', code: 'UPSTREAM_TLS_FAILURE' }, 'TLS handshake: wrong protocol');
  t.match(classifyUpstreamFailure(coded('DEPTH_ZERO_SELF_SIGNED_CERT'), waiting), { upstream: 'not_reached', code: 'UPSTREAM_TLS_FAILURE' }, 'TLS handshake: certificate refused');
  t.match(classifyUpstreamFailure(coded('ERR_TLS_CERT_ALTNAME_INVALID'), waiting), { upstream: 'not_reached', code: 'UPSTREAM_TLS_FAILURE' }, 'TLS handshake: wrong host name');
  t.match(classifyUpstreamFailure(coded('ETIMEDOUT'), waiting), { upstream: 'not_reached', code: 'UPSTREAM_CONNECT_TIMEOUT' }, 'a TCP time-out while connecting');
  t.match(classifyUpstreamFailure(new ClientGone(), { dispatched: false, clientGone: true }), { upstream: 'not_reached', code: 'CLIENT_GONE' }, 'the client left before it was sent');
  t.match(classifyUpstreamFailure(new errors.ClientDestroyedError(), waiting), { upstream: 'not_reached', code: 'PROXY_STOPPED' }, 'the proxy stopped before it was sent');
  t.match(classifyUpstreamFailure(new Error('something odd'), waiting), { upstream: 'not_reached', code: 'UPSTREAM_CONNECT_FAILED', reason: /something odd/ }, 'an unknown error while connecting');
  const aggregate = new AggregateError([coded('ECONNREFUSED'), coded('ECONNREFUSED')], 'connect failed');
  t.match(classifyUpstreamFailure(aggregate, sent), { upstream: 'not_reached', code: 'UPSTREAM_REFUSED' }, 'every address refused (happy eyeballs)');
});

t.test('unknown: failures after the request may have gone out', async (t) => {
  const cases: Array<[string, unknown, string]> = [
    ['reset after sending', coded('ECONNRESET', 'read ECONNRESET'), 'UPSTREAM_RESET'],
    ['upstream closed the socket', new errors.SocketError('other side closed'), 'UPSTREAM_RESET'],
    ['broken pipe while sending the body', coded('EPIPE'), 'UPSTREAM_RESET'],
    ['no answer in time', new errors.HeadersTimeoutError(), 'UPSTREAM_HEADERS_TIMEOUT'],
    ['the answer stalled', new errors.BodyTimeoutError(), 'UPSTREAM_BODY_TIMEOUT'],
    ['TCP time-out after sending', coded('ETIMEDOUT'), 'UPSTREAM_TIMEOUT'],
    ['request aborted', new errors.RequestAbortedError(), 'CLIENT_GONE'],
    ['the proxy stopped', new ProxyStopped(), 'PROXY_STOPPED'],
    ['not an HTTP answer', coded('HPE_INVALID_CONSTANT', 'Expected HTTP/'), 'UPSTREAM_INVALID_ANSWER'],
    ['TLS broke after sending', coded('ERR_SSL_DECRYPTION_FAILED_OR_BAD_RECORD_MAC'), 'UPSTREAM_TLS_FAILURE'],
    ['an error without a code', new Error('boom'), 'UPSTREAM_ERROR'],
    ['not even an Error', 'a string', 'UPSTREAM_ERROR'],
  ];
  for (const [name, error, code] of cases) {
    t.match(classifyUpstreamFailure(error, sent), { upstream: 'unknown', code, reason: /may have reached the upstream/ }, name);
  }
});

t.test('unknown: the client left while the upstream held the request', async (t) => {
  const gone = { dispatched: true, clientGone: true };
  t.match(classifyUpstreamFailure(new errors.HeadersTimeoutError(), gone), { upstream: 'unknown', code: 'CLIENT_GONE', reason: /UND_ERR_HEADERS_TIMEOUT/ });
  t.match(classifyUpstreamFailure(coded('ECONNRESET', 'aborted'), gone), { upstream: 'unknown', code: 'CLIENT_GONE' }, 'its unfinished body failing the request');
  t.match(classifyUpstreamFailure(new ProxyStopped(), gone), { upstream: 'unknown', code: 'PROXY_STOPPED' }, 'the proxy stopping is the cause that ended it');
  t.match(classifyUpstreamFailure(coded('ECONNREFUSED'), { dispatched: false, clientGone: true }), { upstream: 'not_reached', code: 'UPSTREAM_REFUSED' });
});

t.test('executionOutcome: what the record says for each forwarding result', async (t) => {
  t.same(executionOutcome({ outcome: 'answered', status: 201, durationMs: 3 }), { upstream: 'answered', status: 201, code: '', reason: '' });
  t.match(executionOutcome({ outcome: 'cut_short', by: 'client', status: 200, durationMs: 3 }), { upstream: 'answered', status: 200, code: 'CLIENT_GONE' }, 'answered even though the client did not read it');
  t.match(executionOutcome({ outcome: 'cut_short', by: 'upstream', status: 200, durationMs: 3, error: coded('ECONNRESET') }), {
    upstream: 'answered',
    status: 200,
    code: 'UPSTREAM_ANSWER_INTERRUPTED',
    reason: /ECONNRESET/,
  });
  const failure = classifyUpstreamFailure(coded('ECONNRESET'), sent);
  t.same(executionOutcome({ outcome: 'failed', failure, clientGone: false, durationMs: 3, error: null }), { upstream: 'unknown', status: null, code: 'UPSTREAM_RESET', reason: failure.reason });
});

t.test("the caller's 502 says whether the request may have reached the upstream", async (t) => {
  const notReached = unavailableError(classifyUpstreamFailure(coded('ECONNREFUSED'), waiting));
  t.match(notReached, { code: 'upstream_unavailable', status: 502, reason: 'UPSTREAM_NOT_REACHED', message: /never left/ });
  const unknown = unavailableError(classifyUpstreamFailure(coded('ECONNRESET'), sent));
  t.match(unknown, { code: 'upstream_unavailable', status: 502, reason: 'UPSTREAM_RESULT_UNKNOWN', message: /may have reached/ });
});

t.test('executionRecord: the record carries upstream, status, code and reason, and fails towards unknown', async (t) => {
  const base = { route: { name: 'echo', action_type: 'demo.echo' }, mode: 'enforce', requestId: 'r', permitId: 'p', claims: null, durationMs: 1, atMs: 0 } as const;
  t.match(VerificationRecord.parse(executionRecord({ ...base, upstream: 'answered', upstreamStatus: 204 })), { upstream: 'answered', upstream_status: '204', code: '', reason: '' });
  t.match(VerificationRecord.parse(executionRecord({ ...base, upstream: 'unknown', upstreamStatus: null, code: 'UPSTREAM_RESET', reason: 'reset' })), {
    upstream: 'unknown',
    upstream_status: '',
    code: 'UPSTREAM_RESET',
    reason: 'reset',
  });
  t.match(VerificationRecord.parse(executionRecord({ ...base, upstream: 'answered', upstreamStatus: null })), { upstream: 'unknown', upstream_status: '', code: 'UPSTREAM_ERROR' }, 'answered without a status is not believed');
  t.match(VerificationRecord.parse(executionRecord({ ...base, upstream: 'not_reached', upstreamStatus: 200, code: 'UPSTREAM_REFUSED' })), { upstream: 'not_reached', upstream_status: '' }, 'no status without an answer');
  t.match(VerificationRecord.parse(executionRecord({ ...base, upstreamStatus: 200 })), { upstream: 'answered', upstream_status: '200' }, 'the default follows the status');
  t.match(VerificationRecord.parse(executionRecord({ ...base, upstreamStatus: null })), { upstream: 'unknown', code: 'UPSTREAM_ERROR', reason: 'the upstream did not answer' });
});

t.test('records without `upstream` (older gates) still parse, and read as answered or unknown', async (t) => {
  const old = { kind: 'execution.observed', gate: 'proxy:echo', mode: 'enforce', at: '2026-01-01T00:00:00.000Z', request_id: 'r', permit_id: 'p', action_type: 'a', actor_id: 'b', code: '', reason: '', duration_ms: '1' };
  const answered = VerificationRecord.parse({ ...old, upstream_status: '201' });
  t.equal(upstreamOutcomeOf(answered), 'answered');
  const failed = VerificationRecord.parse({ ...old, upstream_status: '', code: 'UPSTREAM_ERROR', reason: 'ECONNREFUSED' });
  t.equal(upstreamOutcomeOf(failed), 'unknown', 'an old failure cannot say whether the request left');
  t.equal(upstreamOutcomeOf({ upstream: 'not_reached', upstream_status: '' }), 'not_reached');
  t.notOk(VerificationRecord.safeParse({ ...old, upstream_status: '', upstream: 'maybe' }).success, 'an outcome outside the three is refused');
});
