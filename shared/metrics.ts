/**
 * A Prometheus registry with Node's default process metrics, one per process role (authority,
 * proxy) so that tests can run several side by side. Our own metrics are prefixed `countersign_`;
 * the default ones keep their standard names (`process_*`, `nodejs_*`) so stock dashboards work.
 *
 * @example
 *   const registry = createRegistry();
 *   new Counter({ name: 'countersign_example_total', help: '…', registers: [registry] });
 */
import { collectDefaultMetrics, Registry } from 'prom-client';

export function createRegistry(): Registry {
  const registry = new Registry();
  collectDefaultMetrics({ register: registry });
  return registry;
}

/** Seconds buckets for API latencies: 1 ms to 10 s. */
export const LATENCY_BUCKETS = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10];
