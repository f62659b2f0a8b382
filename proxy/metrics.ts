/**
 * The proxy's Prometheus series, on a registry of its own (shared/metrics.ts) so that several
 * proxies can run side by side in one test process. Labels are route names, outcomes and stable
 * codes only: never a raw URL, a request id or a permit id, which would grow the series without
 * bound. Requests that match no route carry the route label `unmatched`.
 *
 * @example
 *   const metrics = createProxyMetrics();
 *   metrics.requests.inc({ route: 'echo', outcome: 'forwarded' });
 *   metrics.setRouteModes(config.routes);
 *   const text = await metrics.registry.metrics(); // Prometheus text exposition
 */
import { Counter, Gauge, type Registry } from 'prom-client';
import { LabeledCounter, LabeledHistogram } from '../shared/labeled-metrics.js';
import { createRegistry, createStoreMetrics, LATENCY_BUCKETS } from '../shared/metrics.js';
import type { StoreMetrics } from '../shared/metrics.js';
import { PROXY_MODES, type ProxyMode, type ProxyRoute } from './config.js';
import type { GateDecision } from './gate.js';

/** The route label of a request that matched no configured route. */
export const UNMATCHED_ROUTE = 'unmatched';

/**
 * passthrough: an unmatched request forwarded under `unmatched: pass`; denied_unmatched: refused by
 * `unmatched: deny` or a protected subtree; refused_ambiguous: a path or method override the gate
 * and the upstream could read differently (paths.ts), refused before matching; allowed: the Envoy
 * external authorizer verified the permit and told Envoy to forward (Envoy, not the proxy, forwards).
 */
export const REQUEST_OUTCOMES = ['forwarded', 'allowed', 'blocked', 'would_block', 'passthrough', 'denied_unmatched', 'refused_ambiguous', 'upstream_error'] as const;
export type RequestOutcome = (typeof REQUEST_OUTCOMES)[number];

/** The proxy's front doors besides forwarding: Envoy's ext_authz over gRPC and over HTTP. */
export const EXT_AUTHZ_TRANSPORTS = ['grpc', 'http'] as const;
export type ExtAuthzTransport = (typeof EXT_AUTHZ_TRANSPORTS)[number];

export interface ProxyMetrics {
  readonly registry: Registry;
  // The series written on every request are LabeledCounter and LabeledHistogram, which cost far
  // less per call than prom-client's own (shared/labeled-metrics.ts); the others are prom-client's.
  readonly requests: LabeledCounter<'route' | 'outcome'>;
  /** result: verified | rejected | unavailable; reason: the verification code ('' when verified). */
  readonly verifications: LabeledCounter<'route' | 'result' | 'reason'>;
  readonly requestDuration: LabeledHistogram<'route'>;
  readonly verificationDuration: LabeledHistogram<'route'>;
  readonly upstreamErrors: Counter<'route'>;
  readonly storeErrors: Counter;
  readonly routeMode: Gauge<'route' | 'mode'>;
  readonly configReloadSuccess: Gauge;
  readonly configReloadTimestamp: Gauge;
  /** result: success | failure. */
  readonly keyRefreshes: Counter<'result'>;
  /** Records whose append failed when they were made: each is held (`recordsHeld`) and written once the store is back. */
  readonly recordAppendFailures: Counter;
  /**
   * `countersign_proxy_records_dropped_total{reason}`: records that will not reach the audit log
   * (record-backlog.ts: `backlog_full`, `unreadable`, `shutdown`). Each is logged too.
   */
  readonly recordsDropped: Counter<'reason'>;
  /** `countersign_proxy_records_held`: records the proxy holds for the stream, read on each scrape. */
  readonly recordsHeld: Gauge;
  /** Where the held records are counted on each scrape. */
  setRecordsHeldSource(count: () => number): void;
  /**
   * `countersign_proxy_ext_authz_checks_total{transport, outcome}`: the Envoy external authorizer's
   * answers by transport. They are in `requests` too (by route); this tells the front doors apart.
   */
  readonly extAuthzChecks: Counter<'transport' | 'outcome'>;
  /** The shared store's durability (shared with the authority's metrics). */
  readonly store: StoreMetrics;
  /**
   * `countersign_proxy_record_backlog`: verification records in the organization's stream that
   * the authority has not drained into the audit log yet, read from the store on each scrape
   * (NaN when the store cannot be read). It grows while the authority is down.
   */
  readonly recordBacklog: Gauge;
  /** Where the backlog is read from on each scrape. */
  setRecordBacklogSource(count: () => Promise<number>): void;
  /** Sets `route_mode` to 1 for each route's current mode and 0 for the other, dropping removed routes. */
  setRouteModes(routes: ReadonlyArray<{ readonly name: string; readonly mode: ProxyMode }>): void;
  /** Records a configuration (re)load: success 1 or 0; the timestamp moves only on success. */
  recordConfigReload(success: boolean, atMs?: number): void;
}

export function createProxyMetrics(): ProxyMetrics {
  const registry = createRegistry();
  const registers = [registry];
  const requests = new LabeledCounter({
    name: 'countersign_proxy_requests_total',
    help: 'Requests handled by the proxy (forwarded, or checked for Envoy as its external authorizer), by route name and outcome.',
    labelNames: ['route', 'outcome'],
    registers,
  });
  const verifications = new LabeledCounter({
    name: 'countersign_proxy_verifications_total',
    help: 'Permit verifications at the gate, by route, result (verified, rejected, unavailable) and reason code.',
    labelNames: ['route', 'result', 'reason'],
    registers,
  });
  const requestDuration = new LabeledHistogram({
    name: 'countersign_proxy_request_duration_seconds',
    help: 'Time from receiving a request to finishing its answer, by route.',
    labelNames: ['route'],
    buckets: LATENCY_BUCKETS,
    registers,
  });
  const verificationDuration = new LabeledHistogram({
    name: 'countersign_proxy_verification_duration_seconds',
    help: 'Time the gate took to decide (body read excluded), by route.',
    labelNames: ['route'],
    buckets: LATENCY_BUCKETS,
    registers,
  });
  const upstreamErrors = new Counter({
    name: 'countersign_proxy_upstream_errors_total',
    help: 'Upstream requests that failed (connection refused, reset, timeout), by route.',
    labelNames: ['route'] as const,
    registers,
  });
  const storeErrors = new Counter({
    name: 'countersign_proxy_store_errors_total',
    help: 'Verifications that could not reach the replay store.',
    registers,
  });
  const routeMode = new Gauge({
    name: 'countersign_proxy_route_mode',
    help: 'The current mode of each route: 1 for its mode, 0 for the other.',
    labelNames: ['route', 'mode'] as const,
    registers,
  });
  const configReloadSuccess = new Gauge({
    name: 'countersign_proxy_config_reload_success',
    help: 'Whether the last configuration (re)load succeeded (1) or was refused, keeping the last good one (0).',
    registers,
  });
  const configReloadTimestamp = new Gauge({
    name: 'countersign_proxy_config_reload_timestamp_seconds',
    help: 'When the configuration in force was loaded (Unix seconds).',
    registers,
  });
  const keyRefreshes = new Counter({
    name: 'countersign_proxy_key_refreshes_total',
    help: 'Refreshes of the permit key set from the authority, by result.',
    labelNames: ['result'] as const,
    registers,
  });
  const recordAppendFailures = new Counter({
    name: 'countersign_proxy_record_append_failures_total',
    help: 'Verification or execution records that could not be appended to the verification stream when they were made; each is held and written once the store is back (countersign_proxy_records_held).',
    registers,
  });
  const recordsDropped = new Counter({
    name: 'countersign_proxy_records_dropped_total',
    help: 'Verification or execution records dropped without reaching the verification stream, by reason: backlog_full (past records.backlog_max), unreadable (a line of the backlog file that is not a record), shutdown (still held at shutdown, with no backlog file). Each is logged.',
    labelNames: ['reason'] as const,
    registers,
  });
  let heldSource: (() => number) | null = null;
  const recordsHeld = new Gauge({
    name: 'countersign_proxy_records_held',
    help: 'Verification or execution records the proxy holds because the store could not take them yet (written in order once it is back), or that are on their way to it.',
    registers,
    collect() {
      if (heldSource !== null) this.set(heldSource());
    },
  });

  const extAuthzChecks = new Counter({
    name: 'countersign_proxy_ext_authz_checks_total',
    help: 'Envoy external authorization checks answered, by transport (grpc, http) and outcome (as in countersign_proxy_requests_total).',
    labelNames: ['transport', 'outcome'] as const,
    registers,
  });

  let backlogSource: (() => Promise<number>) | null = null;
  const recordBacklog = new Gauge({
    name: 'countersign_proxy_record_backlog',
    help: 'Verification records waiting in the shared store for the authority to drain them into the audit log (NaN: the store cannot be read).',
    registers,
    async collect() {
      if (backlogSource === null) return;
      try {
        this.set(await backlogSource());
      } catch {
        this.set(Number.NaN);
      }
    },
  });

  let modeRoutes = new Set<string>();
  return {
    registry,
    store: createStoreMetrics(registry),
    requests,
    verifications,
    requestDuration,
    verificationDuration,
    upstreamErrors,
    storeErrors,
    routeMode,
    configReloadSuccess,
    configReloadTimestamp,
    keyRefreshes,
    recordAppendFailures,
    recordsDropped,
    recordsHeld,
    setRecordsHeldSource(count) {
      heldSource = count;
    },
    extAuthzChecks,
    recordBacklog,
    setRecordBacklogSource(count) {
      backlogSource = count;
    },
    setRouteModes(routes) {
      const next = new Set(routes.map((route) => route.name));
      // A route removed by a reload must not keep reporting its old mode.
      for (const name of modeRoutes) {
        if (!next.has(name)) for (const mode of PROXY_MODES) routeMode.remove({ route: name, mode });
      }
      for (const route of routes) {
        for (const mode of PROXY_MODES) routeMode.set({ route: route.name, mode }, mode === route.mode ? 1 : 0);
      }
      modeRoutes = next;
    },
    recordConfigReload(success, atMs = Date.now()) {
      configReloadSuccess.set(success ? 1 : 0);
      if (success) configReloadTimestamp.set(atMs / 1000);
    },
  };
}

/**
 * Counts one gate decision in `verifications` (and a store failure in `storeErrors`), the same
 * way for every front door.
 */
export function countVerification(metrics: ProxyMetrics, route: Pick<ProxyRoute, 'name'>, decision: GateDecision): void {
  const refusal = decision.action === 'block' ? decision : decision.wouldBlock;
  if (refusal === null) {
    // A route whose facts come with no permit at all still reaches here only with a permit.
    metrics.verifications.inc({ route: route.name, result: 'verified', reason: 'none' });
    return;
  }
  const result = refusal.status === 503 ? 'unavailable' : 'rejected';
  metrics.verifications.inc({ route: route.name, result, reason: refusal.reason });
  if (refusal.verifyCode === 'INTERNAL_ERROR') metrics.storeErrors.inc();
}
