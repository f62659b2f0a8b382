/**
 * Verification records: what a gate (the proxy) writes to its organization's stream in the
 * shared store, atomically with consuming a permit (or, for refusals and executions, on its
 * own), and what the authority drains into the audit log — at least once, idempotent by the
 * record's stream id and by the gate's own id for it (`gate_record_id`), so nothing is lost while
 * the authority is down and a record the gate appended twice is recorded once.
 *
 * Stream entries are flat string maps; this schema is the one place their fields are defined.
 *
 * @example
 *   const record = verificationRecordFields({ kind: 'permit.verified', permit_id: jti, … });
 *   await store.consumePermit(permitStoreKey(org, jti), ttlMs, { stream: verificationStream(org), fields: record });
 */
import { z } from 'zod';

export const VERIFICATION_RECORD_KINDS = ['permit.verified', 'permit.rejected', 'execution.observed'] as const;

/**
 * What became of a forwarded request at the upstream: it `answered` (with a status), it was
 * `not_reached` (the request certainly never left the gate: connection refused, DNS failure,
 * connect timeout, no route, TLS handshake failure), or the result is `unknown` (the request may
 * have reached the upstream and run: a reset or a time-out after sending, the client gone).
 */
export const UPSTREAM_OUTCOMES = ['answered', 'not_reached', 'unknown'] as const;
export type UpstreamOutcome = (typeof UPSTREAM_OUTCOMES)[number];

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
  /**
   * Refusals: the verification code (PERMIT_EXPIRED, …). execution.observed: why the upstream's
   * answer is missing or incomplete (UPSTREAM_REFUSED, CLIENT_GONE, …). Empty otherwise.
   */
  code: z.string().max(64),
  reason: z.string().max(500),
  /** execution.observed: the upstream's status code and how long it took; empty otherwise. */
  upstream_status: z.string().max(3),
  duration_ms: z.string().max(20),
  /**
   * execution.observed only. Optional: records written by gates that predate it still parse, and
   * the drain then reads the outcome from `upstream_status` (see upstreamOutcomeOf).
   */
  upstream: z.enum(UPSTREAM_OUTCOMES).optional(),
  /**
   * The gate's own id for the record, the same on every attempt to append it: a gate that cannot
   * tell whether an append reached the stream appends it again, and the drain records it once.
   * Optional: gates that predate it send none, and their records are told apart by stream id.
   */
  gate_record_id: z.string().min(1).max(64).optional(),
  /**
   * An MCP route's records of a `tools/call`: the tool called (as named in the call, clamped), so
   * what a route decided can be read per tool. Absent on HTTP routes and on an MCP route's
   * refusals that concern no single tool (a method the gate does not understand, a batch), and
   * on records from gates that predate it.
   */
  tool: z.string().max(128).optional(),
});
export type VerificationRecord = z.infer<typeof VerificationRecord>;

/**
 * The outcome a record states, or for a record without one, what can be read from its status: a
 * status means the upstream answered, no status means it cannot be known whether the request
 * reached the upstream. A record that claims `answered` without a status is read as `unknown`.
 */
export function upstreamOutcomeOf(record: Pick<VerificationRecord, 'upstream' | 'upstream_status'>): UpstreamOutcome {
  const answered = /^[1-9]\d\d$/.test(record.upstream_status);
  if (record.upstream === undefined || record.upstream === 'answered') return answered ? 'answered' : 'unknown';
  return record.upstream;
}

/**
 * The `details` of an `execution.observed` audit event, as the authority's drain writes them; the
 * same object is the webhook payload's and appears in the permit's proof. Loose: events recorded
 * by older builds carry fewer fields and must still be read.
 */
export const ExecutionObservedDetails = z.looseObject({
  gate: z.string(),
  mode: z.enum(['enforce', 'shadow']),
  /** The stream id of the record the event was drained from. */
  record_id: z.string(),
  upstream: z.enum(UPSTREAM_OUTCOMES),
  /** The upstream's status when it answered; null otherwise (text only for a malformed record, kept rather than lost). */
  upstream_status: z.union([z.number().int(), z.string()]).nullable(),
  /** Why the answer is missing or incomplete (a stable code) and in words; null for a complete answer. */
  code: z.string().nullable(),
  reason: z.string().nullable(),
  duration_ms: z.union([z.number(), z.string()]).nullable(),
  action_type: z.string().nullable(),
  /** An MCP `tools/call`'s tool; absent on HTTP routes. */
  tool: z.string().optional(),
});
export type ExecutionObservedDetails = z.infer<typeof ExecutionObservedDetails>;

/** Each text field's length cap, read from the schema above (so it is stated once); optional fields' too. */
const CAPS: ReadonlyArray<readonly [keyof VerificationRecord, number]> = Object.entries(VerificationRecord.shape).flatMap(([name, field]) => {
  const schema = field instanceof z.ZodOptional ? field.unwrap() : field;
  return 'maxLength' in schema && typeof schema.maxLength === 'number' ? [[name as keyof VerificationRecord, schema.maxLength] as const] : [];
});

/**
 * The record as stream fields (every field given, as a string; `upstream` only on executions,
 * `gate_record_id` and `tool` when given), each text clamped to its cap.
 * No schema parse: the gate builds two records per request from values it has checked already,
 * and the authority's drain validates every record it reads (a malformed one is still recorded,
 * with its issues).
 */
export function verificationRecordFields(record: VerificationRecord): Record<string, string> {
  const fields: Record<string, string> = {};
  for (const name of Object.keys(record) as (keyof VerificationRecord)[]) {
    const value = record[name];
    if (value !== undefined) fields[name] = value;
  }
  for (const [name, cap] of CAPS) {
    const value = fields[name];
    if (value !== undefined && value.length > cap) fields[name] = value.slice(0, cap);
  }
  return fields;
}
