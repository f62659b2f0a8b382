/**
 * Starts the proxy process: configuration, the shared store, the authority's permit keys, the
 * gate, its front doors (the forwarding listener, and the Envoy external authorizer's gRPC and
 * HTTP listeners when `ext_authz` says so; `ext_authz.only` leaves out the forwarding one) and the
 * admin listener (`/metrics`, `/healthz`, `/readyz`), plus hot reload of the configuration file.
 * `close()` drains in-flight requests on every front door at once, then releases everything.
 *
 * - The authority being unreachable at start does not stop the start: the proxy listens, is not
 *   ready (`/readyz` 503, `checks.keys: unavailable`) and answers gated requests 503
 *   `gate_unavailable` (fail closed) until a refresh on the timer loads the keys.
 * - Without `redis_url` the proxy's in-process store is shared with nobody: permits would not be
 *   single-use across processes, revocations would not arrive and records would not reach the
 *   audit log. So a store is required: `options.store` (the all-in-one process shares the
 *   embedded authority's), or Redis from `redis_url`; the in-process store only when allowed
 *   (`allowInProcessStore`, `allow_in_process_store: true`, or `COUNTERSIGN_ALLOW_IN_PROCESS_STORE=1`).
 * - Reload (file watch; SIGHUP when `handleSighup` or via the CLI): the new file is validated as a
 *   whole; a valid one swaps `{config, table}` in one step for new requests (routes, modes,
 *   upstream, unmatched, permit header, issuer, audience, log level) on every front door, an
 *   invalid one keeps the last good one, logs every bad field and sets
 *   `countersign_proxy_config_reload_success` to 0. `listen`, `admin_listen`, `redis_url`,
 *   `organization`, `authority`, `ext_authz` and `records` need a restart: a change to them is
 *   logged and ignored, and the configuration in force keeps the old values.
 * - Records: every front door's refusals and executions go to the stream through one record
 *   backlog (record-backlog.ts), which holds what the store cannot take and writes it once the
 *   store is back; `close()` gives it `recordsCloseTimeoutMs` to do so after the front doors stop.
 *
 * @example
 *   const proxy = await startProxy('config/proxy.yaml', { store: authority.store });
 *   proxy.url;      // http://127.0.0.1:7080
 *   proxy.adminUrl; // http://127.0.0.1:7081 (GET /metrics, /healthz, /readyz)
 *   proxy.extAuthz; // { grpc: '127.0.0.1:9191', http: 'http://127.0.0.1:9192' } with an ext_authz section
 *   await proxy.reload(); // false: the file is invalid and the last good configuration stays
 *   await proxy.close();
 */
import { watch, type FSWatcher } from 'node:fs';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { Logger } from 'pino';
import { CountersignClient } from '../shared/client/client.js';
import { CountersignError } from '../shared/errors.js';
import { Resources } from '../shared/lifecycle.js';
import { createLogger } from '../shared/logging.js';
import { processEd25519 } from '../shared/permits/ed25519.js';
import { RemoteKeyResolver } from '../shared/permits/remote-keys.js';
import { verificationStream } from '../shared/permits/store-keys.js';
import { openCheckedStore } from '../shared/store/open.js';
import { startTelemetry, tracingSummary } from '../shared/telemetry/index.js';
import type { SharedStore } from '../shared/store/types.js';
import { handleAdmin } from './admin.js';
import { loadProxyConfig, ProxyConfigError, readProxyApiKey, type ProxyConfig } from './config.js';
import { requireOrganization } from './organization.js';
import { createExecutionRecords } from './execution-records.js';
import { openRecordBacklog } from './record-backlog.js';
import { forwards } from './ext-authz/config.js';
import { serveExtAuthz, type ExtAuthzListeners } from './ext-authz/serve.js';
import { createGate, type Gate } from './gate.js';
import { requestIdOf, sendError } from './http-messages.js';
import { createProxyMetrics, type ProxyMetrics } from './metrics.js';
import { gateState, type GateState } from './placement.js';
import { isReady, readinessChecks } from './readiness.js';
import { createProxyServer, proxyState, type ProxyServer, type ProxyState } from './server.js';

export interface StartProxyOptions {
  env?: NodeJS.ProcessEnv;
  /** Default: a JSON logger named `proxy` at the configuration's `log_level` (then kept in step on reload). */
  logger?: Logger;
  /** A store shared with an in-process authority (`npm start`); not closed by `close()`. */
  store?: SharedStore;
  /** Milliseconds since the epoch, for the gate and the key cache; default Date.now. */
  now?: () => number;
  /** Allow an in-process store of the proxy's own (one process, nothing shared); default from env. */
  allowInProcessStore?: boolean;
  /** How often the key set is refreshed when stale or never loaded; default 30 s. */
  keyRefreshIntervalMs?: number;
  /** Minimum time between two key fetches caused by unknown kids or retries; default 10 s. */
  keyRefreshCooldownMs?: number;
  /** Watch the configuration file and reload on change; default true. */
  watch?: boolean;
  /** Editors write a file in several steps: wait this long after the last event; default 200 ms. */
  watchDebounceMs?: number;
  /** Reload on SIGHUP (a process-wide handler, so only for the process entry); default false. */
  handleSighup?: boolean;
  /** /readyz gives the store this long to answer a ping; default 1 s. */
  readyTimeoutMs?: number;
  /** `close()` lets in-flight requests finish for up to this long, then cuts them; default 10 s. */
  drainTimeoutMs?: number;
  /** Then tries to write the records held for the store for up to this long; default 5 s. */
  recordsCloseTimeoutMs?: number;
}

export interface RunningProxy {
  /** The forwarding listener, `http://host:port`; '' with `ext_authz.only` (there is none). */
  url: string;
  /** The Envoy external authorizer's listeners that `ext_authz` configures. */
  extAuthz: { grpc?: string; http?: string };
  adminUrl: string;
  metrics: ProxyMetrics;
  /** The proxy's logger (the given one, or its own, whose level follows `log_level` on reload). */
  logger: Logger;
  /** The configuration in force. */
  config(): ProxyConfig;
  /** Re-reads and validates the file; true when the new configuration is in force. */
  reload(): Promise<boolean>;
  close(): Promise<void>;
}

/** Changing these needs a restart: they are bound to listeners, connections or the key cache. */
const RESTART_ONLY = ['listen', 'admin_listen', 'redis_url', 'store', 'organization', 'authority', 'ext_authz', 'records'] as const;

export async function startProxy(configFile: string, options: StartProxyOptions = {}): Promise<RunningProxy> {
  const env = options.env ?? process.env;
  const now = options.now ?? Date.now;
  // A bad file at start is the operator's to fix: throw, naming every bad field.
  const initial = requireOrganization(await loadProxyConfig(configFile, env), configFile);
  const ownLogger = options.logger === undefined;
  const logger = options.logger ?? createLogger({ name: 'proxy', level: initial.log_level });
  const apiKey = await readProxyApiKey(initial.authority);

  const allowInProcess = options.allowInProcessStore ?? (initial.allow_in_process_store || ['1', 'true'].includes(env.COUNTERSIGN_ALLOW_IN_PROCESS_STORE ?? ''));
  if (options.store === undefined && initial.redis_url === undefined && initial.store.topology === 'single' && !allowInProcess) {
    throw new ProxyConfigError(
      `${configFile} is invalid:\n  redis_url: required: the proxy shares replay state, revocations and records with the authority through Redis ` +
        '(an in-process store is shared with nobody; set allow_in_process_store: true or COUNTERSIGN_ALLOW_IN_PROCESS_STORE=1 to run one anyway, for development)',
    );
  }

  const resources = new Resources((error) => logger.error({ err: error }, 'error while closing'));
  const closeAll = () => resources.closeAll();

  try {
    // First, so that it is released last: the spans of the requests drained at shutdown are exported.
    const telemetry = await startTelemetry({ serviceName: 'countersign-proxy', logger });
    resources.add(() => telemetry.shutdown());
    const metrics = createProxyMetrics();
    const enforcing = initial.routes.some((route) => route.mode === 'enforce');
    const store =
      options.store ??
      (await openCheckedStore({ settings: initial.store, redisUrl: initial.redis_url, enforcing, logger, metrics: metrics.store, env }));
    if (options.store === undefined) resources.add(() => store.close());
    const client = new CountersignClient({ baseUrl: initial.authority.url, apiKey });
    resources.add(() => client.close());
    const keys = new RemoteKeyResolver({
      fetchKeys: () => client.permitKeys(),
      now,
      ...(options.keyRefreshCooldownMs !== undefined ? { refreshCooldownMs: options.keyRefreshCooldownMs } : {}),
      onRefresh: (result, error) => {
        if (result === 'skipped_cooldown') return;
        metrics.keyRefreshes.inc({ result: result === 'ok' ? 'success' : 'failure' });
        if (result === 'failed') logger.warn({ err: error }, 'could not refresh the permit keys from the authority; keeping the last good set');
      },
    });
    try {
      await keys.start();
    } catch (error) {
      // Fail closed per request (503) rather than not at all: the timer keeps trying.
      logger.error({ err: error, authority: initial.authority.url }, 'permit keys unavailable: gated requests get 503 until they load');
    }
    const refreshTimer = setInterval(() => void keys.refreshIfStale(), options.keyRefreshIntervalMs ?? 30_000);
    refreshTimer.unref();
    resources.add(async () => clearInterval(refreshTimer));

    // `organization` needs a restart, so every gate below appends to this one stream.
    const stream = verificationStream(initial.organization);
    // Every front door's refusals and executions go through this one backlog: a record the store
    // cannot take never changes an answer; it is held and written once the store is back.
    const records = await openRecordBacklog({
      store,
      stream,
      maxHeld: initial.records.backlog_max,
      ...(initial.records.backlog_file !== undefined ? { file: initial.records.backlog_file } : {}),
      logger,
      onAppendFailed: (count) => metrics.recordAppendFailures.inc(count),
      onDropped: (count, reason) => metrics.recordsDropped.inc({ reason }, count),
    });
    // After the front doors have closed (added later, so released earlier), before the store.
    resources.add(() => records.close(options.recordsCloseTimeoutMs ?? 5_000));
    metrics.setRecordsHeldSource(() => records.size());
    // execution.observed records, batched (execution-records.ts).
    const executionRecords = createExecutionRecords({ records });
    const buildGate = (config: ProxyConfig): Gate =>
      createGate({
        organization: config.organization,
        issuer: config.issuer,
        audience: config.audience,
        keys,
        store,
        now,
        permitHeader: config.permit_header,
        records,
        executionRecords,
      });
    let inner = buildGate(initial);
    metrics.setRecordBacklogSource(() => store.countRecords(stream));
    // The front doors hold one gate; this one forwards to the gate of the configuration in force.
    const gate: Gate = { check: (input) => inner.check(input), checkCall: (input) => inner.checkCall(input), refuseRequest: (input) => inner.refuseRequest(input) };
    // `ext_authz` needs a restart, so whether the proxy forwards stays as it started.
    const forwarding = forwards(initial);
    const stateOf = (config: ProxyConfig): GateState | ProxyState => (forwarding ? proxyState(config) : gateState(config));
    let state = stateOf(initial);
    metrics.setRouteModes(initial.routes);
    metrics.recordConfigReload(true, now());

    const drainTimeoutMs = options.drainTimeoutMs ?? 10_000;
    let proxy: ProxyServer | undefined;
    let extAuthz: ExtAuthzListeners | undefined;
    // close() cuts every connection; let the requests in flight on every front door finish first,
    // side by side (requests arriving meanwhile get the 503 envelope, or a refused call).
    resources.add(async () => {
      await Promise.all([proxy?.drain(drainTimeoutMs), extAuthz?.drain(drainTimeoutMs)]);
      await Promise.all([proxy?.close(), extAuthz?.close()]);
      // The forwarding server's close() closes them; without it, nothing else would.
      if (proxy === undefined) await executionRecords.close();
    });
    // Before listening: an engine COUNTERSIGN_ED25519 asks for that cannot load stops the start here.
    const ed25519 = processEd25519().engine;
    let url = '';
    if (forwarding) {
      // A forwarding proxy's state always has its upstream (stateOf above).
      proxy = createProxyServer({ current: () => state as ProxyState, gate, executionRecords, metrics, logger, keepAliveTimeoutMs: initial.keep_alive_timeout_ms });
      url = await listen(proxy.server, initial.listen);
    }
    const readyTimeoutMs = options.readyTimeoutMs ?? 1_000;
    const frontDoors = () => extAuthz?.checks() ?? {};
    // The gRPC health service reports what /readyz does.
    const ready = async () => isReady(await readinessChecks({ keys, store, readyTimeoutMs, frontDoors }));
    if (initial.ext_authz !== undefined) extAuthz = await serveExtAuthz(initial.ext_authz, { current: () => state, gate, metrics, logger, ready });

    const admin = createServer((req, res) => {
      handleAdmin(req, res, { metrics, keys, store, readyTimeoutMs, frontDoors }).catch((error: unknown) => {
        logger.error({ err: error }, 'admin request failed');
        sendError(res, requestIdOf(req), new CountersignError('internal'));
      });
    });
    resources.add(() => closeServer(admin));
    const adminUrl = await listen(admin, initial.admin_listen);

    const reloadOnce = async (): Promise<boolean> => {
      let next: ProxyConfig;
      try {
        next = requireOrganization(await loadProxyConfig(configFile, env), configFile);
      } catch (error) {
        metrics.recordConfigReload(false, now());
        logger.error({ err: error, file: configFile }, 'configuration reload refused; the last good configuration stays in force');
        return false;
      }
      const running = state.config;
      const ignored = RESTART_ONLY.filter((key) => JSON.stringify(next[key]) !== JSON.stringify(running[key]));
      if (ignored.length > 0) logger.warn({ fields: ignored }, 'configuration changes that need a restart were ignored');
      const kept: ProxyConfig = { ...next, ...Object.fromEntries(ignored.map((key) => [key, running[key]])) };
      if (forwarding && kept.upstream === undefined) {
        metrics.recordConfigReload(false, now());
        logger.error({ file: configFile }, 'configuration reload refused: upstream is required while the proxy forwards (ext_authz.only needs a restart); the last good configuration stays in force');
        return false;
      }
      const nextGate = buildGate(kept);
      // One assignment each, in the same tick: a request sees the old pair or the new one.
      inner = nextGate;
      state = stateOf(kept);
      metrics.setRouteModes(kept.routes);
      metrics.recordConfigReload(true, now());
      if (ownLogger) logger.level = kept.log_level;
      if (kept.unmatched === 'pass' && running.unmatched !== 'pass') warnPassThrough(logger);
      logger.info({ routes: kept.routes.map((route) => `${route.name}:${route.mode}`) }, 'configuration reloaded');
      return true;
    };
    // Reloads run one after another, so two quick edits cannot land out of order.
    let queue: Promise<boolean> = Promise.resolve(true);
    const reload = (): Promise<boolean> => (queue = queue.then(reloadOnce, reloadOnce));

    if (options.watch ?? true) {
      const watcher = watchConfigFile(configFile, options.watchDebounceMs ?? 200, () => void reload(), logger);
      resources.add(async () => watcher.close());
    }
    if (options.handleSighup) {
      const onHup = () => {
        logger.info('SIGHUP: reloading the configuration');
        void reload();
      };
      process.on('SIGHUP', onHup);
      resources.add(async () => void process.off('SIGHUP', onHup));
    }

    if (initial.unmatched === 'pass') warnPassThrough(logger);
    const extAuthzUrls = extAuthz?.urls ?? {};
    const listening = { proxy: url || 'off (ext_authz.only)', ext_authz: extAuthzUrls, admin: adminUrl, upstream: initial.upstream };
    logger.info({ ...listening, store: store.kind, keys_loaded: keys.ready(), ed25519, tracing: tracingSummary(telemetry.settings) }, 'proxy listening');
    return { url, extAuthz: extAuthzUrls, adminUrl, metrics, logger, config: () => state.config, reload, close: closeAll };
  } catch (error) {
    await closeAll();
    throw error;
  }
}

// ---- listeners and the file watcher ----

function listen(server: Server, address: { host: string; port: number }): Promise<string> {
  return new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(address.port, address.host, () => {
      server.off('error', reject);
      const bound = server.address() as AddressInfo;
      const host = bound.family === 'IPv6' ? `[${bound.address}]` : bound.address;
      resolve(`http://${host}:${bound.port}`);
    });
  });
}

function closeServer(server: Server): Promise<void> {
  if (!server.listening) return Promise.resolve();
  return new Promise((resolve) => {
    server.close(() => resolve());
    // Scrapers keep connections alive; the admin port has nothing in flight worth waiting for.
    server.closeAllConnections();
  });
}

/**
 * Calls `onChange` once per burst of events. Editors that save by writing a new file and renaming
 * it over the old one (vim, many IDEs, Kubernetes ConfigMap symlink swaps) leave the watch on a
 * file that no longer has the name: on 'rename' the watch is re-established on the path.
 */
function watchConfigFile(file: string, debounceMs: number, onChange: () => void, logger: Logger): { close(): void } {
  let watcher: FSWatcher | null = null;
  let timer: NodeJS.Timeout | null = null;
  let rewatch = false;
  let closed = false;
  let misses = 0;

  const start = (): boolean => {
    try {
      watcher = watch(file, { persistent: false }, (event) => {
        if (event === 'rename') rewatch = true;
        schedule();
      });
      watcher.on('error', (error) => {
        logger.warn({ err: error, file }, 'configuration file watch failed; re-watching');
        rewatch = true;
        schedule();
      });
      return true;
    } catch (error) {
      logger.warn({ err: error, file }, 'cannot watch the configuration file (SIGHUP still reloads)');
      return false;
    }
  };
  const schedule = () => {
    if (closed) return;
    if (timer !== null) clearTimeout(timer);
    timer = setTimeout(fire, debounceMs);
    timer.unref();
  };
  const fire = () => {
    timer = null;
    if (closed) return;
    if (rewatch) {
      watcher?.close();
      watcher = null;
      // The new file may not be in place yet: try again after another debounce, for a while.
      if (!start()) {
        if (++misses < 50) schedule();
        else logger.error({ file }, 'the configuration file is gone; no longer watching it (SIGHUP still reloads)');
        return;
      }
      rewatch = false;
      misses = 0;
    }
    onChange();
  };
  start();
  return {
    close() {
      closed = true;
      if (timer !== null) clearTimeout(timer);
      watcher?.close();
    },
  };
}

/** `unmatched: pass` is a hole in the gate by design; say so where operators look. */
function warnPassThrough(logger: Logger): void {
  logger.warn(
    'unmatched: pass forwards every request that matches no route without a permit (counted as countersign_proxy_requests_total{route="unmatched",outcome="passthrough"}); protect subtrees with /path/** or use unmatched: deny',
  );
}
