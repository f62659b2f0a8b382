/** `/healthz` and `/readyz` bodies. */
import { z } from 'zod';

export const HealthResponse = z.object({ status: z.literal('ok') });

export const ReadinessResponse = z.object({
  status: z.enum(['ok', 'unavailable']),
  checks: z.record(z.string(), z.enum(['ok', 'unavailable'])),
});
