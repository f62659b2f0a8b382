/**
 * Regression: a database outage must map to a retryable 503 by its class,
 * wherever it is met, and nothing else may be swept into it. Also: 503s carry Retry-After while
 * 429s keep the header their bucket gave them.
 */
import t from 'tap';
import { toCountersignError } from '../../authority/http/errors.js';
import { isDatabaseUnavailable } from '../../authority/store/unavailable.js';
import { CountersignError } from '../../shared/errors.js';

const coded = (code: string, message = 'x') => Object.assign(new Error(message), { code });

t.test('outages are recognised by SQLSTATE, socket code and the drivers\' messages', async (t) => {
  const outages: Array<[string, unknown]> = [
    ['57P01 admin_shutdown', coded('57P01', 'terminating connection due to administrator command')],
    ['57P02 crash_shutdown', coded('57P02')],
    ['57P03 cannot_connect_now', coded('57P03', 'the database system is starting up')],
    ['53300 too_many_connections', coded('53300')],
    ['class 08: 08006 connection_failure', coded('08006')],
    ['class 08: 08001', coded('08001')],
    ['class 08: 08P01 protocol_violation', coded('08P01')],
    ['ECONNREFUSED', coded('ECONNREFUSED', 'connect ECONNREFUSED 127.0.0.1:5432')],
    ['ECONNRESET', coded('ECONNRESET')],
    ['ETIMEDOUT', coded('ETIMEDOUT')],
    ['EPIPE', coded('EPIPE')],
    ['pg: Connection terminated unexpectedly', new Error('Connection terminated unexpectedly')],
    ['pg-pool: timeout exceeded when trying to connect', new Error('timeout exceeded when trying to connect')],
    ['pg-pool: Connection terminated due to connection timeout', new Error('Connection terminated due to connection timeout')],
    ['pg-pool ended (shutdown)', new Error('Cannot use a pool after calling end on the pool')],
    ['PGlite closed', new Error('PGlite is closed')],
    ['happy-eyeballs AggregateError', new AggregateError([coded('ECONNREFUSED'), coded('ECONNREFUSED')], 'connect failed')],
    ['wrapped in a cause chain', new Error('lookup failed', { cause: new Error('inner', { cause: coded('57P01') }) })],
  ];
  for (const [name, error] of outages) t.ok(isDatabaseUnavailable(error), name);
});

t.test('nothing else is an outage: constraint and syntax errors, plain errors, non-errors', async (t) => {
  const others: Array<[string, unknown]> = [
    ['23505 unique_violation', coded('23505', 'duplicate key value violates unique constraint')],
    ['42601 syntax_error', coded('42601')],
    ['40001 serialization_failure', coded('40001')],
    ['a plain Error', new Error('something broke')],
    ["PGlite's closed transaction handle (a bug, not an outage)", new Error('Transaction is closed')],
    ['a string', 'ECONNREFUSED'],
    ['null', null],
    ['undefined', undefined],
  ];
  for (const [name, error] of others) t.notOk(isDatabaseUnavailable(error), name);
  const cyclic: Error & { cause?: unknown } = new Error('loop');
  cyclic.cause = cyclic;
  t.notOk(isDatabaseUnavailable(cyclic), 'a cyclic cause chain ends');
});

t.test('the error handler maps an outage to 503 service_unavailable with Retry-After, and leaves the rest alone', async (t) => {
  const outage = toCountersignError(coded('ECONNREFUSED'));
  t.equal(outage.code, 'service_unavailable');
  t.equal(outage.status, 503);
  t.match(outage.headers['retry-after'], /^[1-9][0-9]*$/);

  const wrapped = toCountersignError(new CountersignError('internal', undefined, { cause: new Error('Connection terminated unexpectedly') }));
  t.equal(wrapped.code, 'service_unavailable', 'an `internal` that was an outage underneath');

  const audit = toCountersignError(new CountersignError('audit_unavailable', undefined, { cause: coded('57P01') }));
  t.equal(audit.code, 'audit_unavailable', 'audit_unavailable stays what it is');
  t.match(audit.headers['retry-after'], /^[1-9][0-9]*$/, 'and carries Retry-After');

  const hungUp = Object.assign(coded('ECONNRESET', 'aborted'), { statusCode: 400 });
  t.equal(toCountersignError(hungUp).code, 'invalid_request', 'a client that hung up mid-body (fastify: ECONNRESET, 400) is no outage');
  t.equal(toCountersignError(new Error('something broke')).code, 'internal', 'a bug stays a 500');
  t.equal(toCountersignError(coded('23505')).code, 'internal', 'so does an unexpected constraint violation');
});

t.test('Retry-After: 503s by default or as given; 429s keep their own header; nothing else gets one', async (t) => {
  t.equal(new CountersignError('service_unavailable').headers['retry-after'], '2');
  t.equal(new CountersignError('service_unavailable', 'draining', { retryAfterSeconds: 1 }).headers['retry-after'], '1');
  t.equal(new CountersignError('service_unavailable', 'x', { retryAfterSeconds: 0.2 }).headers['retry-after'], '1', 'never below one second');
  const limited = new CountersignError('unavailable', 'slow down', { retryAfterMs: 1500, headers: { 'retry-after': '2' } });
  t.same(limited.headers, { 'retry-after': '2' }, 'a 429 header is exactly the one it was given');
  t.same(new CountersignError('rate_limited', 'x').headers, {}, 'a 429 without a header gets none invented');
  t.same(new CountersignError('forbidden').headers, {});
  t.same(new CountersignError('method_not_allowed', 'x', { headers: { allow: 'GET' } }).headers, { allow: 'GET' });
});
