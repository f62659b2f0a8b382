/**
 * The records the gate writes to its organization's verification stream, as stream fields:
 * `permit.verified` (with the consume), `permit.rejected` (with a refusal) and, after the
 * upstream answered or failed, `execution.observed`. Every text is clamped to its cap
 * (verificationRecordFields), so a long request id cannot make an append, and so the gate, fail.
 * Each record carries an id of its own (`gate_record_id`, a random UUID), made once here: a
 * record appended again after an append whose outcome was unknown (record-backlog.ts) keeps it,
 * and the authority's drain records it once.
 *
 * @example
 *   const fields = executionRecord({ route, mode: 'enforce', requestId, permitId: claims.jti, claims,
 *     upstreamStatus: 200, durationMs: 12, atMs: Date.now() });
 *   executionRecords.add(fields, requestId); // execution-records.ts appends it in the next batch
 */
import { randomUUID } from 'node:crypto';
import type { PermitClaims } from '../shared/permits/claims.js';
import { verificationRecordFields } from '../shared/wire/verification-records.js';
import type { UpstreamOutcome, VerificationRecord } from '../shared/wire/verification-records.js';
import type { ProxyMode, ProxyRoute } from './config.js';

/**
 * The route a record names (its gate, `proxy:<name>`) and, for an MCP `tools/call`, the tool
 * called: an MCP route serves every tool of its server, each with a mode of its own, so its
 * records say which tool they are about.
 */
export type RecordedRoute = Pick<ProxyRoute, 'name'> & { readonly tool?: string };

export interface ExecutionRecordInput {
  route: RecordedRoute & Pick<ProxyRoute, 'action_type'>;
  mode: ProxyMode;
  requestId: string;
  permitId: string | null;
  claims: PermitClaims | null;
  /**
   * `answered`, `not_reached` (the request never left) or `unknown` (it may have reached the
   * upstream). Default: `answered` when `upstreamStatus` is a status, else `unknown`.
   */
  upstream?: UpstreamOutcome;
  /** The upstream's status when it answered; null otherwise. */
  upstreamStatus: number | null;
  durationMs: number;
  /** When the upstream answered or failed (ms since the epoch). */
  atMs: number;
  /** Why the answer is missing or incomplete: a stable code (forward.ts, upstream-outcome.ts) and words. */
  code?: string;
  reason?: string;
}

/**
 * The `execution.observed` record's fields, for the server to add to its execution records after the
 * upstream answered or failed. The permit stays consumed either way. Fails towards `unknown`: an
 * `answered` without a valid status cannot be believed, and a missing answer always has a code.
 */
export function executionRecord(input: ExecutionRecordInput): Record<string, string> {
  const status = input.upstreamStatus;
  const validStatus = status !== null && Number.isInteger(status) && status >= 100 && status <= 999;
  const claimed = input.upstream ?? (validStatus ? 'answered' : 'unknown');
  const upstream = claimed === 'answered' && !validStatus ? 'unknown' : claimed;
  const answered = upstream === 'answered';
  const code = input.code ?? '';
  return gateRecord({
    kind: 'execution.observed',
    route: input.route,
    mode: input.mode,
    nowMs: input.atMs,
    requestId: input.requestId,
    permitId: input.permitId ?? '',
    actionType: input.claims?.act ?? input.route.action_type,
    actorId: input.claims?.sub ?? '',
    code: answered || code !== '' ? code : 'UPSTREAM_ERROR',
    reason: answered || (input.reason ?? '') !== '' ? (input.reason ?? '') : 'the upstream did not answer',
    upstreamStatus: answered ? String(status) : '',
    durationMs: String(Math.max(0, Math.round(Number.isFinite(input.durationMs) ? input.durationMs : 0))),
    upstream,
  });
}

export interface GateRecordInput {
  kind: VerificationRecord['kind'];
  route: RecordedRoute;
  mode: ProxyMode;
  nowMs: number;
  requestId: string;
  permitId: string;
  actionType: string;
  actorId: string;
  code: string;
  reason: string;
  upstreamStatus?: string;
  durationMs?: string;
  /** execution.observed only. */
  upstream?: UpstreamOutcome;
}

/**
 * One record's stream fields, every text clamped to its cap, with a new gate record id. No `tool`
 * field unless the route names one: an empty name (a call that named none) is no tool either.
 */
export function gateRecord(input: GateRecordInput): Record<string, string> {
  const tool = input.route.tool;
  return verificationRecordFields({
    kind: input.kind,
    gate: `proxy:${input.route.name}`,
    mode: input.mode,
    at: new Date(input.nowMs).toISOString(),
    request_id: input.requestId,
    permit_id: input.permitId,
    action_type: input.actionType,
    actor_id: input.actorId,
    code: input.code,
    reason: input.reason,
    upstream_status: input.upstreamStatus ?? '',
    duration_ms: input.durationMs ?? '',
    ...(input.upstream !== undefined ? { upstream: input.upstream } : {}),
    gate_record_id: randomUUID(),
    ...(tool !== undefined && tool !== '' ? { tool } : {}),
  });
}
