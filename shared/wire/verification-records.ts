/**
 * Verification records: what a gate (the proxy) writes to its organization's stream in the
 * shared store, atomically with consuming a permit (or, for refusals and executions, on its
 * own), and what the authority drains into the audit log — at least once, idempotent by the
 * record's stream id, so nothing is lost while the authority is down.
 *
 * Stream entries are flat string maps; this schema is the one place their fields are defined.
 *
 * @example
 *   const record = verificationRecordFields({ kind: 'permit.verified', permit_id: jti, … });
 *   await store.consumePermit(permitStoreKey(org, jti), ttlMs, { stream: verificationStream(org), fields: record });
 */
import { z } from 'zod';

export const VERIFICATION_RECORD_KINDS = ['permit.verified', 'permit.rejected', 'execution.observed'] as const;

export const VerificationRecord = z.object({
  kind: z.enum(VERIFICATION_RECORD_KINDS),
  /** The gate that wrote it: `proxy:<route name>`. */
  gate: z.string().min(1).max(200),
  /** `enforce` or `shadow`; a shadow refusal was forwarded anyway (`would_block`). */
  mode: z.enum(['enforce', 'shadow']),
  /** When it happened at the gate (ISO 8601). */
  at: z.iso.datetime(),
  /** The gate's request id (X-Request-ID). */
  request_id: z.string().max(200),
  /** Empty when the permit could not be read (missing or malformed). */
  permit_id: z.string().max(64),
  action_type: z.string().max(256),
  actor_id: z.string().max(256),
  /** Refusals: the verification code (PERMIT_EXPIRED, …); empty otherwise. */
  code: z.string().max(64),
  reason: z.string().max(500),
  /** execution.observed: the upstream's status code and how long it took; empty otherwise. */
  upstream_status: z.string().max(3),
  duration_ms: z.string().max(20),
});
export type VerificationRecord = z.infer<typeof VerificationRecord>;

/** Each text field's length cap, read from the schema above (so it is stated once). */
const CAPS: ReadonlyArray<readonly [keyof VerificationRecord, number]> = Object.entries(VerificationRecord.shape).flatMap(([name, schema]) =>
  'maxLength' in schema && typeof schema.maxLength === 'number' ? [[name as keyof VerificationRecord, schema.maxLength] as const] : [],
);

/**
 * The record as stream fields (every field present, as a string), each text clamped to its cap.
 * No schema parse: the gate builds two records per request from values it has checked already,
 * and the authority's drain validates every record it reads (a malformed one is still recorded,
 * with its issues).
 */
export function verificationRecordFields(record: VerificationRecord): Record<string, string> {
  const fields: Record<string, string> = { ...record };
  for (const [name, cap] of CAPS) {
    const value = fields[name] as string;
    if (value.length > cap) fields[name] = value.slice(0, cap);
  }
  return fields;
}
