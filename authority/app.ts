/**
 * The authority's HTTP application, assembled from its capabilities. `buildAuthorityApp` does no
 * I/O of its own: tests build it over PGlite or Postgres and the in-process or Redis store and
 * drive it with `app.inject` or over loopback.
 *
 * @example
 *   const app = await buildAuthorityApp({ config, db, store, clock, metrics, logger, jwt: null });
 *   await app.listen({ host: '127.0.0.1', port: 0 });
 */
import { randomUUID } from 'node:crypto';
import type { IncomingMessage } from 'node:http';
import Fastify, { LogController, type FastifyBaseLogger, type FastifyInstance } from 'fastify';
import { validatorCompiler } from 'fastify-type-provider-zod';
import type { Logger } from 'pino';
import type { SharedStore } from '../shared/store/types.js';
import { tracing } from '../shared/telemetry/index.js';
import { adminChannelRoutes } from './admin-channel/routes.js';
import { apiKeyRoutes } from './api-keys/routes.js';
import { auditRoutes } from './audit/routes.js';
import { authzenRoutes } from './authzen/routes.js';
import { approvalRoutes } from './approvals/routes.js';
import { createAuthenticator } from './auth/authenticate.js';
import { consoleRoutes } from './console/routes.js';
import type { ConsoleFiles } from './console/static.js';
import { CredentialCache } from './auth/credential-cache.js';
import type { JwtVerifier } from './auth/jwt.js';
import { identityRoutes } from './auth/routes.js';
import type { AdminContext } from './cli/admin-operations.js';
import type { AuthorityConfig } from './config.js';
import { effectRoutes } from './effects/routes.js';
import { escalationRoutes } from './escalations/routes.js';
import { evaluateRoutes } from './evaluate/routes.js';
import { evaluateStreamRoutes } from './evaluate/stream.js';
import { gateRoutes } from './gates/routes.js';
import { storeEvaluations } from './evaluate/store.js';
import { healthRoutes } from './health/routes.js';
import { installBoundedInput, ROUTER_MAX_PARAM_LENGTH } from './http/bounded-input.js';
import { installDrainAnswer } from './http/drain.js';
import { answerFrameworkError, installErrorHandling } from './http/errors.js';
import { installGuard } from './http/guard.js';
import { responseSerializerCompiler } from './http/response-serializer.js';
import { installTracing } from './http/tracing.js';
import type { AuthorityMetrics } from './metrics.js';
import { registerOpenApi } from './openapi/document.js';
import { PublishedKeyResolver } from './permits/key-resolver.js';
import { ReplayEpochs } from './permits/replay-epochs.js';
import { permitRoutes } from './permits/routes.js';
import { verifyRoutes } from './permits/verify-route.js';
import { policyRoutes } from './policy/routes.js';
import type { PolicyVersions } from './policy/versions.js';
import { RateLimiter } from './ratelimit/limiter.js';
import { auditKeysFrom } from './signing/audit-keys.js';
import type { SigningKeys } from './signing/keys.js';
import type { SecretBox } from './signing/secret-box.js';
import type { Db } from './store/db.js';
import { GroupCommit } from './store/group-commit.js';
import type { Clock } from './time.js';
import { webhookRoutes } from './webhooks/routes.js';

export interface AuthorityDeps {
  config: AuthorityConfig;
  db: Db;
  store: SharedStore;
  clock: Clock;
  metrics: AuthorityMetrics;
  logger: Logger;
  jwt: JwtVerifier | null;
  keys: SigningKeys;
  policies: PolicyVersions;
  /** Seals secrets at rest (webhook signing secrets) and the console's sign-in state. */
  secrets: SecretBox;
  /** The console's OIDC client secret, when its client has one (authority/console/routes.ts). */
  consoleClientSecret?: string | undefined;
  /** The console's built pages; read from dist/console on first use when not given (tests give their own). */
  consoleFiles?: ConsoleFiles | null;
}

export const BODY_LIMIT_BYTES = 64 * 1024;

/** A caller's X-Request-ID is kept when it is a sane token; anything else gets a fresh UUID. */
const REQUEST_ID = /^[A-Za-z0-9._:-]{1,128}$/;
function requestIdFor(request: IncomingMessage): string {
  const given = request.headers['x-request-id'];
  return typeof given === 'string' && REQUEST_ID.test(given) ? given : randomUUID();
}

export async function buildAuthorityApp(deps: AuthorityDeps): Promise<FastifyInstance> {
  const app = Fastify({
    loggerInstance: deps.logger as FastifyBaseLogger,
    bodyLimit: BODY_LIMIT_BYTES,
    genReqId: requestIdFor,
    logController: new LogController({ requestIdLogLabel: 'request_id' }),
    trustProxy: deps.config.trust_proxy,
    forceCloseConnections: 'idle',
    // Requests during the drain are answered in our envelope (installDrainAnswer), not fastify's.
    return503OnClosing: false,
    frameworkErrors: answerFrameworkError,
    // Room for a permit token in a permit route's path; every other route is held to
    // DEFAULT_MAX_PARAM_LENGTH by installBoundedInput.
    routerOptions: { maxParamLength: ROUTER_MAX_PARAM_LENGTH },
  });
  app.setValidatorCompiler(validatorCompiler);
  app.setSerializerCompiler(responseSerializerCompiler);
  // JSON is the only body we accept; everything else is a 415.
  app.removeContentTypeParser(['text/plain']);
  // Tracing on: a server span per request, before every other hook (http/tracing.ts).
  if (tracing !== null) installTracing(app, tracing);

  app.addHook('onRequest', async (request, reply) => {
    reply.header('x-request-id', request.id);
  });
  installDrainAnswer(app);
  app.addHook('onResponse', async (request, reply) => {
    const route = request.routeOptions.url ?? 'unmatched';
    deps.metrics.httpRequests.inc({ method: request.method, route, status_code: String(reply.statusCode) });
    deps.metrics.httpDuration.observe({ method: request.method, route }, reply.elapsedTime / 1000);
  });

  installErrorHandling(app);
  installBoundedInput(app, { maxDepth: deps.config.limits.json_depth });
  const credentials = new CredentialCache({ metrics: deps.metrics, logger: deps.logger });
  credentials.start(deps.db);
  app.addHook('onClose', () => credentials.close());
  const authenticate = createAuthenticator({
    db: deps.db,
    credentials,
    clock: deps.clock,
    jwt: deps.jwt,
    xServiceKeyEnabled: deps.config.auth.x_service_key.enabled,
    metrics: deps.metrics,
  });
  const limiter = new RateLimiter(deps.store, deps.config.rate_limits, deps.clock);
  installGuard(app, { authenticate, limiter, metrics: deps.metrics });

  // Before any route: the OpenAPI plugin collects the routes as they are declared.
  await registerOpenApi(app);

  const keyResolver = new PublishedKeyResolver(deps.keys, deps.clock);
  // Postgres: while one batch holds its organizations' chain heads, the next one inserts its rows
  // on another connection. A third batch in flight made every batch smaller, and each costs
  // Postgres a statement and a commit: two ran faster on less CPU (docs/architecture.md, "Group
  // commit: two batches in flight").
  // PGlite has one connection: one at a time. storeEvaluations is one statement: its own
  // transaction, one round trip per batch.
  const writer = new GroupCommit(deps.db, storeEvaluations, { maxBatch: 128, maxInFlight: deps.db.kind === 'postgres' ? 2 : 1, transaction: false });
  healthRoutes(app, deps);
  identityRoutes(app);
  apiKeyRoutes(app, { ...deps, credentials });
  policyRoutes(app, { ...deps, credentials });
  const epochs = new ReplayEpochs(deps.store, deps.logger, { onReset: () => deps.metrics.store.stateResets.inc() });
  evaluateRoutes(app, { ...deps, writer, epochs });
  evaluateStreamRoutes(app, { ...deps, writer, epochs });
  authzenRoutes(app, { ...deps, writer, epochs, limiter });
  permitRoutes(app, { ...deps, keyResolver });
  verifyRoutes(app, { ...deps, keyResolver });
  effectRoutes(app, deps);
  approvalRoutes(app, deps);
  escalationRoutes(app, deps);
  webhookRoutes(app, deps);
  auditRoutes(app, { db: deps.db, keys: auditKeysFrom(deps.keys), clock: deps.clock });
  gateRoutes(app, deps);
  consoleRoutes(app, { ...deps, authenticate, limiter });

  await app.ready();
  return app;
}

/** The admin port: `/metrics` for Prometheus, and the health probes. Bind it to loopback or a private network. */
/**
 * The admin listener: metrics and probes, and, when `channel` is given (the embedded database),
 * the administration commands the CLI cannot run itself while this process holds the database.
 */
export async function buildAdminApp(
  deps: Pick<AuthorityDeps, 'db' | 'store' | 'metrics' | 'logger'>,
  options: { channel?: { token: string; context: AdminContext } | undefined } = {},
): Promise<FastifyInstance> {
  const app = Fastify({
    loggerInstance: deps.logger.child({ server: 'admin' }) as FastifyBaseLogger,
    // Scrapes and probes every few seconds would drown the log.
    logController: new LogController({ disableRequestLogging: true }),
    frameworkErrors: answerFrameworkError,
    return503OnClosing: false,
  });
  installDrainAnswer(app);
  installErrorHandling(app);
  app.get('/metrics', async (_request, reply) => {
    reply.type(deps.metrics.registry.contentType);
    return deps.metrics.registry.metrics();
  });
  healthRoutes(app, deps);
  if (options.channel) adminChannelRoutes(app, options.channel);
  await app.ready();
  return app;
}
