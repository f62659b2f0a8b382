/**
 * Renders `docs/metrics.md` from the metric definitions themselves (authority/metrics.ts,
 * proxy/metrics.ts): for each `countersign_*` metric of both registries, its name, type, help
 * text and label names. Node's default process metrics (`process_*`, `nodejs_*`) are left out of
 * the table and mentioned in a sentence instead. test/docs/metrics-reference.test.ts keeps the
 * committed file equal to this rendering.
 *
 * @example
 *   const markdown = await renderMetricsReference();
 *   const names = await countersignMetricNames(); // Set of every countersign_* metric name
 */
import type { Registry } from 'prom-client';
import { createAuthorityMetrics } from '../../authority/metrics.js';
import { createProxyMetrics } from '../../proxy/metrics.js';
import { LATENCY_BUCKETS } from '../../shared/metrics.js';

export interface MetricDescription {
  name: string;
  type: string;
  help: string;
  labelNames: string[];
}

/** The command that rewrites docs/metrics.md (package.json script `docs:metrics`). */
export const REGENERATE_COMMAND = 'npm run docs:metrics';

const OWN_PREFIX = 'countersign_';

async function describe(registry: Registry): Promise<MetricDescription[]> {
  const metrics = await registry.getMetricsAsJSON();
  return metrics
    .filter((m) => m.name.startsWith(OWN_PREFIX))
    .map((m) => {
      // prom-client's typings do not expose labelNames, but every metric object carries it.
      const metric = registry.getSingleMetric(m.name) as unknown as { labelNames?: readonly string[] } | undefined;
      return { name: m.name, type: String(m.type), help: m.help, labelNames: [...(metric?.labelNames ?? [])] };
    })
    .sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
}

/** The countersign_* metrics of the authority's and the proxy's registries. */
export async function describeMetrics(): Promise<{ authority: MetricDescription[]; proxy: MetricDescription[] }> {
  return { authority: await describe(createAuthorityMetrics().registry), proxy: await describe(createProxyMetrics().registry) };
}

/**
 * Every series name a PromQL expression may use for the countersign_* metrics: the metric names,
 * plus `_bucket`, `_sum` and `_count` for histograms.
 */
export async function countersignSeriesNames(): Promise<Set<string>> {
  const { authority, proxy } = await describeMetrics();
  const names = new Set<string>();
  for (const m of [...authority, ...proxy]) {
    names.add(m.name);
    if (m.type === 'histogram') for (const suffix of ['_bucket', '_sum', '_count']) names.add(m.name + suffix);
  }
  return names;
}

const cell = (text: string) => text.replace(/\|/g, '\\|').replace(/\r?\n/g, ' ');

function table(metrics: MetricDescription[]): string {
  const rows = metrics.map(
    (m) => `| \`${m.name}\` | ${m.type} | ${m.labelNames.length ? m.labelNames.map((l) => `\`${l}\``).join(', ') : '—'} | ${cell(m.help)} |`,
  );
  return ['| name | type | labels | help |', '| --- | --- | --- | --- |', ...rows].join('\n');
}

/** docs/metrics.md, as Markdown. */
export async function renderMetricsReference(): Promise<string> {
  const { authority, proxy } = await describeMetrics();
  const buckets = LATENCY_BUCKETS.map((b) => `${b}`).join(', ');
  return `<!-- Generated from authority/metrics.ts and proxy/metrics.ts by test/docs/metrics-reference.ts.
     Do not edit by hand: run \`${REGENERATE_COMMAND}\`. test/docs/metrics-reference.test.ts fails when this file is stale. -->

# Metrics reference

Countersign exports Prometheus metrics on the admin port of each process, at \`GET /metrics\`:
the authority on its admin listener (7071 in the chart, scraped by the chart's ServiceMonitor), the
proxy on its admin listener (port \`cs-proxy-admin\`, 7081, in the sidecar; scraped by a PodMonitor,
see the [operator's guide](operations.md#metrics-and-dashboards)).

Labels carry route names or templates, outcomes, reasons and buckets only: never raw URLs, request
ids or permit ids. Histograms have the usual \`_bucket\` (with \`le\`), \`_sum\` and \`_count\` series;
their buckets (seconds) are ${buckets}.

Besides the metrics below, both processes also export Node's default process metrics
(\`process_*\`, \`nodejs_*\`: CPU, memory, event-loop lag, garbage collection, handles) under their
standard names, so stock Node.js dashboards work.

A Grafana dashboard built on these metrics: [grafana/countersign.json](grafana/countersign.json).

## Authority

${table(authority)}

## Proxy

${table(proxy)}
`;
}
