import { z } from 'zod';
import { ACTOR_FORBIDDEN } from './components.js';

/**
 * The OpenAPI prose of the operations that exist for the @atlasent/sdk's calls: verify by id, the
 * deprecated revoke and the streaming evaluate. Kept apart from operations.ts, which spreads them
 * into OPERATIONS, so each file stays readable.
 *
 * @example
 *   SDK_OPERATIONS['POST /v1/permits/:id/verify'].operationId; // 'verifyPermitById'
 */
export const SDK_OPERATIONS = {
  'POST /v1/permits/:id/verify': {
    operationId: 'verifyPermitById',
    summary: 'Verify and consume a permit named in the path',
    tag: 'Permits',
    description: [
      'The verification of `POST /v1/verify-permit` (same core, same verdicts, same consume, same audit record), for a permit named in the path. `:id` is the permit token itself (what the SDK passes), or a permit id with the token in the body\'s `permit_token`; the body may also carry `action_type`, `actor_id` and `context` for the binding, as on verify-permit, and may be empty.',
      '',
      'A permit id alone proves nothing: whoever can read the audit log or the permit list knows it. It is refused with `valid: false` and `verify_error_code: "MISSING_PERMIT"`, never valid. A token for another permit than the id names is refused with `PERMIT_NOT_FOUND`, and nothing is consumed.',
      '',
      'The answer adds `verification_type: "permit"`, `evidence` (the permit\'s id, status, actor, action type and expiry after the verification) and `permit` (its record, or null when the authority has none).',
    ].join('\n'),
    success: 'The verdict, with the evidence and the permit record.',
  },
  'POST /v1/evaluate-stream': {
    operationId: 'evaluateStream',
    summary: 'Evaluate an action, answered as Server-Sent Events',
    tag: 'Evaluate',
    description: [
      'The evaluation of `POST /v1/evaluate` (same body forms, same decision, permit, audit record and idempotency, same scope and `evaluate` rate-limit bucket), answered as a `text/event-stream` for the SDK\'s `protectStream`. Anything refused before the stream starts (credential, scope, rate limit, a malformed body, an actor the API key may not speak for) is an ordinary error envelope with its status.',
      '',
      'Once started (200), the stream carries, each as `event:` and one `data:` line of JSON:',
      '',
      '| event | data |',
      '|---|---|',
      '| `progress` | `{stage: "evaluating", request_id}`, as soon as the request is accepted |',
      '| `decision` | `permitted` (allow or not), `decision`, `decision_id` (the permit token on allow, which the SDK verifies; else the evaluation id), `permit_token`, `permit_id`, `evaluation_id`, `request_id`, `reason` (the reason codes), `timestamp`, `is_final: true`, and `evaluation`: the whole answer of `POST /v1/evaluate` |',
      '| `done` | `{}`; the stream ends |',
      '| `error` | the error envelope (`{error, message, status, request_id}`) when the evaluation fails once started (503 `audit_unavailable`: nothing was decided; 409 for a reused `request_id`); the stream ends |',
    ].join('\n'),
    success: 'The events of the evaluation (`text/event-stream`).',
    successMediaType: 'text/event-stream',
    errors: { 403: ACTOR_FORBIDDEN },
    responses: { 200: z.string() },
  },
  'POST /v1/revoke-permit': {
    operationId: 'revokePermitLegacy',
    summary: 'Revoke a permit (deprecated)',
    tag: 'Permits',
    deprecated: true,
    description: [
      'Deprecated: use `POST /v1/permits/{id}/revoke`. Kept for the SDK\'s `revokePermit`; revokes exactly as that operation does (same scope, same record, the shared store told before the answer, the same `permit.revoked` audit event). Every answer carries `Deprecation: true`, and each request is counted in `countersign_deprecated_operation_total{operation="revoke-permit"}`.',
      '',
      'The permit is named in exactly one of `decision_id` (what the SDK sends), `permit_token` or `permit_id`: its id, or the permit token (verified with the permit keys before its `jti` is used). `reason` is optional; empty means none. Any other key is ignored: the API key the SDK also puts in the body is never read or stored (the credential is the `Authorization` header).',
    ].join('\n'),
    success: 'The permit is revoked: `revoked`, its id in `decision_id` and `permit_id`, `revoked_at`, and the record.',
    successHeaders: { Deprecation: '`true`: this operation is deprecated.' },
    errors: { 404: 'No such permit in this organization.', 409: 'The permit was consumed or has expired.' },
  },
} as const;
