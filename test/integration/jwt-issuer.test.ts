/**
 * User JWTs against an issuer whose JWKS is served over HTTP on loopback: accepted while the
 * keys can be fetched, 503 (never an allow) when the issuer cannot be reached, and tokens with a
 * shared-secret algorithm refused whatever their claims.
 */
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { readFile } from 'node:fs/promises';
import { SignJWT } from 'jose';
import t from 'tap';
import { ErrorEnvelope } from '../../shared/wire/envelope.js';
import { createTestAuthority } from '../helpers/authority.js';
import { appBackends } from '../helpers/backends.js';
import { createTestIdp, TEST_AUDIENCE, TEST_ISSUER } from '../helpers/jwt.js';
import { deadUrl } from '../helpers/loopback.js';

async function serveJwks(body: string): Promise<{ server: Server; url: string; fetches: () => number }> {
  let fetches = 0;
  const server = createServer((_request, response) => {
    fetches += 1;
    response.writeHead(200, { 'content-type': 'application/json' }).end(body);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return { server, url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/jwks.json`, fetches: () => fetches };
}

t.test('a JWKS URL: tokens verify, keys are fetched once and cached', async (t) => {
  const idp = await createTestIdp();
  const jwks = await serveJwks(await readFile(idp.jwksFile, 'utf8'));
  const opened = await appBackends()[0]!.open();
  const authority = await createTestAuthority(opened, {
    config: { auth: { jwt: { issuer: TEST_ISSUER, audience: TEST_AUDIENCE, jwks_url: jwks.url } } },
  });
  t.teardown(async () => {
    await authority.close();
    await opened.cleanup();
    jwks.server.close();
  });
  for (let i = 0; i < 3; i += 1) {
    const token = await idp.sign({ sub: `u${i}`, org_id: authority.acme.id, role: 'member' });
    const response = await authority.app.inject({ method: 'GET', url: '/v1/session', headers: authority.bearer(token) });
    t.equal(response.statusCode, 200, `token ${i} accepted`);
  }
  t.equal(jwks.fetches(), 1, 'the key set was fetched once');

  const hs256 = await new SignJWT({ sub: 'mallory', org_id: authority.acme.id, role: 'admin' })
    .setProtectedHeader({ alg: 'HS256' })
    .setIssuer(TEST_ISSUER)
    .setAudience(TEST_AUDIENCE)
    .setExpirationTime('5m')
    .sign(new TextEncoder().encode('a shared secret nobody should trust'));
  const refused = await authority.app.inject({ method: 'GET', url: '/v1/session', headers: authority.bearer(hs256) });
  t.equal(refused.statusCode, 401, 'a shared-secret (HS256) token is refused');
  t.equal(ErrorEnvelope.parse(refused.json()).error, 'unauthorized');
});

t.test('an unreachable issuer fails closed with 503', async (t) => {
  const idp = await createTestIdp();
  const url = `${await deadUrl()}/jwks.json`;
  const opened = await appBackends()[0]!.open();
  const authority = await createTestAuthority(opened, {
    config: { auth: { jwt: { issuer: TEST_ISSUER, audience: TEST_AUDIENCE, jwks_url: url } } },
  });
  t.teardown(async () => {
    await authority.close();
    await opened.cleanup();
  });
  const token = await idp.sign({ sub: 'u1', org_id: authority.acme.id, role: 'admin' });
  const response = await authority.app.inject({ method: 'GET', url: '/v1/api-keys', headers: authority.bearer(token) });
  t.equal(response.statusCode, 503);
  t.equal(ErrorEnvelope.parse(response.json()).error, 'service_unavailable');
  const withKey = await authority.app.inject({ method: 'GET', url: '/v1/api-keys', headers: authority.bearer(authority.acmeAdmin) });
  t.equal(withKey.statusCode, 200, 'API keys keep working without the identity provider');
});

t.test('a JWT without the user or organization claim is refused', async (t) => {
  const opened = await appBackends()[0]!.open();
  const authority = await createTestAuthority(opened);
  t.teardown(async () => {
    await authority.close();
    await opened.cleanup();
  });
  for (const claims of [{ org_id: authority.acme.id, role: 'admin' }, { sub: 'u1', role: 'admin' }, { sub: 'u1', org_id: 'default', role: 'admin' }]) {
    const token = await authority.idp.sign(claims);
    const response = await authority.app.inject({ method: 'GET', url: '/v1/session', headers: authority.bearer(token) });
    t.equal(response.statusCode, 401, JSON.stringify(claims));
  }
});
