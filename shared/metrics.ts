/**
 * A Prometheus registry with Node's default process metrics, one per process role (authority,
 * proxy) so that tests can run several side by side. Our own metrics are prefixed `countersign_`;
 * the default ones keep their standard names (`process_*`, `nodejs_*`) so stock dashboards work.
 *
 * @example
 *   const registry = createRegistry();
 *   new Counter({ name: 'countersign_example_total', help: '…', registers: [registry] });
 */
import { collectDefaultMetrics, Counter, Gauge, Registry } from 'prom-client';

export function createRegistry(): Registry {
  const registry = new Registry();
  collectDefaultMetrics({ register: registry });
  return registry;
}

/** Seconds buckets for API latencies: 1 ms to 10 s. */
export const LATENCY_BUCKETS = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10];

/**
 * The shared store's guarantees, on the authority and the proxy alike: which durability mode was
 * asked for and whether the store was found able to keep it at start (0 means an operator
 * accepted a weaker store), and how often the authority saw the replay store lose its state.
 */
export interface StoreMetrics {
  durability: Gauge<'mode'>;
  durabilityEstablished: Gauge<'mode'>;
  stateResets: Counter;
}

export function createStoreMetrics(registry: Registry): StoreMetrics {
  const registers = [registry];
  return {
    durability: new Gauge({
      name: 'countersign_store_durability_info',
      help: 'The durability mode configured for the shared store (1 for the configured mode).',
      labelNames: ['mode'],
      registers,
    }),
    durabilityEstablished: new Gauge({
      name: 'countersign_store_durability_established',
      help: 'Whether the shared store was found able to keep the configured durability mode at start (1) or not, accepted by configuration (0).',
      labelNames: ['mode'],
      registers,
    }),
    stateResets: new Counter({
      name: 'countersign_replay_store_resets_total',
      help: 'New replay-store epochs seen: the store lost its state, and permits issued before are refused until they expire.',
      registers,
    }),
  };
}
