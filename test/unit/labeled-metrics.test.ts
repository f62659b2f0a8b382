/**
 * LabeledCounter and LabeledHistogram stand in for prom-client's Counter and Histogram on the
 * per-request series. Dashboards and alerts read the exposition, so these pin that the same
 * observations read the same, line for line and in `get()`, as prom-client's own metrics.
 */
import { Counter, Histogram, Registry, type RegistryContentType } from 'prom-client';
import t from 'tap';
import { LabeledCounter, LabeledHistogram } from '../../shared/labeled-metrics.js';
import { LATENCY_BUCKETS } from '../../shared/metrics.js';

const OBSERVATIONS: Array<[string, number]> = [
  ['echo', 0.0004],
  ['echo', 0.001], // on a bound: counted in that bucket
  ['unmatched', 0.003],
  ['echo', 0.02],
  ['with "quotes" and \\ and\nnewline', 0.7],
  ['unmatched', 42], // above every bound: only +Inf
  ['echo', 0],
];

function both(contentType: RegistryContentType = Registry.PROMETHEUS_CONTENT_TYPE) {
  const ours = new Registry<RegistryContentType>();
  const theirs = new Registry<RegistryContentType>();
  ours.setContentType(contentType);
  theirs.setContentType(contentType);
  return {
    ours,
    theirs,
    counters: [
      new LabeledCounter({ name: 'requests_total', help: 'Requests.', labelNames: ['route', 'outcome'], registers: [ours] }),
      new Counter({ name: 'requests_total', help: 'Requests.', labelNames: ['route', 'outcome'] as const, registers: [theirs] }),
    ] as const,
    histograms: [
      new LabeledHistogram({ name: 'request_seconds', help: 'Latency.', labelNames: ['route'], buckets: LATENCY_BUCKETS, registers: [ours] }),
      new Histogram({ name: 'request_seconds', help: 'Latency.', labelNames: ['route'] as const, buckets: LATENCY_BUCKETS, registers: [theirs] }),
    ] as const,
  };
}

function record(setup: ReturnType<typeof both>): void {
  for (const [route, seconds] of OBSERVATIONS) {
    const outcome = seconds > 1 ? 'upstream_error' : 'forwarded';
    for (const counter of setup.counters) counter.inc({ route, outcome });
    for (const histogram of setup.histograms) histogram.observe({ route }, seconds);
  }
  for (const counter of setup.counters) counter.inc({ route: 'echo', outcome: 'forwarded' }, 2.5);
}

t.test('the text exposition is prom-client’s, line for line', async (t) => {
  const setup = both();
  t.equal(await setup.ours.metrics(), await setup.theirs.metrics(), 'nothing observed yet');
  record(setup);
  const text = await setup.ours.metrics();
  t.equal(text, await setup.theirs.metrics());
  t.match(text, /requests_total\{route="echo",outcome="forwarded"\} 6\.5/, 'four requests, then 2.5');
  t.match(text, /request_seconds_bucket\{le="0\.001",route="echo"\} 3/, 'a value on a bound counts in that bucket');
  t.match(text, /request_seconds_bucket\{le="\+Inf",route="unmatched"\} 2/);
});

t.test('get() reads as prom-client’s: names, labels and values', async (t) => {
  const setup = both();
  record(setup);
  for (const [ours, theirs] of [setup.counters, setup.histograms]) {
    // prom-client's typings leave labelNames out; its metrics carry it, and docs/metrics.md is rendered from it.
    t.same(ours.labelNames, (theirs as unknown as { labelNames: string[] }).labelNames, `${ours.name}: labelNames`);
  }
  const shape = (values: ReadonlyArray<{ value: number; labels: object; metricName?: string }>) =>
    values.map(({ value, labels, metricName }) => ({ value, labels, metricName }));
  for (const pair of [setup.counters, setup.histograms]) {
    const [ours, theirs] = [await pair[0].get(), await pair[1].get()];
    t.same({ ...ours, values: shape(ours.values) }, { name: theirs.name, help: theirs.help, type: theirs.type, aggregator: theirs.aggregator, values: shape(theirs.values) }, ours.name);
  }
});

t.test('with the registry’s default labels and as OpenMetrics, still prom-client’s', async (t) => {
  const setup = both(Registry.OPENMETRICS_CONTENT_TYPE);
  record(setup);
  for (const registry of [setup.ours, setup.theirs]) registry.setDefaultLabels({ pod: 'proxy-0' });
  t.equal(await setup.ours.metrics(), await setup.theirs.metrics());
  t.same(await setup.ours.getMetricsAsJSON(), (await setup.theirs.getMetricsAsJSON()).map((metric) => ({
    ...metric,
    values: metric.values.map(({ value, labels, ...rest }) => {
      const { metricName } = rest as { metricName?: string };
      return { value, labels, ...(metricName === undefined ? {} : { metricName }) };
    }),
  })));
});

t.test('resetMetrics() clears them; a later observation starts a new series', async (t) => {
  const setup = both();
  record(setup);
  setup.ours.resetMetrics();
  setup.theirs.resetMetrics();
  t.equal(await setup.ours.metrics(), await setup.theirs.metrics());
  for (const counter of setup.counters) counter.inc({ route: 'echo', outcome: 'blocked' });
  t.equal(await setup.ours.metrics(), await setup.theirs.metrics());
  t.same((await setup.counters[0].get()).values, [{ value: 1, labels: { route: 'echo', outcome: 'blocked' } }]);
});

t.test('the caller’s label object is copied, not kept', async (t) => {
  const registry = new Registry();
  const counter = new LabeledCounter({ name: 'c_total', help: 'c', labelNames: ['route'], registers: [registry] });
  const labels = { route: 'echo' };
  counter.inc(labels);
  labels.route = 'changed';
  t.same((await counter.get()).values, [{ value: 1, labels: { route: 'echo' } }]);
});

t.test('what prom-client refuses is refused', async (t) => {
  const registry = new Registry();
  const counter = new LabeledCounter({ name: 'c_total', help: 'c', labelNames: ['route'], registers: [registry] });
  const histogram = new LabeledHistogram({ name: 'h_seconds', help: 'h', labelNames: ['route'], buckets: [0.1, 1], registers: [registry] });
  t.throws(() => counter.inc({ route: 'echo' }, -1), TypeError, 'a counter never decreases');
  t.throws(() => counter.inc({ route: 'echo' }, Number.NaN), TypeError);
  t.throws(() => histogram.observe({ route: 'echo' }, Number.POSITIVE_INFINITY), TypeError);
  t.throws(() => new LabeledHistogram({ name: 'x_seconds', help: 'x', labelNames: ['route'], buckets: [1, 0.1], registers: [] }), TypeError, 'buckets ascend');
  t.throws(() => new LabeledCounter({ name: 'c_total', help: 'again', labelNames: ['route'], registers: [registry] }), /already been registered/);
  t.same((await counter.get()).values, [], 'nothing was counted');
});
