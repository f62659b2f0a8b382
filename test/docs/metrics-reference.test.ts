/**
 * Keeps the metrics documentation in step with the code: docs/metrics.md must equal
 * the reference rendered from the metric definitions, and every metric the Grafana dashboard
 * (docs/grafana/countersign.json) queries must exist in the authority's or the proxy's registry.
 *
 * With UPDATE_METRICS_DOC=1 (`npm run docs:metrics`) the test writes docs/metrics.md instead of
 * comparing it.
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import t from 'tap';
import { REQUEST_OUTCOMES } from '../../proxy/metrics.js';
import { checkGeneratedPage } from './generated-page.js';
import { countersignSeriesNames, describeMetrics, REGENERATE_COMMAND, renderMetricsReference } from './metrics-reference.js';
import { REPO_ROOT as root } from '../helpers/repo.js';

const dashboardPath = join(root, 'docs', 'grafana', 'countersign.json');

t.test('docs/metrics.md is the reference rendered from the metric definitions', async (t) => {
  const rendered = await renderMetricsReference();
  checkGeneratedPage(t, { file: 'docs/metrics.md', rendered, updateVariable: 'UPDATE_METRICS_DOC', regenerate: REGENERATE_COMMAND, source: 'authority/metrics.ts and proxy/metrics.ts' });
});

t.test('the reference lists every countersign_* metric with its type and labels, and no default metric', async (t) => {
  const { authority, proxy } = await describeMetrics();
  const doc = await renderMetricsReference();
  t.ok(authority.length > 0 && proxy.length > 0);
  for (const m of [...authority, ...proxy]) {
    t.ok(m.name.startsWith('countersign_'), m.name);
    t.match(doc, `| \`${m.name}\` | ${m.type} |`, `${m.name} is in the table with its type`);
    for (const label of m.labelNames) t.match(doc, `\`${label}\``);
  }
  const evaluate = authority.find((m) => m.name === 'countersign_evaluate_duration_seconds');
  t.same(evaluate && { type: evaluate.type, labels: evaluate.labelNames }, { type: 'histogram', labels: ['decision'] });
  const requests = proxy.find((m) => m.name === 'countersign_proxy_requests_total');
  t.same(requests && { type: requests.type, labels: requests.labelNames }, { type: 'counter', labels: ['route', 'outcome'] });
  const backlog = proxy.find((m) => m.name === 'countersign_proxy_record_backlog');
  t.equal(backlog?.type, 'gauge');
  t.notMatch(doc, /\| `(process|nodejs)_/, 'Node default metrics are not in the tables');
  t.match(doc, /default process metrics/, 'but the doc says they are exported');
});

interface Panel {
  title?: string;
  type?: string;
  targets?: Array<{ expr?: string }>;
  panels?: Panel[];
}

/** Metric-like identifiers in a PromQL expression that belong to Countersign. */
function metricNamesIn(expr: string): string[] {
  return [...expr.matchAll(/\b(countersign_[a-zA-Z0-9_]+)\b/g)].map((m) => m[1]!);
}

t.test('the Grafana dashboard queries only metrics the code defines', async (t) => {
  const dashboard = JSON.parse(readFileSync(dashboardPath, 'utf8')) as {
    title: string;
    uid: string;
    __inputs?: Array<{ name: string; type: string; pluginId: string }>;
    panels: Panel[];
  };
  t.ok(dashboard.title && dashboard.uid, 'a title and a uid');
  t.ok(dashboard.__inputs?.some((i) => i.name === 'DS_PROMETHEUS' && i.type === 'datasource' && i.pluginId === 'prometheus'), 'a DS_PROMETHEUS datasource input');
  const known = await countersignSeriesNames();
  const panels = dashboard.panels.flatMap((p) => [p, ...(p.panels ?? [])]);
  const exprs = panels.flatMap((p) => (p.targets ?? []).map((target) => ({ title: p.title ?? '?', expr: target.expr ?? '' })));
  t.ok(exprs.length >= 10, `the dashboard has queries (${exprs.length})`);
  const used = new Set<string>();
  for (const { title, expr } of exprs) {
    const names = metricNamesIn(expr);
    t.ok(names.length > 0, `panel "${title}" queries a countersign metric: ${expr}`);
    for (const name of names) {
      used.add(name);
      t.ok(known.has(name), `panel "${title}": ${name} is defined in authority/metrics.ts or proxy/metrics.ts`);
    }
    for (const [, outcome] of expr.matchAll(/outcome="([^"]*)"/g)) {
      t.ok((REQUEST_OUTCOMES as readonly string[]).includes(outcome!), `panel "${title}": outcome "${outcome}" is one the proxy records`);
    }
  }
  for (const wanted of [
    'countersign_evaluations_total',
    'countersign_evaluate_duration_seconds_bucket',
    'countersign_proxy_requests_total',
    'countersign_proxy_verifications_total',
    'countersign_proxy_verification_duration_seconds_bucket',
    'countersign_proxy_store_errors_total',
    'countersign_audit_append_failures_total',
    'countersign_webhook_deliveries_total',
    'countersign_webhook_dead_letters_total',
    'countersign_proxy_record_backlog',
    'countersign_proxy_config_reload_success',
  ]) t.ok(used.has(wanted), `the dashboard shows ${wanted}`);
  for (const p of panels.filter((p) => p.type !== 'row')) {
    t.same((p as { datasource?: unknown }).datasource, { type: 'prometheus', uid: '${DS_PROMETHEUS}' }, `panel "${p.title}" uses the DS_PROMETHEUS input`);
  }
});
