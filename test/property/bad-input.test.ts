/**
 * Bad input, generated (the generators and the route list are in bad-input-requests.ts): the
 * first share of the routes, and random credentials and random paths, which must answer
 * 401/404/405 envelopes and never a 5xx.
 *
 * @example
 *   npx tap test/property/bad-input.test.ts test/property/bad-input-*.test.ts
 */
import fc from 'fast-check';
import t from 'tap';
import { ErrorEnvelope } from '../../shared/wire/envelope.js';
import { createTestAuthority } from '../helpers/authority.js';
import { appBackends } from '../helpers/backends.js';
import { BAD_INPUT_SHARES, badBodies, shareOf } from './bad-input.js';

badBodies(1, BAD_INPUT_SHARES);

t.test('the shares deal out every route exactly once', async (t) => {
  const routes = Array.from({ length: 43 }, (_, i) => [i % 3 === 0 ? 'GET' : 'POST', `/r${i}`] as const);
  const shares = Array.from({ length: BAD_INPUT_SHARES }, (_, i) => shareOf(routes, i + 1, BAD_INPUT_SHARES));
  t.same(shares.flat().map(([, url]) => url).sort(), routes.map(([, url]) => url).sort(), 'each route in one share');
  const runs = shares.map((share) => share.reduce((sum, [method]) => sum + (method === 'GET' ? 2_000 : 10_000), 0));
  t.ok(Math.max(...runs) - Math.min(...runs) <= 10_000, `the shares are about even (${runs.join(', ')} runs)`);
});

t.test('random credentials and paths: 401/404/405 envelopes, never a 5xx', async (t) => {
  const opened = await appBackends()[0]!.open();
  const authority = await createTestAuthority(opened);
  t.teardown(async () => {
    await authority.close();
    await opened.cleanup();
  });
  let answered = 0;
  const printable = fc.string({ unit: fc.integer({ min: 0x20, max: 0x7e }).map((code) => String.fromCharCode(code)), maxLength: 300 });
  await fc.assert(
    fc.asyncProperty(
      fc.constantFrom('GET', 'POST', 'PUT', 'DELETE', 'PATCH'),
      fc.oneof(
        fc.constantFrom('/v1/api-keys', '/v1/session', '/v1-api-key-self', '/v1/escalations'),
        printable.map((p) => `/${encodeURIComponent(p)}`),
        // At most 99 characters encoded: fastify's maxParamLength (100) answers longer ids outside our handlers.
        printable.map((p) => `/v1/escalations/${encodeURIComponent(p.slice(0, 33))}`),
      ),
      fc.oneof(printable, printable.map((p) => `Bearer ${p}`), fc.constant(`Bearer ask_live_${'x'.repeat(40)}`), printable.map((p) => `Bearer ${Buffer.from(p).toString('base64url')}.e30.${p.length}`)),
      fc.boolean(),
      async (method, url, credential, deprecated) => {
        answered += 1;
        const headers = deprecated ? { 'x-service-key': credential } : { authorization: credential };
        const response = await authority.app.inject({ method, url, headers });
        if (response.statusCode >= 500) throw new Error(`${method} ${url} answered ${response.statusCode}: ${response.body}`);
        if (response.statusCode !== 200) ErrorEnvelope.parse(response.json());
      },
    ),
    { numRuns: 300 },
  );
  t.equal(answered, 300, '300 random requests answered without a 5xx');
});
