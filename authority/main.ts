/**
 * Starts the authority process: storage (Postgres or embedded PGlite), migrations, first-start
 * bootstrap, the shared store (Redis or in-process), the API and admin listeners (on the embedded
 * database, the admin listener also runs the CLI's administration commands: admin-channel/).
 * `close()` drains in-flight requests, then releases everything.
 *
 * @example
 *   const running = await startAuthority(await loadAuthorityConfig({ file: 'config/authority.yaml' }));
 *   running.apiUrl; // http://127.0.0.1:7070
 *   await running.close();
 */
import { mkdir } from 'node:fs/promises';
import type { AddressInfo } from 'node:net';
import type { FastifyInstance } from 'fastify';
import type { Logger } from 'pino';
import { Resources } from '../shared/lifecycle.js';
import { createLogger } from '../shared/logging.js';
import { processEd25519 } from '../shared/permits/ed25519.js';
import { startTelemetry, tracingSummary } from '../shared/telemetry/index.js';
import { openCheckedStore } from '../shared/store/open.js';
import type { SharedStore } from '../shared/store/types.js';
import { newChannelToken, removeChannelFile, writeChannelFile } from './admin-channel/channel.js';
import { buildAdminApp, buildAuthorityApp } from './app.js';
import { createJwtVerifier } from './auth/jwt.js';
import { ConfigError, type AuthorityConfig } from './config.js';
import { readConsoleClientSecret } from './console/client-secret.js';
import { createAuthorityMetrics } from './metrics.js';
import { writeCheckpoints } from './audit/checkpoints.js';
import { startEscalationSweeper } from './escalations/sweeper.js';
import { startApprovalExpirySweeper } from './approvals/expiry.js';
import { bootstrap, readBootstrapPolicy } from './orgs/bootstrap.js';
import { PolicyVersions } from './policy/versions.js';
import { auditKeysFrom } from './signing/audit-keys.js';
import { openSecretBox, openSigning } from './signing/open.js';
import type { SecretBox } from './signing/secret-box.js';
import { startVerificationDrain } from './verifications/drain.js';
import { startWebhookWorker } from './webhooks/worker.js';
import type { Db } from './store/db.js';
import { migrate } from './store/migrate.js';
import { openDb } from './store/open.js';
import { systemClock, type Clock } from './time.js';

export interface StartOptions {
  logger?: Logger;
  clock?: Clock;
  env?: NodeJS.ProcessEnv;
}

export interface RunningAuthority {
  app: FastifyInstance;
  admin: FastifyInstance;
  apiUrl: string;
  adminUrl: string;
  db: Db;
  store: SharedStore;
  close(): Promise<void>;
}

function urlOf(server: FastifyInstance): string {
  const address = server.server.address() as AddressInfo;
  const host = address.family === 'IPv6' ? `[${address.address}]` : address.address;
  return `http://${host}:${address.port}`;
}

/** Where a client on this machine reaches `server`: loopback when it listens on every address. */
function localUrlOf(server: FastifyInstance): string {
  const address = server.server.address() as AddressInfo;
  if (address.address === '0.0.0.0') return `http://127.0.0.1:${address.port}`;
  if (address.address === '::') return `http://[::1]:${address.port}`;
  return urlOf(server);
}

export async function startAuthority(config: AuthorityConfig, options: StartOptions = {}): Promise<RunningAuthority> {
  const env = options.env ?? process.env;
  const logger = options.logger ?? createLogger({ name: 'authority', level: config.log_level });
  const clock = options.clock ?? systemClock;

  if (config.database_url !== undefined && config.redis_url === undefined && config.store.topology === 'single' && !config.allow_in_process_store) {
    // Postgres means several replicas can run; without Redis they would not share replay
    // state or rate limits. Refuse unless the operator says this is one replica on purpose.
    throw new ConfigError(
      'DATABASE_URL is set but REDIS_URL is not: replicas would not share replay state and rate limits. ' +
        'Set REDIS_URL, or set allow_in_process_store: true (COUNTERSIGN_ALLOW_IN_PROCESS_STORE=1) for a single replica.',
    );
  }

  // Before anything is opened: a tracing variable it refuses stops the start with nothing to undo.
  const telemetry = await startTelemetry({ serviceName: 'countersign-authority', logger });
  let box: SecretBox;
  let db: Db;
  try {
    await mkdir(config.data_dir, { recursive: true, mode: 0o700 });
    // Before the database is touched: a missing secret key is a configuration error.
    box = await openSecretBox(config);
    db = await openDb({ databaseUrl: config.database_url, dataDir: config.data_dir });
  } catch (error) {
    await telemetry.shutdown();
    throw error;
  }
  // Released in reverse order of acquisition: listeners first (draining requests), the database,
  // then tracing last (the spans of the drained requests are exported).
  const resources = new Resources((error) => logger.error({ err: error }, 'error while closing'));
  resources.add(() => telemetry.shutdown());
  resources.add(() => db.close());
  const closeAll = () => resources.closeAll();
  try {
    const { applied } = await migrate(db);
    if (applied.length > 0) logger.info({ applied }, 'migrations applied');

    const keys = await openSigning(db, box, config, clock);
    const policies = new PolicyVersions(db, clock);
    const boot = await bootstrap(db, {
      dataDir: config.data_dir,
      clock,
      bootstrapKey: env.COUNTERSIGN_BOOTSTRAP_KEY || undefined,
      logger,
      policy: { versions: policies, ...(await readBootstrapPolicy(config.bootstrap_policy)) },
    });
    if (boot?.file) {
      logger.info({ organization_id: boot.organizationId, file: boot.file }, `first start: organization "default" created; its admin API key is in ${boot.file}`);
    } else if (boot) {
      logger.info({ organization_id: boot.organizationId }, 'first start: organization "default" created with the admin key from COUNTERSIGN_BOOTSTRAP_KEY');
    }

    const metrics = createAuthorityMetrics();
    // verify-permit consumes permits as a gate does: the store must keep its durability promise.
    const store = await openCheckedStore({ settings: config.store, redisUrl: config.redis_url, enforcing: true, logger, metrics: metrics.store, env });
    resources.add(() => store.close());
    const jwt = config.auth.jwt ? await createJwtVerifier(config.auth.jwt) : null;
    const consoleClientSecret = await readConsoleClientSecret(config, env);
    const deps = { config, db, store, clock, metrics, logger, jwt, keys, policies, secrets: box, consoleClientSecret };

    const app = await buildAuthorityApp(deps);
    resources.add(() => app.close());
    // On the embedded database only this process can open it: the administration commands come
    // here instead (admin-channel/), from whoever can read the data directory's channel file.
    const channel = db.kind === 'pglite' ? { token: newChannelToken(), context: { db, clock, signing: async () => keys } } : undefined;
    const admin = await buildAdminApp(deps, { channel });
    resources.add(() => admin.close());
    // Signed checkpoints of every chain head, so a truncated tail is detectable later.
    const auditKeys = auditKeysFrom(keys);
    const checkpointTimer = setInterval(() => {
      auditKeys
        .signer()
        .then((signer) => writeCheckpoints(db, signer, clock))
        .catch((error: unknown) => logger.error({ err: error }, 'audit checkpoint failed'));
    }, config.audit.checkpoint_interval_seconds * 1000);
    checkpointTimer.unref();
    resources.add(async () => clearInterval(checkpointTimer));
    // Records that gates wrote to the shared store (verifications, executions) reach the audit log,
    // once no gate can withdraw them any more: a gate settles a consume within its store timeout.
    const verificationDrain = startVerificationDrain(
      { db, store, clock },
      { intervalMs: 1_000, logger, settledForMs: recordSettleMs(config.store.command_timeout_ms) },
    );
    resources.add(() => verificationDrain.stop());
    // Escalation tiers that ran out are recorded (escalated / timed_out) even when nobody reads them.
    const escalationSweeper = startEscalationSweeper({ db, clock, metrics }, { intervalMs: config.escalations.sweep_interval_ms, logger });
    resources.add(() => escalationSweeper.stop());
    // Approval requests nobody decided in time are recorded as expired, in the chain.
    const approvalSweeper = startApprovalExpirySweeper({ db, clock }, { intervalMs: config.escalations.sweep_interval_ms, logger });
    resources.add(() => approvalSweeper.stop());
    // Webhook deliveries from the outbox; every replica runs a worker (claims never overlap).
    const webhookWorker = startWebhookWorker({ db, box, clock, metrics, config: config.webhooks, logger });
    resources.add(() => webhookWorker.stop());
    // Before listening: an engine COUNTERSIGN_ED25519 asks for that cannot load stops the start here.
    const ed25519 = processEd25519().engine;
    await app.listen({ host: config.listen.host, port: config.listen.port });
    await admin.listen({ host: config.admin_listen.host, port: config.admin_listen.port });
    if (channel) {
      await writeChannelFile(config.data_dir, { pid: process.pid, url: localUrlOf(admin), token: channel.token });
      // Released first: once closing starts, a command gets the "in use" answer instead of a drain.
      resources.add(() => removeChannelFile(config.data_dir, channel.token));
    }

    logger.info(
      { api: urlOf(app), admin: urlOf(admin), database: db.kind, store: store.kind, deployment: config.deployment, ed25519, tracing: tracingSummary(telemetry.settings) },
      'authority ready',
    );
    return { app, admin, apiUrl: urlOf(app), adminUrl: urlOf(admin), db, store, close: closeAll };
  } catch (error) {
    await closeAll();
    throw error;
  }
}

/**
 * How long a verification record waits in the stream before the drain takes it: twice the store
 * timeout (gates are configured with the same `store.command_timeout_ms`), at least 2 s. A gate
 * withdraws a `permit.verified` whose consume did not count within about one timeout.
 */
export function recordSettleMs(commandTimeoutMs: number): number {
  return Math.max(2_000, 2 * commandTimeoutMs);
}
