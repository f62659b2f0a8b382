/**
 * `GET /v1/gates/readiness` (audit:read): per gate route in shadow mode, what it would have
 * blocked and whether it is ready for enforce (readiness.ts). The console's readiness page reads
 * it; so can a script deciding when to flip a route.
 */
import type { FastifyInstance } from 'fastify';
import type { ZodTypeProvider } from 'fastify-type-provider-zod';
import { CountersignError } from '../../shared/errors.js';
import { ReadinessQuery, ReadinessResponse } from '../../shared/wire/readiness.js';
import type { Principal } from '../auth/principal.js';
import type { Db } from '../store/db.js';
import type { Clock } from '../time.js';
import { gateReadiness } from './readiness.js';

export function gateRoutes(app: FastifyInstance, { db, clock }: { db: Db; clock: Clock }): void {
  app.withTypeProvider<ZodTypeProvider>().get(
    '/v1/gates/readiness',
    { config: { access: 'audit:read' }, schema: { querystring: ReadinessQuery, response: { 200: ReadinessResponse } } },
    async (request) => {
      const query = request.query;
      if (query.quiet_days > query.window_days) {
        throw new CountersignError('invalid_request', 'quiet_days cannot be longer than window_days: the window must cover the quiet days', {
          details: [{ path: 'query.quiet_days', message: `at most window_days (${query.window_days})` }],
        });
      }
      return gateReadiness(db, (request.principal as Principal).org.id, query, clock.now());
    },
  );
}
