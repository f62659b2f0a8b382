/**
 * Permits on the wire: records (`GET /v1/permits/:id`, `GET /v1/permits`), revocation,
 * verification (`POST /v1-verify-permit`), reported effects (`POST /v1/effects`) and proofs
 * (`GET /v1/permits/:id/proof`).
 */
import { z } from 'zod';
import { MAX_TOKEN_LENGTH } from '../permits/signed-claims.js';
import { VERIFY_ERROR_CODES } from '../permits/verify-codes.js';
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

/**
 * A permit named in a path: its id, or the permit token itself (the @atlasent/sdk passes the token
 * where an id goes). A token is used only once its signature checks out, for its `jti`.
 */
export const PermitRefParams = z.object({
  id: z
    .string()
    .min(1)
    .max(MAX_TOKEN_LENGTH)
    .regex(/^[A-Za-z0-9_-]+(\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+)?$/, { message: 'neither a permit id nor a permit token' })
    .refine((id) => id.includes('.') || id.length <= 64, { message: 'a permit id is at most 64 characters' }),
});

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

/** A permit id or a permit token, as the deprecated revoke takes it in its body. */
const PermitRef = PermitRefParams.shape.id;

/**
 * The deprecated `POST /v1-revoke-permit`: the permit in `decision_id` (the SDK's name for what it
 * holds, the permit token or id), `permit_token` or `permit_id`, and an optional `reason` (empty
 * means none). Other keys are dropped unread: the SDK also sends its API key in the body, which is
 * never used (the credential is the Authorization header) nor stored.
 */
export const LegacyRevokePermitRequest = z
  .object({
    decision_id: PermitRef.optional(),
    permit_token: PermitRef.optional(),
    permit_id: PermitRef.optional(),
    reason: z.string().max(1000).optional(),
  })
  .refine((body) => [body.decision_id, body.permit_token, body.permit_id].filter((ref) => ref !== undefined).length === 1, {
    message: 'name the permit in exactly one of decision_id, permit_token and permit_id',
  });
export type LegacyRevokePermitRequest = z.infer<typeof LegacyRevokePermitRequest>;

/** Its answer: `revoked` and the permit's id in `decision_id`, as the SDK reads them, and the record. */
export const LegacyRevokePermitResponse = z.object({
  revoked: z.literal(true),
  decision_id: z.string(),
  permit_id: z.string(),
  revoked_at: z.string(),
  permit: PermitRecord,
});

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

/**
 * `POST /v1/permits/:id/verify`: the verdict of verify-permit, with the @atlasent/sdk's
 * `verification_type` and `evidence`, and the permit's record as it stands after the verification
 * (null when the authority has none for the id).
 */
export const VerifyPermitByIdResponse = VerifyPermitResponse.extend({
  verification_type: z.literal('permit'),
  evidence: z.object({
    permit_id: z.string().nullable(),
    status: PermitRecord.shape.status.nullable(),
    actor_id: z.string().nullable(),
    action_type: z.string().nullable(),
    expires_at: z.string().nullable(),
  }),
  permit: PermitRecord.nullable(),
});
export type VerifyPermitByIdResponse = z.infer<typeof VerifyPermitByIdResponse>;

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
