/**
 * Permits on the wire: records (`GET /v1/permits/:id`, `GET /v1/permits`), revocation,
 * verification (`POST /v1-verify-permit`), reported effects (`POST /v1/effects`) and proofs
 * (`GET /v1/permits/:id/proof`).
 */
import { z } from 'zod';
import { VERIFY_ERROR_CODES } from '../permits/verify.js';
import { AuditCheckpointWire, AuditEventWire } from './audit.js';
import { ActionType, EvaluateContext } from './evaluate.js';

export const PermitRecord = z.object({
  id: z.string(),
  organization_id: z.string(),
  evaluation_id: z.string(),
  request_id: z.string(),
  action_type: z.string(),
  actor_id: z.string(),
  binding_hash: z.string(),
  bound_facts: z.record(z.string(), z.unknown()),
  kid: z.string(),
  status: z.enum(['issued', 'consumed', 'revoked', 'expired']),
  issued_at: z.string(),
  expires_at: z.string(),
  consumed_at: z.string().nullable(),
  revoked_at: z.string().nullable(),
  revoked_by: z.string().nullable(),
  revocation_reason: z.string().nullable(),
});

/** `GET /v1/permits/:id/proof`: the permit, its evaluation's and its own audit events, the latest checkpoint. */
export const PermitProofResponse = z.object({
  permit: PermitRecord,
  events: z.array(AuditEventWire),
  checkpoint: AuditCheckpointWire.nullable(),
});

export const PermitIdParams = z.object({ id: z.string().min(1).max(64).regex(/^[A-Za-z0-9_-]+$/, { message: 'not a permit id' }) });

export const PermitResponse = z.object({ permit: PermitRecord });

export const ListPermitsQuery = z.object({
  status: z.enum(['issued', 'consumed', 'revoked', 'expired']).optional(),
  actor_id: z.string().min(1).max(256).optional(),
  action_type: z.string().min(1).max(256).optional(),
  limit: z.coerce.number().int().min(1).max(500).default(50),
  cursor: z.string().max(200).optional(),
});

export const ListPermitsResponse = z.object({
  permits: z.array(PermitRecord),
  total: z.number().int(),
  next_cursor: z.string().nullable(),
});

export const RevokePermitRequest = z.object({ reason: z.string().min(1).max(1000).optional() }).strict();

/** Empty strings mean "not given" (the @atlasent/sdk sends them when it has no value). */
const optionalText = z
  .string()
  .max(256)
  .optional()
  .transform((value) => (value === '' ? undefined : value));

export const VerifyPermitRequest = z.object({
  permit_token: z.string().max(8192).optional(),
  action_type: optionalText.pipe(ActionType.optional()),
  actor_id: optionalText,
  context: EvaluateContext.optional(),
});
export type VerifyPermitRequest = z.infer<typeof VerifyPermitRequest>;

export const VerifyPermitResponse = z.object({
  valid: z.boolean(),
  outcome: z.enum(['allow', 'deny']),
  verification_status: z.enum(['verified', 'rejected']),
  verify_error_code: z.enum(VERIFY_ERROR_CODES).optional(),
  reason: z.string(),
  decision: z.enum(['allow', 'deny']),
  consumed: z.boolean(),
  permit_id: z.string().nullable(),
  request_id: z.string().nullable(),
  binding: z.enum(['full', 'partial']).nullable(),
  verified_at: z.string(),
});
export type VerifyPermitResponse = z.infer<typeof VerifyPermitResponse>;

export const ReportEffectRequest = z
  .object({
    permit_id: z.string().min(1).max(64),
    /** What happened: the effect succeeded, failed, or was partial. */
    status: z.enum(['succeeded', 'failed', 'partial']),
    summary: z.string().min(1).max(2000).optional(),
    details: z.record(z.string(), z.unknown()).optional(),
    occurred_at: z.iso.datetime({ offset: true }).optional(),
  })
  .strict();

export const ReportEffectResponse = z.object({
  effect: z.object({
    id: z.string(),
    permit_id: z.string(),
    status: z.enum(['succeeded', 'failed', 'partial']),
    sequence: z.number().int(),
    hash: z.string(),
    occurred_at: z.string(),
  }),
});
