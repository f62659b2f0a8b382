/**
 * An error's headers and the answer's own: the catalogue's Retry-After joins the headers an answer
 * sets (the proxy's refusals, ext_authz's denied answers, the authority's drain answer) and never
 * replaces one of them; a Retry-After the caller gives wins over the catalogue's.
 */
import t from 'tap';
import { CountersignError, withErrorHeaders } from '../../shared/errors.js';

t.test("the error's headers are added beside the answer's own, never over them", async (t) => {
  const error = new CountersignError('service_unavailable', 'down', { retryAfterSeconds: 2 });
  t.same(withErrorHeaders(error, { 'x-request-id': 'r1' }), { 'x-request-id': 'r1', 'retry-after': '2' });
  t.same(withErrorHeaders(error, { 'retry-after': '9' }), { 'retry-after': '9' }, "the answer's own Retry-After stays");
  t.same(withErrorHeaders(new CountersignError('forbidden'), { a: 'b' }), { a: 'b' }, 'an error without headers adds none');
});

t.test("Retry-After from the catalogue or the options, and the caller's own headers kept", async (t) => {
  t.same(new CountersignError('service_unavailable', 'down', { retryAfterSeconds: 1.2, headers: { 'x-a': '1' } }).headers, { 'x-a': '1', 'retry-after': '2' });
  t.same(new CountersignError('service_unavailable', 'down', { retryAfterSeconds: 3, headers: { 'retry-after': '7' } }).headers, { 'retry-after': '7' });
});
