/**
 * A counter and a histogram for the series written on every request. prom-client's own
 * `inc(labels)` and `observe(labels, value)` check the label names, build a string key from the
 * labels and look it up in a dictionary on every call, and `observe` allocates a closure besides:
 * alone in a loop about 0.3 and 0.5 µs per call, against under 0.05 µs here, and on the proxy's
 * pass-through path, in the running proxy, about a tenth of its CPU per request
 * (docs/architecture.md, "Per-request metrics"). Here each label set has one cell, found through one Map per label (label
 * values are the same few strings every time, so each lookup is a hash already cached on the
 * string), and a call adds to it.
 *
 * They register in a prom-client `Registry` beside its own metrics, and read the same way: the
 * text exposition is line for line what prom-client writes for the same observations
 * (test/unit/labeled-metrics.test.ts), `get()` has the shape of prom-client's, and
 * `Registry.resetMetrics()` clears them.
 *
 * @example
 *   const requests = new LabeledCounter({ name: 'countersign_proxy_requests_total', help: '…', labelNames: ['route', 'outcome'], registers: [registry] });
 *   requests.inc({ route: 'echo', outcome: 'forwarded' });
 *   const duration = new LabeledHistogram({ name: 'countersign_proxy_request_duration_seconds', help: '…', labelNames: ['route'], buckets: LATENCY_BUCKETS, registers: [registry] });
 *   duration.observe({ route: 'echo' }, 0.004);
 */
import type { Metric, Registry, RegistryContentType } from 'prom-client';

export type Labels<L extends string> = Readonly<Record<L, string>>;

export interface LabeledMetricOptions<L extends string> {
  name: string;
  help: string;
  labelNames: readonly L[];
  registers: ReadonlyArray<Registry<RegistryContentType>>;
}

/** One value of a series, as prom-client's `get()` gives it. */
export interface SeriesValue {
  value: number;
  /** The series' labels; a histogram's bucket lines also carry `le`. */
  labels: Readonly<Record<string, string | number>>;
  metricName?: string;
}

/** What `get()` resolves to, as prom-client's metrics give it. */
export interface SeriesSnapshot {
  name: string;
  help: string;
  type: 'counter' | 'histogram';
  aggregator: 'sum';
  values: SeriesValue[];
}

/** The cells of one series, one Map level per label name, in `labelNames` order. */
class Cells<L extends string, C extends { labels: Labels<L> }> {
  /** In the order they were first written, which is the order of the exposition. */
  readonly all: C[] = [];
  #root = new Map<string, unknown>();

  constructor(
    private readonly labelNames: readonly L[],
    private readonly create: (labels: Labels<L>) => C,
  ) {}

  find(labels: Labels<L>): C {
    const names = this.labelNames;
    let level = this.#root;
    for (let i = 0; i < names.length - 1; i += 1) {
      const value = labels[names[i]!];
      let next = level.get(value) as Map<string, unknown> | undefined;
      if (next === undefined) level.set(value, (next = new Map()));
      level = next;
    }
    const last = names.length === 0 ? '' : labels[names[names.length - 1]!];
    let cell = level.get(last) as C | undefined;
    if (cell === undefined) {
      // A copy: the caller's object may be reused or changed after the call.
      const own = {} as Record<L, string>;
      for (const name of names) if (labels[name] !== undefined) own[name] = labels[name];
      cell = this.create(own);
      level.set(last, cell);
      this.all.push(cell);
    }
    return cell;
  }

  clear(): void {
    this.all.length = 0;
    this.#root = new Map();
  }
}

/**
 * What both kinds share: the name, help and label names that prom-client's registry and the
 * metrics reference (docs/metrics.md) read, the cells, registration and `reset()`.
 */
abstract class LabeledSeries<L extends string, C extends { labels: Labels<L> }> {
  /** Public and writable: prom-client's registry renames counters for OpenMetrics. */
  name: string;
  readonly help: string;
  readonly labelNames: readonly L[];
  readonly aggregator = 'sum' as const;
  abstract readonly type: SeriesSnapshot['type'];
  protected readonly cells: Cells<L, C>;

  constructor(options: LabeledMetricOptions<L>, createCell: (labels: Labels<L>) => C) {
    this.name = options.name;
    this.help = options.help;
    this.labelNames = [...options.labelNames];
    this.cells = new Cells(this.labelNames, createCell);
    // prom-client types its registry for its own four classes; at run time it asks a metric for
    // its name, type, get() (or getForPromString()) and reset().
    for (const registry of options.registers) registry.registerMetric(this as unknown as Metric);
  }

  reset(): void {
    this.cells.clear();
  }

  /** What the registry reads: the series' name, help, type and aggregator, with `values`. */
  protected snapshot<V>(values: V[]): Omit<SeriesSnapshot, 'values'> & { values: V[] } {
    return { name: this.name, help: this.help, type: this.type, aggregator: this.aggregator, values };
  }
}

export class LabeledCounter<L extends string> extends LabeledSeries<L, { labels: Labels<L>; value: number }> {
  readonly type = 'counter' as const;

  constructor(options: LabeledMetricOptions<L>) {
    super(options, (labels) => ({ labels, value: 0 }));
  }

  inc(labels: Labels<L>, value = 1): void {
    if (!(value >= 0) || value === Infinity) throw new TypeError(`${this.name}: a counter grows by a finite number ≥ 0, not ${value}`);
    this.cells.find(labels).value += value;
  }

  async get(): Promise<SeriesSnapshot> {
    return this.snapshot(this.cells.all.map(({ labels, value }) => ({ value, labels: { ...labels } })));
  }
}

interface HistogramCell<L extends string> {
  labels: Labels<L>;
  /** Observations per bucket (not cumulative); one above every bound counts in `count` only, as +Inf. */
  counts: number[];
  sum: number;
  count: number;
}

/** A bucket line of the exposition: its own `le`, then the series' labels, as prom-client writes them. */
interface ExpositionValue<L extends string> {
  labels: { le?: string | number };
  sharedLabels: Labels<L>;
  value: number;
  metricName: string;
}

export class LabeledHistogram<L extends string> extends LabeledSeries<L, HistogramCell<L>> {
  readonly type = 'histogram' as const;
  readonly #bounds: readonly number[];

  constructor(options: LabeledMetricOptions<L> & { buckets: readonly number[] }) {
    const bounds = [...options.buckets];
    if (bounds.some((bound, i) => !Number.isFinite(bound) || (i > 0 && bound <= bounds[i - 1]!))) {
      throw new TypeError(`${options.name}: the buckets' upper bounds are finite and ascending`);
    }
    super(options, (labels) => ({ labels, counts: new Array<number>(bounds.length).fill(0), sum: 0, count: 0 }));
    this.#bounds = bounds;
  }

  observe(labels: Labels<L>, value: number): void {
    if (!Number.isFinite(value)) throw new TypeError(`${this.name}: an observation is a finite number, not ${value}`);
    const cell = this.cells.find(labels);
    const bounds = this.#bounds;
    let slot = 0;
    while (slot < bounds.length && value > bounds[slot]!) slot += 1;
    if (slot < bounds.length) cell.counts[slot]! += 1;
    cell.sum += value;
    cell.count += 1;
  }

  /** The registry's text exposition reads this: bucket labels apart from the series' own. */
  async getForPromString(): Promise<Omit<SeriesSnapshot, 'values'> & { values: ExpositionValue<L>[] }> {
    const values: ExpositionValue<L>[] = [];
    for (const { labels, counts, sum, count } of this.cells.all) {
      let cumulative = 0;
      this.#bounds.forEach((bound, slot) => {
        cumulative += counts[slot]!;
        values.push({ labels: { le: bound }, sharedLabels: labels, value: cumulative, metricName: `${this.name}_bucket` });
      });
      values.push(
        { labels: { le: '+Inf' }, sharedLabels: labels, value: count, metricName: `${this.name}_bucket` },
        { labels: {}, sharedLabels: labels, value: sum, metricName: `${this.name}_sum` },
        { labels: {}, sharedLabels: labels, value: count, metricName: `${this.name}_count` },
      );
    }
    return this.snapshot(values);
  }

  async get(): Promise<SeriesSnapshot> {
    const { values } = await this.getForPromString();
    return this.snapshot(values.map(({ labels, sharedLabels, value, metricName }) => ({ value, labels: Object.assign({}, labels, sharedLabels), metricName })));
  }
}
