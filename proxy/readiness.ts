/**
 * Whether the proxy can decide requests: the authority's permit keys are loaded, the shared store
 * answers a ping in time, and every ext_authz listener serves. The admin `/readyz` and the gRPC
 * health service (grpc.health.v1 on the ext_authz listener) report the same checks.
 *
 * @example
 *   const checks = await readinessChecks({ keys, store, readyTimeoutMs: 1_000, frontDoors: () => extAuthz.checks() });
 *   // { keys: 'ok', store: 'unavailable', ext_authz_grpc: 'ok' }
 *   isReady(checks); // false
 */
import type { SharedStore } from '../shared/store/types.js';

export type CheckStatus = 'ok' | 'unavailable';

export interface ReadinessDeps {
  keys: { ready(): boolean };
  store: Pick<SharedStore, 'ping'>;
  /** The store gets this long to answer the ping. */
  readyTimeoutMs: number;
  /** The ext_authz listeners' readiness (`ext_authz_grpc`, `ext_authz_http`), when configured. */
  frontDoors: () => Record<string, CheckStatus>;
}

export async function readinessChecks(deps: ReadinessDeps): Promise<Record<string, CheckStatus>> {
  const storeOk = await withTimeout(deps.store.ping(), deps.readyTimeoutMs);
  return { keys: deps.keys.ready() ? 'ok' : 'unavailable', store: storeOk ? 'ok' : 'unavailable', ...deps.frontDoors() };
}

export function isReady(checks: Record<string, CheckStatus>): boolean {
  return Object.values(checks).every((check) => check === 'ok');
}

/** Resolves true when `promise` fulfils within `ms`; a hung Redis must not hang the probe. */
function withTimeout(promise: Promise<unknown>, ms: number): Promise<boolean> {
  return new Promise((resolve) => {
    const timer = setTimeout(() => resolve(false), ms);
    timer.unref();
    promise.then(
      () => {
        clearTimeout(timer);
        resolve(true);
      },
      () => {
        clearTimeout(timer);
        resolve(false);
      },
    );
  });
}
