/**
 * The console's session (docs/console.md): a development sign-in with an API key gives an
 * HttpOnly, SameSite=Strict cookie that the public API accepts; every request that changes
 * something must also carry the session's CSRF token; revoking the key or signing out ends the
 * session at once; and the console's pages are served with a strict Content-Security-Policy.
 */
import t from 'tap';
import { ConsoleSession, ConsoleSignedIn } from '../../shared/wire/console.js';
import { type TestAuthority, withTestAuthority } from '../helpers/authority.js';
import { appBackends } from '../helpers/backends.js';

const SIGN_IN = '/console/api/sign-in/api-key';

function cookieOf(setCookie: string | string[] | undefined): string {
  const header = [setCookie ?? []].flat().find((line) => line.startsWith('countersign_session='));
  if (!header) throw new Error(`no session cookie in ${JSON.stringify(setCookie)}`);
  return header.split(';')[0] as string;
}

async function signIn(authority: TestAuthority, key: string) {
  const response = await authority.app.inject({ method: 'POST', url: SIGN_IN, headers: authority.bearer(key) });
  if (response.statusCode !== 200) throw new Error(`sign-in answered ${response.statusCode}: ${response.body}`);
  return { session: ConsoleSignedIn.parse(response.json()), cookie: cookieOf(response.headers['set-cookie']), setCookie: response.headers['set-cookie'] };
}

const session = async (authority: TestAuthority, cookie?: string) =>
  ConsoleSession.parse((await authority.app.inject({ method: 'GET', url: '/console/api/session', headers: cookie ? { cookie } : {} })).json());

const demo = { action_type: 'demo.echo', actor_id: 'console-test', context: { environment: 'dev', target: { type: 'demo', id: 'console' } } };

for (const backend of appBackends()) {
  t.test(`console sessions on ${backend.name}`, (t) =>
    withTestAuthority(
      t,
      backend,
      async (authority) => {
        t.same(await session(authority), { signed_in: false, sign_in: { oidc: false, api_key: true } }, 'no cookie: signed out, and how to sign in');

        const key = await authority.key(['evaluate:write', 'approvals:read']);
        const { session: signedIn, cookie, setCookie } = await signIn(authority, key);
        t.match(String([setCookie].flat()[0]), /; HttpOnly; SameSite=Strict/, 'the cookie is HttpOnly and SameSite=Strict');
        t.notMatch(String([setCookie].flat()[0]), /Secure/, 'and not Secure over plain http');
        t.match(signedIn, { method: 'api_key', role: null, organization: { id: authority.acme.id }, permissions: ['approvals:read', 'evaluate:write'] });
        t.match(signedIn.identity, /^api_key:[0-9a-f-]{36}$/, 'the identity is the key (its own root)');
        t.match(signedIn.display_name, /^API key "test key" \(ask_(live|test)_.{4}…\)$/, 'named by its name and prefix, never its secret');
        t.notMatch(JSON.stringify(signedIn), key, 'the secret is nowhere in the answer');
        t.same(await session(authority, cookie), signedIn, 'the session endpoint answers the same with the cookie');

        const read = await authority.app.inject({ method: 'GET', url: '/v1/approvals', headers: { cookie } });
        t.equal(read.statusCode, 200, 'the public API accepts the cookie for a read, without a CSRF token');

        const post = (headers: Record<string, string>) =>
          authority.app.inject({ method: 'POST', url: '/v1/evaluate', headers: { cookie, 'content-type': 'application/json', ...headers }, payload: JSON.stringify(demo) });
        const withoutToken = await post({});
        t.equal(withoutToken.statusCode, 403, 'a change without the CSRF token is refused');
        t.match(withoutToken.json(), { error: 'forbidden', message: /x-csrf-token/ });
        t.equal((await post({ 'x-csrf-token': 'not-the-token' })).statusCode, 403, 'so is one with a wrong token');
        const evaluated = await post({ 'x-csrf-token': signedIn.csrf_token });
        t.equal(evaluated.statusCode, 200, 'with the token it goes through');
        t.match(evaluated.json(), { decision: /^(allow|deny|hold|escalate)$/, evaluation_id: String }, 'and is decided');

        const keyId = signedIn.identity.slice('api_key:'.length);
        const revoked = await authority.app.inject({ method: 'POST', url: `/v1/api-keys/${keyId}/revoke`, headers: authority.bearer(authority.acmeAdmin) });
        t.equal(revoked.statusCode, 200);
        t.equal((await authority.app.inject({ method: 'GET', url: '/v1/approvals', headers: { cookie } })).statusCode, 401, "revoking the key ends the session's access at once");
        t.same(await session(authority, cookie), { signed_in: false, sign_in: { oidc: false, api_key: true } }, 'and the console shows it signed out');

        const second = await signIn(authority, await authority.key(['approvals:read']));
        const signOut = await authority.app.inject({ method: 'POST', url: '/console/api/sign-out', headers: { cookie: second.cookie, 'x-csrf-token': second.session.csrf_token } });
        t.equal(signOut.statusCode, 204);
        t.match(String([signOut.headers['set-cookie']].flat()[0]), /^countersign_session=; .*Max-Age=0/, 'signing out clears the cookie');
        t.equal((await authority.app.inject({ method: 'GET', url: '/v1/approvals', headers: { cookie: second.cookie } })).statusCode, 401, 'and the session is gone on the server');

        const forged = await authority.app.inject({ method: 'GET', url: '/v1/approvals', headers: { cookie: 'countersign_session=AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA' } });
        t.equal(forged.statusCode, 401, 'a made-up session token is refused');

        const page = await authority.app.inject({ method: 'GET', url: '/console/inbox' });
        t.equal(page.statusCode, 200, 'a console page is index.html');
        t.match(page.headers['content-security-policy'], /default-src 'none'; script-src 'self'; style-src 'self'/, 'with a strict CSP');
        t.equal(page.headers['x-frame-options'], 'DENY');
        t.equal((await authority.app.inject({ method: 'GET', url: '/console/assets/missing.js' })).statusCode, 404, 'a missing asset is a 404');
        t.equal((await authority.app.inject({ method: 'GET', url: '/console/../openapi.json' })).statusCode, 200, 'a path out of /console is not a console path');
      },
      { console: { api_key_sign_in: true } },
    ),
  );

  t.test(`over TLS the session cookie is Secure and __Host- prefixed, on ${backend.name}`, (t) =>
    withTestAuthority(
      t,
      backend,
      async (authority) => {
        const key = await authority.key(['approvals:read']);
        const response = await authority.app.inject({ method: 'POST', url: SIGN_IN, headers: { ...authority.bearer(key), 'x-forwarded-proto': 'https' } });
        t.equal(response.statusCode, 200);
        const setCookie = String([response.headers['set-cookie']].flat()[0]);
        t.match(setCookie, /^__Host-countersign_session=[A-Za-z0-9_-]{43}; Path=\/; Max-Age=\d+; HttpOnly; SameSite=Strict; Secure$/);
        const cookie = setCookie.split(';')[0] as string;
        t.equal((await authority.app.inject({ method: 'GET', url: '/v1/approvals', headers: { cookie } })).statusCode, 200, 'and the API accepts it');
      },
      { console: { api_key_sign_in: true }, trust_proxy: true },
    ),
  );

  t.test(`console sign-in with an API key is off by default, on ${backend.name}`, (t) =>
    withTestAuthority(t, backend, async (authority) => {
      const response = await authority.app.inject({ method: 'POST', url: SIGN_IN, headers: authority.bearer(authority.acmeAdmin) });
      t.equal(response.statusCode, 404);
      t.match(response.json(), { error: 'not_found', message: /console.api_key_sign_in/ });
      t.same(await session(authority), { signed_in: false, sign_in: { oidc: false, api_key: false } });
    }),
  );
}
