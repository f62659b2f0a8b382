/**
 * A complete authority app for tests, over a given backend, with two organizations (`acme`, a
 * test organization, and `globex`), an admin key in each, a throwaway identity provider, a manual
 * clock and captured log lines. Every answer of its `app.inject` is checked against the OpenAPI
 * document (`openApiProblems`; withTestAuthority asserts there are none).
 *
 * @example
 *   const authority = await createTestAuthority(await backend.open());
 *   const response = await authority.app.inject({ method: 'GET', url: '/v1/api-keys', headers: authority.bearer(authority.acmeAdmin) });
 */
import { Writable } from 'node:stream';
import { randomBytes } from 'node:crypto';
import type { FastifyInstance, InjectOptions, LightMyRequestResponse } from 'fastify';
import { buildAuthorityApp } from '../../authority/app.js';
import { openApiDocument } from '../../authority/openapi/document.js';
import { createApiKey } from '../../authority/api-keys/keys.js';
import { createJwtVerifier } from '../../authority/auth/jwt.js';
import { parseAuthorityConfig, type AuthorityConfigInput } from '../../authority/config.js';
import type { ConsoleFiles } from '../../authority/console/static.js';
import { createAuthorityMetrics, type AuthorityMetrics } from '../../authority/metrics.js';
import { createOrganization, type Organization } from '../../authority/orgs/organizations.js';
import { PolicyVersions } from '../../authority/policy/versions.js';
import { readBootstrapPolicy } from '../../authority/orgs/bootstrap.js';
import { SigningKeys } from '../../authority/signing/keys.js';
import { SecretBox } from '../../authority/signing/secret-box.js';
import { createLogger } from '../../shared/logging.js';
import { SCOPES, type Scope } from '../../shared/wire/scopes.js';
import type { Test } from 'tap';
import type { AppBackend, OpenedBackend } from './backends.js';
import { ManualClock } from './clock.js';
import { createTestIdp, TEST_AUDIENCE, TEST_ISSUER, type TestIdp } from './jwt.js';
import { OpenApiResponses } from './openapi-responses.js';

export interface TestAuthority {
  app: FastifyInstance;
  backend: OpenedBackend;
  clock: ManualClock;
  metrics: AuthorityMetrics;
  keys: SigningKeys;
  policies: PolicyVersions;
  /** The box the app seals secrets with (webhook signing secrets). */
  secrets: SecretBox;
  idp: TestIdp;
  acme: Organization;
  globex: Organization;
  acmeAdmin: string;
  globexAdmin: string;
  /** Every log line written so far, raw. */
  logs: string[];
  /** Answers to `app.inject` that the OpenAPI document does not describe (withTestAuthority asserts none). */
  openApiProblems: string[];
  /** Creates a key in `org` (default acme) and returns its secret. */
  key(scopes: readonly Scope[], options?: { org?: Organization; allowedCidrs?: string[]; expiresAt?: Date }): Promise<string>;
  bearer(token: string): Record<string, string>;
  close(): Promise<void>;
}

export async function createTestAuthority(
  backend: OpenedBackend,
  options: { config?: AuthorityConfigInput; clock?: ManualClock; store?: OpenedBackend['store']; logLevel?: 'info' | 'warn'; consoleFiles?: ConsoleFiles } = {},
): Promise<TestAuthority> {
  const clock = options.clock ?? new ManualClock();
  const idp = await createTestIdp();
  const config = parseAuthorityConfig({
    log_level: 'info',
    auth: { jwt: { issuer: TEST_ISSUER, audience: TEST_AUDIENCE, jwks_file: idp.jwksFile } },
    ...options.config,
  });
  const { db } = backend;
  const logs: string[] = [];
  const destination = new Writable({
    write(chunk, _encoding, done) {
      logs.push(String(chunk));
      done();
    },
  });
  const metrics = createAuthorityMetrics();
  const secrets = new SecretBox(randomBytes(32));
  const keys = new SigningKeys(db, secrets, clock, { publishBeforeUseMs: 120_000 });
  await keys.ensure('permit');
  await keys.ensure('audit');
  const policies = new PolicyVersions(db, clock);
  const example = await readBootstrapPolicy(undefined);
  const acme = await createOrganization(db, { name: `acme-${Math.random().toString(36).slice(2, 8)}`, isTest: true }, clock);
  const globex = await createOrganization(db, { name: `globex-${Math.random().toString(36).slice(2, 8)}` }, clock);
  // Both organizations start with the example policy, as organization `default` does.
  for (const org of [acme, globex]) {
    const stored = await db.transaction((tx) => policies.put(tx, { orgId: org.id, ...example, createdBy: 'test', requestId: null }));
    org.policyVersion = stored.version;
  }
  const key: TestAuthority['key'] = async (scopes, keyOptions = {}) => {
    const created = await createApiKey(
      db,
      {
        org: keyOptions.org ?? acme,
        name: 'test key',
        scopes,
        allowedCidrs: keyOptions.allowedCidrs,
        expiresAt: keyOptions.expiresAt,
        createdBy: 'test',
      },
      clock,
    );
    return created.secret;
  };
  const app = await buildAuthorityApp({
    config,
    db,
    store: options.store ?? backend.store,
    clock,
    metrics,
    logger: createLogger({ name: 'authority', level: options.logLevel ?? 'info', destination }),
    jwt: config.auth.jwt ? await createJwtVerifier(config.auth.jwt) : null,
    keys,
    policies,
    secrets,
    consoleFiles: options.consoleFiles ?? TEST_CONSOLE_FILES,
  });
  const openApiProblems = recordOpenApiProblems(app);
  return {
    app,
    backend,
    clock,
    metrics,
    keys,
    policies,
    secrets,
    idp,
    acme,
    globex,
    acmeAdmin: await key(SCOPES),
    globexAdmin: await key(SCOPES, { org: globex }),
    logs,
    openApiProblems,
    key,
    bearer: (token) => ({ authorization: `Bearer ${token}` }),
    close: () => app.close(),
  };
}

/** A stand-in for the built console (dist/console), so the API's tests do not need the front end built. */
export const TEST_CONSOLE_FILES: ConsoleFiles = new Map([
  ['index.html', { body: Buffer.from('<!doctype html><html lang="en"><title>Countersign console</title></html>'), contentType: 'text/html; charset=utf-8', immutable: false }],
]);

/** Rate limits out of the way: suites that send many requests within one clock minute. */
export const GENEROUS_LIMITS = {
  rate_limits: {
    evaluate: { per_minute: 1_000_000, burst: 1_000_000 },
    plans: { community: { per_minute: 1_000_000, burst: 1_000_000 }, business: { per_minute: 1_000_000, burst: 1_000_000 } },
    unauthenticated: { per_minute: 1_000_000, burst: 1_000_000 },
  },
};

/**
 * Runs `fn` with a fresh authority on `backend` (a manual clock starting now, generous rate limits,
 * `config` on top), closed and cleaned up when the test ends.
 *
 * @example
 *   t.test('…', (t) => withTestAuthority(t, backend, async (authority) => { … }));
 */
export async function withTestAuthority(t: Test, backend: AppBackend, fn: (authority: TestAuthority) => Promise<void>, config: AuthorityConfigInput = {}): Promise<void> {
  const clock = new ManualClock(Date.now());
  const opened = await backend.open({ now: () => clock.now() });
  const authority = await createTestAuthority(opened, { config: { ...GENEROUS_LIMITS, ...config }, clock });
  t.teardown(async () => {
    await authority.close();
    await opened.cleanup();
  });
  await fn(authority);
  t.same(authority.openApiProblems, [], 'every answer the test received is one the OpenAPI document describes');
}

/** One checker per distinct document (self-hosted and hosted differ), so schemas compile once per run. */
const checkers = new Map<string, OpenApiResponses>();

/**
 * Checks every answer `app.inject` gives against the app's OpenAPI document
 * (test/helpers/openapi-responses.ts) and collects the mismatches. Requests to paths the document
 * has no operation for (unknown paths, HEAD) are not checked.
 */
function recordOpenApiProblems(app: FastifyInstance): string[] {
  const problems: string[] = [];
  let checker: OpenApiResponses | undefined;
  const inject = app.inject.bind(app) as (options: InjectOptions | string) => Promise<LightMyRequestResponse>;
  const checked = async (options: InjectOptions | string): Promise<LightMyRequestResponse> => {
    // The chained form (`inject().get(…)`) is passed through unchecked.
    if (options === undefined) return inject(options as never);
    const response = await inject(options);
    const method = typeof options === 'string' ? 'GET' : String(options.method ?? 'GET');
    const url = typeof options === 'string' ? options : typeof options.url === 'string' ? options.url : (options.path as string | undefined);
    if (url === undefined) return response;
    if (!checker) {
      const document = openApiDocument(app);
      const key = JSON.stringify(document);
      checker = checkers.get(key) ?? new OpenApiResponses(document);
      checkers.set(key, checker);
    }
    if (checker.locate(method, url) === null) return response;
    let body: unknown = response.body;
    if (String(response.headers['content-type'] ?? '').includes('json')) {
      try {
        body = JSON.parse(response.body);
      } catch {
        // Left as text: the check reports it as a body off the schema.
      }
    }
    problems.push(...checker.check({ method, url, status: response.statusCode, body }));
    return response;
  };
  (app as unknown as { inject: typeof checked }).inject = checked;
  return problems;
}
