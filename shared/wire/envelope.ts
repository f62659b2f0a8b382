/**
 * The error envelope on the wire. The codes themselves live in shared/errors.ts.
 *
 * @example
 *   ErrorEnvelope.parse(await response.json()); // throws unless it is a proper envelope
 */
import { z } from 'zod';
import { ERROR_CATALOGUE, type ErrorCode } from '../errors.js';

const codes = Object.keys(ERROR_CATALOGUE) as [ErrorCode, ...ErrorCode[]];

export const ErrorDetail = z
  .object({ path: z.string(), message: z.string(), line: z.number().int().optional(), column: z.number().int().optional() })
  .strict();

export const ErrorEnvelope = z
  .object({
    error: z.enum(codes),
    message: z.string().min(1),
    status: z.number().int().min(400).max(599),
    request_id: z.string().min(1),
    details: z.array(ErrorDetail).optional(),
    retry_after_ms: z.number().int().nonnegative().optional(),
    reason: z.string().optional(),
  })
  .strict();
export type ErrorEnvelope = z.infer<typeof ErrorEnvelope>;
