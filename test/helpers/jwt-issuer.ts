/**
 * A bare OAuth token issuer on loopback: an Ed25519 key, its JWKS served over HTTP (any path), and
 * access tokens for any subject and audience, as an MCP client's authorization server would issue
 * them. For tests of callers that bring a bearer JWT; an OpenID Provider with sign-in flows is
 * oidc-provider.ts.
 *
 * @example
 *   const issuer = await startJwtIssuer(t);
 *   const inline = { actor: { jwt: { issuer: issuer.issuer, audience: endpoint, jwks_url: issuer.jwksUrl } } };
 *   const token = await issuer.sign('agent-1', endpoint);
 */
import { createServer } from 'node:http';
import { exportJWK, generateKeyPair, SignJWT } from 'jose';
import type { Test } from 'tap';
import { closeServer, listen } from './loopback.js';

export interface TestJwtIssuer {
  /** The `iss` of its tokens: the server's URL with a trailing slash. */
  issuer: string;
  jwksUrl: string;
  /** A token for `sub`, for `audience`, valid ten minutes. */
  sign(sub: string, audience: string): Promise<string>;
}

/** Starts the issuer; it stops at the test's teardown. */
export async function startJwtIssuer(t: Test): Promise<TestJwtIssuer> {
  const { publicKey, privateKey } = await generateKeyPair('EdDSA', { crv: 'Ed25519', extractable: true });
  const jwk = { ...(await exportJWK(publicKey)), kid: 'k1', alg: 'EdDSA', use: 'sig' };
  const server = createServer((_req, res) => res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ keys: [jwk] })));
  const url = await listen(server);
  t.teardown(() => closeServer(server));
  const issuer = `${url}/`;
  return {
    issuer,
    jwksUrl: `${url}/jwks.json`,
    sign: (sub, audience) =>
      new SignJWT({}).setProtectedHeader({ alg: 'EdDSA', kid: 'k1' }).setSubject(sub).setIssuer(issuer).setAudience(audience).setIssuedAt().setExpirationTime('10m').sign(privateKey),
  };
}
