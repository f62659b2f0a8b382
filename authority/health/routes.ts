/**
 * `/healthz` (the process answers) and `/readyz` (the database and the shared store answer), on
 * both the API and the admin port; the only routes without a credential.
 */
import type { FastifyInstance } from 'fastify';
import type { SharedStore } from '../../shared/store/types.js';
import type { Db } from '../store/db.js';

export interface Readiness {
  status: 'ok' | 'unavailable';
  checks: Record<'database' | 'store', 'ok' | 'unavailable'>;
}

const within = <T>(promise: Promise<T>, ms: number): Promise<T> =>
  Promise.race([promise, new Promise<T>((_, reject) => setTimeout(() => reject(new Error('timed out')), ms).unref())]);

export async function checkReadiness(db: Db, store: SharedStore): Promise<Readiness> {
  const [database, shared] = await Promise.allSettled([within(db.ping(), 2_000), within(store.ping(), 2_000)]);
  const checks = {
    database: database.status === 'fulfilled' ? 'ok' : 'unavailable',
    store: shared.status === 'fulfilled' ? 'ok' : 'unavailable',
  } as const;
  return { status: checks.database === 'ok' && checks.store === 'ok' ? 'ok' : 'unavailable', checks };
}

export function healthRoutes(app: FastifyInstance, deps: { db: Db; store: SharedStore }): void {
  app.get('/healthz', { config: { access: 'public' } }, async () => ({ status: 'ok' }));
  app.get('/readyz', { config: { access: 'public' } }, async (request, reply) => {
    const readiness = await checkReadiness(deps.db, deps.store);
    if (readiness.status !== 'ok') request.log.warn({ checks: readiness.checks }, 'not ready');
    return reply.code(readiness.status === 'ok' ? 200 : 503).send(readiness);
  });
}
