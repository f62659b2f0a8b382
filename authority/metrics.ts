/**
 * The authority's metrics. Labels are route templates, reasons and buckets: never raw URLs, ids
 * or anything a caller controls freely.
 *
 * @example
 *   metrics.rateLimited.inc({ bucket: 'evaluate' });
 *   await metrics.registry.metrics(); // Prometheus text
 */
import { Counter, type Registry } from 'prom-client';
import { LabeledCounter, LabeledHistogram } from '../shared/labeled-metrics.js';
import { createRegistry, createStoreMetrics, LATENCY_BUCKETS } from '../shared/metrics.js';
import type { StoreMetrics } from '../shared/metrics.js';

/**
 * The series written on every request or evaluation are LabeledCounter and LabeledHistogram, which
 * cost far less per call than prom-client's own (shared/labeled-metrics.ts); the others are prom-client's.
 */
export interface AuthorityMetrics {
  registry: Registry;
  httpRequests: LabeledCounter<'method' | 'route' | 'status_code'>;
  httpDuration: LabeledHistogram<'method' | 'route'>;
  authFailures: Counter<'reason'>;
  deprecatedHeader: Counter<'header'>;
  deprecatedOperation: Counter<'operation'>;
  rateLimited: Counter<'bucket'>;
  evaluations: LabeledCounter<'decision' | 'mode'>;
  evaluateDuration: LabeledHistogram<'decision'>;
  permitsIssued: Counter;
  permitsRevoked: Counter;
  verifications: LabeledCounter<'result' | 'reason'>;
  auditAppendFailures: Counter<'operation'>;
  credentialCache: LabeledCounter<'result'>;
  escalations: Counter<'status'>;
  webhookDeliveries: Counter<'result'>;
  webhookDeadLetters: Counter;
  /** The shared store's durability and epoch resets (shared with the proxy's metrics). */
  store: StoreMetrics;
}

export function createAuthorityMetrics(): AuthorityMetrics {
  const registry = createRegistry();
  const registers = [registry];
  return {
    registry,
    store: createStoreMetrics(registry),
    httpRequests: new LabeledCounter({
      name: 'countersign_http_requests_total',
      help: 'API requests answered, by method, route template and status code.',
      labelNames: ['method', 'route', 'status_code'],
      registers,
    }),
    httpDuration: new LabeledHistogram({
      name: 'countersign_http_request_duration_seconds',
      help: 'API request duration, by method and route template.',
      labelNames: ['method', 'route'],
      buckets: LATENCY_BUCKETS,
      registers,
    }),
    authFailures: new Counter({
      name: 'countersign_auth_failures_total',
      help: 'Requests refused at authentication, by reason (missing, malformed, unknown_key, revoked_key, …).',
      labelNames: ['reason'],
      registers,
    }),
    deprecatedHeader: new Counter({
      name: 'countersign_deprecated_header_total',
      help: 'Requests that authenticated with a deprecated header (X-Service-Key).',
      labelNames: ['header'],
      registers,
    }),
    deprecatedOperation: new Counter({
      name: 'countersign_deprecated_operation_total',
      help: 'Requests to a deprecated operation, by operation (revoke-permit: POST /v1-revoke-permit).',
      labelNames: ['operation'],
      registers,
    }),
    rateLimited: new Counter({
      name: 'countersign_rate_limited_total',
      help: 'Requests refused with 429, by rate-limit bucket (evaluate, api, address: failed or credential-less requests per client address).',
      labelNames: ['bucket'],
      registers,
    }),
    evaluations: new LabeledCounter({
      name: 'countersign_evaluations_total',
      help: 'Evaluations decided and recorded, by decision and mode (live, shadow).',
      labelNames: ['decision', 'mode'],
      registers,
    }),
    evaluateDuration: new LabeledHistogram({
      name: 'countersign_evaluate_duration_seconds',
      help: 'Time to decide, sign and durably record one evaluation, by decision.',
      labelNames: ['decision'],
      buckets: LATENCY_BUCKETS,
      registers,
    }),
    permitsIssued: new Counter({ name: 'countersign_permits_issued_total', help: 'Permits issued.', registers }),
    permitsRevoked: new Counter({ name: 'countersign_permits_revoked_total', help: 'Permits revoked.', registers }),
    verifications: new LabeledCounter({
      name: 'countersign_verifications_total',
      help: 'Permit verifications answered by POST /v1-verify-permit, by result (verified, rejected) and reason code.',
      labelNames: ['result', 'reason'],
      registers,
    }),
    auditAppendFailures: new Counter({
      name: 'countersign_audit_append_failures_total',
      help: 'Operations refused because their audit event could not be written, by operation.',
      labelNames: ['operation'],
      registers,
    }),
    credentialCache: new LabeledCounter({
      name: 'countersign_credential_cache_lookups_total',
      help: 'Credential lookups (API keys, organizations) by result: hit, miss, or bypass (change notices interrupted, so the database was asked).',
      labelNames: ['result'],
      registers,
    }),
    escalations: new Counter({
      name: 'countersign_escalations_total',
      help: 'Escalations entering each status (pending, escalated, approved, rejected, timed_out, auto_approved) through the escalation endpoints and the timeout sweeper.',
      labelNames: ['status'],
      registers,
    }),
    webhookDeliveries: new Counter({
      name: 'countersign_webhook_deliveries_total',
      help: 'Webhook delivery attempts by result: delivered (a 2xx answer) or failed (any other answer, a network error, a timeout).',
      labelNames: ['result'],
      registers,
    }),
    webhookDeadLetters: new Counter({
      name: 'countersign_webhook_dead_letters_total',
      help: 'Webhook deliveries moved to the dead-letter queue after their last attempt failed.',
      registers,
    }),
  };
}
