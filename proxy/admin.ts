/**
 * The proxy's admin endpoints: `GET /metrics` (Prometheus), `GET /healthz` (the process is up) and
 * `GET /readyz` (the permit keys are loaded, the store answers, and every ext_authz listener
 * serves), each also for HEAD; anything else is the 404 or 405 envelope.
 *
 * @example
 *   const admin = createServer((req, res) => void handleAdmin(req, res, { metrics, keys, store, readyTimeoutMs: 1_000, frontDoors }));
 *   // GET /readyz → 200 {"status":"ok","checks":{"keys":"ok","store":"ok","ext_authz_grpc":"ok"}}
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import { CountersignError } from '../shared/errors.js';
import { requestIdOf, sendError } from './http-messages.js';
import type { ProxyMetrics } from './metrics.js';
import { isReady, readinessChecks, type ReadinessDeps } from './readiness.js';

export interface AdminDeps extends ReadinessDeps {
  metrics: ProxyMetrics;
}

export async function handleAdmin(req: IncomingMessage, res: ServerResponse, deps: AdminDeps): Promise<void> {
  const requestId = requestIdOf(req);
  const path = (req.url ?? '/').split('?', 1)[0];
  const known = path === '/metrics' || path === '/healthz' || path === '/readyz';
  if (!known) return sendError(res, requestId, new CountersignError('not_found'));
  if (req.method !== 'GET' && req.method !== 'HEAD') return sendError(res, requestId, new CountersignError('method_not_allowed'));
  if (path === '/metrics') {
    const text = await deps.metrics.registry.metrics();
    return send(res, 200, deps.metrics.registry.contentType, text, requestId);
  }
  if (path === '/healthz') return send(res, 200, 'application/json; charset=utf-8', JSON.stringify({ status: 'ok' }), requestId);
  const checks = await readinessChecks(deps);
  const ok = isReady(checks);
  return send(res, ok ? 200 : 503, 'application/json; charset=utf-8', JSON.stringify({ status: ok ? 'ok' : 'unavailable', checks }), requestId);
}

function send(res: ServerResponse, status: number, contentType: string, body: string, requestId: string): void {
  res.writeHead(status, {
    'content-type': contentType,
    'content-length': Buffer.byteLength(body),
    'cache-control': 'no-store',
    'x-request-id': requestId,
  });
  res.end(res.req.method === 'HEAD' ? undefined : body);
}
