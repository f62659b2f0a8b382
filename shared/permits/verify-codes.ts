/**
 * The refusal codes a gate gives when it does not accept a permit, on their own so that code
 * without Node's crypto (the console, built for the browser) can list them too.
 *
 * @example
 *   VERIFY_ERROR_CODES.includes('MISSING_PERMIT'); // true
 */
export const VERIFY_ERROR_CODES = [
  'MISSING_PERMIT',
  'PERMIT_INVALID',
  'PERMIT_NOT_FOUND',
  'PERMIT_EXPIRED',
  'PERMIT_NOT_YET_VALID',
  'PERMIT_REVOKED',
  'PERMIT_ALREADY_USED',
  'ACTION_TYPE_MISMATCH',
  'ACTOR_MISMATCH',
  'BINDING_MISMATCH',
  'ORG_MISMATCH',
  'REPLAY_STATE_RESET',
  'INTERNAL_ERROR',
] as const;

export type VerifyErrorCode = (typeof VERIFY_ERROR_CODES)[number];
