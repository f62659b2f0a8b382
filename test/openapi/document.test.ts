/**
 * The OpenAPI document describes every route the authority serves: each one is a documented
 * operation or an alias listed in its operation's `x-aliases` (nothing is hidden; the HEAD routes
 * fastify adds for each GET are not listed, as HEAD answers what GET answers without a body).
 * Every `/v1-…` route has its slash twin. Operations carry ids, summaries, access and their error
 * answers, and `GET /openapi.json` serves the same document without a credential.
 */
import t from 'tap';
import { canonicalPath } from '../../authority/openapi/aliases.js';
import { openApiDocument } from '../../authority/openapi/document.js';
import { servedRoutes } from '../helpers/served-routes.js';
import { createTestAuthority, type TestAuthority } from '../helpers/authority.js';
import { appBackends } from '../helpers/backends.js';
import { OpenApiResponses } from '../helpers/openapi-responses.js';

type Json = Record<string, any>;

/** Routes deliberately left out of the document, with the reason. */
const CONSOLE_ONLY = "the console's own pages and sign-in (docs/console.md), not the public API";
const HIDDEN: Readonly<Record<string, string>> = {
  'GET /console': CONSOLE_ONLY,
  'GET /console/*': CONSOLE_ONLY,
  'GET /console/api/session': CONSOLE_ONLY,
  'GET /console/api/identities': CONSOLE_ONLY,
  'POST /console/api/sign-in/api-key': CONSOLE_ONLY,
  'POST /console/api/sign-out': CONSOLE_ONLY,
  'GET /console/sign-in/oidc': CONSOLE_ONLY,
  'GET /console/sign-in/callback': CONSOLE_ONLY,
};

const toDocumentPath = (url: string) => url.replace(/:([A-Za-z0-9_]+)/g, '{$1}');

function operationsOf(document: Json): Array<{ method: string; path: string; operation: Json }> {
  return Object.entries(document.paths as Json).flatMap(([path, item]) =>
    Object.entries(item as Json).map(([method, operation]) => ({ method: method.toUpperCase(), path, operation: operation as Json })),
  );
}

const backend = appBackends()[0]!;

t.test('the document and the routes the app serves', async (t) => {
  const opened = await backend.open();
  const authority = await createTestAuthority(opened);
  t.teardown(async () => {
    await authority.close();
    await opened.cleanup();
  });
  const document = openApiDocument(authority.app) as Json;
  const operations = operationsOf(document);
  const routes = servedRoutes(authority.app);
  t.ok(routes.length >= 30, `the app serves routes (${routes.length})`);

  t.test('every route is an operation or an alias of one', async (t) => {
    for (const route of routes) {
      const [method, url] = route.split(' ') as [string, string];
      if (HIDDEN[route]) continue;
      const direct = document.paths[toDocumentPath(url)]?.[method.toLowerCase()];
      if (direct) {
        t.ok(direct, `${route} is documented`);
        continue;
      }
      const owner = document.paths[toDocumentPath(canonicalPath(url))]?.[method.toLowerCase()];
      t.ok(owner?.['x-aliases']?.includes(url), `${route} is listed as an alias of ${method} ${canonicalPath(url)}`);
    }
    const described = operations.flatMap(({ method, path, operation }) => [path, ...operation['x-aliases']].map((url: string) => `${method} ${url.replace(/\{([^}]+)\}/g, ':$1')}`));
    t.same(described.sort(), routes.filter((route) => !HIDDEN[route]), 'and the document describes no route the app does not serve');
  });

  t.test('every function-style route has its slash twin, and the SDK\'s pairs are served', async (t) => {
    for (const route of routes) {
      const [method, url] = route.split(' ') as [string, string];
      if (canonicalPath(url) !== url) t.ok(routes.includes(`${method} ${canonicalPath(url)}`), `${route} has ${method} ${canonicalPath(url)}`);
    }
    for (const [slash, dashed] of [
      ['/v1/evaluate', '/v1-evaluate'],
      ['/v1/verify-permit', '/v1-verify-permit'],
      ['/v1/webhooks', '/v1-webhooks'],
      ['/v1/api-key-self', '/v1-api-key-self'],
      ['/v1/audit/events', '/v1-audit/events'],
    ]) {
      const method = routes.find((route) => route.endsWith(` ${slash}`))?.split(' ')[0];
      t.ok(method, `${slash} is served`);
      t.ok(routes.includes(`${method} ${dashed}`), `and ${dashed}`);
    }
    t.ok(routes.includes('POST /functions/v1/v1-verify-permit') && routes.includes('POST /functions/v1/v1-webhooks'), 'the hosted runtime\'s function paths stay');
  });

  t.test('every operation says what it is, who may call it and how it fails', async (t) => {
    const ids = operations.map(({ operation }) => operation.operationId);
    t.equal(new Set(ids).size, ids.length, 'operation ids are unique');
    const tags = new Set((document.tags as Json[]).map((tag) => tag.name));
    for (const { method, path, operation } of operations) {
      const name = `${method} ${path}`;
      t.match(operation, { operationId: String, summary: String, description: String, tags: [String] }, `${name} has an id, a summary, a description and a tag`);
      t.ok(tags.has(operation.tags[0]), `${name}'s tag is declared`);
      t.ok(Array.isArray(operation['x-required-scopes']), `${name} lists its required scopes`);
      const publicRoute = ['/healthz', '/readyz', '/openapi.json', '/.well-known/authzen-configuration'].includes(path);
      t.same(operation.security.length === 0, publicRoute, `${name} ${publicRoute ? 'needs no' : 'needs a'} credential`);
      const statuses = Object.keys(operation.responses);
      t.ok(statuses.some((status) => status.startsWith('2')), `${name} has a success answer`);
      if (!publicRoute) {
        for (const status of ['401', '403', '429', '503']) {
          t.match(operation.responses[status], { $ref: String }, `${name} documents ${status} with a shared error response`);
        }
        t.match(operation.description, /\*\*Access:\*\*/, `${name} says who may call it`);
      }
      // AuthZEN answers a body that is not JSON with 400, the rest of the API with 415.
      const notJson = path.startsWith('/access/v1/') ? [] : ['415'];
      if (operation.requestBody) for (const status of ['400', '413', ...notJson]) t.ok(operation.responses[status], `${name} documents ${status}`);
    }
    const evaluate = document.paths['/v1/evaluate'].post;
    t.same(evaluate['x-required-scopes'], ['evaluate:write']);
    t.same(evaluate['x-aliases'], ['/v1-evaluate', '/functions/v1/v1-evaluate']);
    t.same(evaluate['x-rate-limit'], { bucket: 'evaluate', exceeded: 'unavailable' });
    t.same(document.paths['/v1/permits'].get['x-rate-limit'], { bucket: 'api', exceeded: 'rate_limited' });
    for (const path of ['/access/v1/evaluation', '/access/v1/evaluations']) {
      t.same(document.paths[path].post['x-required-scopes'], ['evaluate:write'], `${path} needs what evaluate needs`);
      t.same(document.paths[path].post['x-rate-limit'], { bucket: 'evaluate', exceeded: 'unavailable' }, `${path} draws from the evaluate bucket`);
    }
    t.same(document.paths['/.well-known/authzen-configuration'].get.security, [], 'the AuthZEN discovery document needs no credential');
    t.same(document.paths['/v1/policies'].get['x-required-scopes'], ['policy:read', 'policy:write'], 'a list of scopes means any one of them');
    t.same(document.paths['/v1/session'].get.security, [{ userToken: [] }], 'the session is for user tokens');
    t.same(document.paths['/v1/escalations'].post['x-required-scopes'], [], 'any credential creates an escalation');
    const envelope = document.components.schemas.ErrorEnvelope;
    t.same(envelope.required, ['error', 'message', 'status', 'request_id'], 'the error envelope is a shared component');
    t.match(document.components.responses.NotFound.description, /`not_found`/, 'error responses name their codes');
    t.same(Object.keys(document.components.securitySchemes).sort(), ['apiKey', 'serviceKey', 'userToken']);
  });

  t.test('GET /openapi.json serves the document without a credential', async (t) => {
    const response = await authority.app.inject({ method: 'GET', url: '/openapi.json' });
    t.equal(response.statusCode, 200);
    t.match(response.headers['content-type'], /^application\/json/);
    t.same(response.json(), document);
    t.equal(document.openapi, '3.1.0');
  });

  t.test('the response checker refuses what the document does not describe', async (t) => {
    const responses = new OpenApiResponses(document);
    t.same(responses.check({ method: 'GET', url: '/healthz', status: 200, body: { status: 'ok' } }), [], 'a documented answer passes');
    t.match(responses.check({ method: 'GET', url: '/healthz', status: 200, body: { status: 'fine' } }), [/body does not match/], 'a body off the schema');
    t.match(responses.check({ method: 'GET', url: '/v1/permits/p1', status: 418, body: {} }), [/status 418 is not documented/], 'an undocumented status');
    t.match(responses.check({ method: 'GET', url: '/v1/nothing', status: 200, body: {} }), [/no operation/], 'an unknown path');
    t.match(responses.check({ method: 'GET', url: '/v1-api-key-self', status: 401, body: { error: 'unauthorized', message: 'm', status: 401 } }), [/request_id/], 'an envelope without request_id');
    t.equal(responses.locate('POST', '/functions/v1/v1-evaluate')?.path, '/v1/evaluate', 'aliases lead to their operation');
  });

  t.test('a test authority checks the answers of its inject against the document', async (t) => {
    const seen: string[] = [];
    const original = OpenApiResponses.prototype.check;
    OpenApiResponses.prototype.check = function (this: OpenApiResponses, answer) {
      seen.push(`${answer.method} ${answer.url} ${answer.status}`);
      return original.call(this, answer);
    };
    t.teardown(() => {
      OpenApiResponses.prototype.check = original;
    });
    await authority.app.inject({ method: 'GET', url: '/v1/permits/nope', headers: authority.bearer(authority.acmeAdmin) });
    await authority.app.inject({ method: 'GET', url: '/v1/no-such-endpoint' });
    t.same(seen, ['GET /v1/permits/nope 404'], 'an operation\'s answer is checked; an unknown path is not an operation');
    t.same(authority.openApiProblems, [], 'and it matched');
  });
});

t.test('a hosted deployment documents no escalation endpoint, as it serves none', async (t) => {
  const opened = await backend.open();
  const authority = await createTestAuthority(opened, { config: { deployment: 'hosted' } });
  t.teardown(async () => {
    await authority.close();
    await opened.cleanup();
  });
  const paths = Object.keys((openApiDocument(authority.app) as Json).paths);
  t.notOk(paths.some((path) => path.startsWith('/v1/escalations')), 'no /v1/escalations path');
  t.ok(paths.includes('/v1/evaluate'));
});
