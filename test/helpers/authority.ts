/**
 * A complete authority app for tests, over a given backend, with two organizations (`acme`, a
 * test organization, and `globex`), an admin key in each, a throwaway identity provider, a manual
 * clock and captured log lines.
 *
 * @example
 *   const authority = await createTestAuthority(await backend.open());
 *   const response = await authority.app.inject({ method: 'GET', url: '/v1/api-keys', headers: authority.bearer(authority.acmeAdmin) });
 */
import { Writable } from 'node:stream';
import { randomBytes } from 'node:crypto';
import type { FastifyInstance } from 'fastify';
import { buildAuthorityApp } from '../../authority/app.js';
import { createApiKey } from '../../authority/api-keys/keys.js';
import { createJwtVerifier } from '../../authority/auth/jwt.js';
import { parseAuthorityConfig, type AuthorityConfigInput } from '../../authority/config.js';
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
  /** Creates a key in `org` (default acme) and returns its secret. */
  key(scopes: readonly Scope[], options?: { org?: Organization; allowedCidrs?: string[]; expiresAt?: Date }): Promise<string>;
  bearer(token: string): Record<string, string>;
  close(): Promise<void>;
}

export async function createTestAuthority(
  backend: OpenedBackend,
  options: { config?: AuthorityConfigInput; clock?: ManualClock; store?: OpenedBackend['store']; logLevel?: 'info' | 'warn' } = {},
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
  });
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
    key,
    bearer: (token) => ({ authorization: `Bearer ${token}` }),
    close: () => app.close(),
  };
}

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
}
