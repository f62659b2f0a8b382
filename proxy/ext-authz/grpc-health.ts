/**
 * gRPC's standard health service (`grpc.health.v1.Health`) on the ext_authz gRPC listener, for
 * Kubernetes gRPC probes and Envoy's gRPC health checks. The status is the proxy's readiness, the
 * admin `/readyz`'s (readiness.ts): SERVING while the permit keys are loaded, the store answers
 * and the listener is not draining; NOT_SERVING otherwise.
 *
 * - Services: `""` (the server as a whole) and `envoy.service.auth.v3.Authorization` have the same
 *   status; any other name is NOT_FOUND (Check) or SERVICE_UNKNOWN (Watch), as the protocol says.
 * - Watch answers the current status at once, then again whenever it changes (read every
 *   WATCH_INTERVAL_MS); a drain sends NOT_SERVING and ends every watch, so it does not hold the
 *   shutdown open.
 *
 * @example
 *   const health = addHealthService(server, { ready: async () => isReady(await readinessChecks(deps)) });
 *   health.drain(); // watchers see NOT_SERVING, Check answers NOT_SERVING from now on
 */
import { status as grpcStatus, type sendUnaryData, type Server, type ServerUnaryCall, type ServerWritableStream } from '@grpc/grpc-js';
import { AUTHORIZATION_SERVICE_NAME, healthService, SERVING_STATUS, type HealthCheckRequest, type HealthCheckResponse } from './protos.js';

/** How often an open Watch reads the readiness again. */
export const WATCH_INTERVAL_MS = 5_000;

const SERVICES: ReadonlySet<string> = new Set(['', AUTHORIZATION_SERVICE_NAME]);

export interface HealthOptions {
  /** The proxy's readiness (rejecting counts as not ready). */
  ready: () => Promise<boolean>;
}

export interface HealthService {
  /** From now on NOT_SERVING; open watches get it and end. */
  drain(): void;
}

export function addHealthService(server: Server, options: HealthOptions): HealthService {
  let draining = false;
  /** Open watches, each with whether it watches a known service. */
  const watches = new Map<ServerWritableStream<HealthCheckRequest, HealthCheckResponse>, boolean>();

  async function current(): Promise<number> {
    if (draining) return SERVING_STATUS.NOT_SERVING;
    const ready = await options.ready().catch(() => false);
    return ready && !draining ? SERVING_STATUS.SERVING : SERVING_STATUS.NOT_SERVING;
  }

  function check(call: ServerUnaryCall<HealthCheckRequest, HealthCheckResponse>, callback: sendUnaryData<HealthCheckResponse>): void {
    const service = call.request.service ?? '';
    if (!SERVICES.has(service)) {
      callback({ code: grpcStatus.NOT_FOUND, details: `unknown service ${JSON.stringify(service)}` });
      return;
    }
    void current().then((status) => callback(null, { status }));
  }

  function list(_call: ServerUnaryCall<unknown, unknown>, callback: sendUnaryData<{ statuses: Record<string, HealthCheckResponse> }>): void {
    void current().then((status) => callback(null, { statuses: Object.fromEntries([...SERVICES].map((name) => [name, { status }])) }));
  }

  function watch(call: ServerWritableStream<HealthCheckRequest, HealthCheckResponse>): void {
    const service = call.request.service ?? '';
    if (!SERVICES.has(service)) {
      // The protocol keeps the call open: the service might become known later (it never does here).
      call.write({ status: SERVING_STATUS.SERVICE_UNKNOWN });
      if (draining) call.end();
      else watches.set(call, false);
      call.on('cancelled', () => watches.delete(call));
      return;
    }
    let last: number | undefined;
    const send = async () => {
      const status = await current();
      if (status !== last && !call.cancelled && call.writable) {
        last = status;
        call.write({ status });
      }
    };
    const timer = setInterval(() => void send(), WATCH_INTERVAL_MS);
    timer.unref();
    const stop = () => {
      clearInterval(timer);
      watches.delete(call);
    };
    call.on('cancelled', stop);
    call.on('finish', stop);
    watches.set(call, true);
    void send();
  }

  server.addService(healthService().service, { Check: check, List: list, Watch: watch });
  return {
    drain() {
      draining = true;
      for (const [call, known] of watches) {
        if (!call.writable) continue;
        if (known) call.write({ status: SERVING_STATUS.NOT_SERVING });
        call.end();
      }
      watches.clear();
    },
  };
}
