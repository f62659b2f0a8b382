/**
 * The calls the permits and audit page makes, all through api.ts (`json` and `send`: the session
 * cookie, the CSRF header on the export's POST, the server's own error messages):
 *
 *   GET  /v1/permits?limit=10              the newest permits, to pick one (permits:read)
 *   GET  /v1/permits/:id/proof             the permit, its evaluation's and its own audit events,
 *                                          the latest checkpoint (permits:read or audit:read)
 *   GET  /v1/audit/events?type=evaluation.decided&resource_id=<evaluation id>
 *                                          an evaluation's decision and the permit it issued (audit:read)
 *   GET  /v1/audit/status[?from_sequence&to_sequence]
 *                                          head, last checkpoint, a range verified (audit:read)
 *   POST /v1/audit/exports                 a signed bundle of a range, as text (audit:read)
 *   GET  /v1/audit/keys                    the keys that verify bundles, as text (audit:read)
 *
 * Wire types are type-only imports: nothing of zod or node reaches the bundle.
 */
import type { z } from 'zod';
import type { AuditCheckpointWire, AuditEventWire, AuditStatusResponse } from '../../shared/wire/audit.js';
import type { ListPermitsResponse, PermitProofResponse, PermitRecord } from '../../shared/wire/permits.js';
import { getEvaluationEvent, json, send } from './api';

export type PermitProof = z.infer<typeof PermitProofResponse>;
export type PermitWire = z.infer<typeof PermitRecord>;
export type PermitList = z.infer<typeof ListPermitsResponse>;
export type { AuditCheckpointWire, AuditEventWire, AuditStatusResponse };

/** What a story is asked for: `?permit=<id>` or `?evaluation=<id>`. */
export type StoryTarget = { kind: 'permit' | 'evaluation'; id: string };

/** An evaluation id is a UUID (authority/evaluate/evaluate.ts); a permit id is 22 base64url characters. */
const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

/** What someone typed into "Permit or evaluation id": an evaluation when it is a UUID, else a permit. */
export function targetOfInput(text: string): StoryTarget | null {
  const id = text.trim();
  if (id === '') return null;
  return { kind: UUID.test(id) ? 'evaluation' : 'permit', id };
}

/** The story the query string names; `permit` wins when both are given. */
export function targetOfSearch(search: URLSearchParams): StoryTarget | null {
  const permit = search.get('permit')?.trim();
  if (permit) return { kind: 'permit', id: permit };
  const evaluation = search.get('evaluation')?.trim();
  if (evaluation) return { kind: 'evaluation', id: evaluation };
  return null;
}

/** An audit range: both ends optional (the server's default is the newest events up to the head). */
export interface SequenceRange {
  from: number | null;
  to: number | null;
}

function rangeQuery(range: SequenceRange): string {
  const query = new URLSearchParams();
  if (range.from !== null) query.set('from_sequence', String(range.from));
  if (range.to !== null) query.set('to_sequence', String(range.to));
  const text = query.toString();
  return text === '' ? '' : `?${text}`;
}

export async function listRecentPermits(signal?: AbortSignal): Promise<PermitList> {
  return (await json<PermitList>('/v1/permits?limit=10', { signal })).body;
}

export async function getPermitProof(id: string, signal?: AbortSignal): Promise<PermitProof> {
  return (await json<PermitProof>(`/v1/permits/${encodeURIComponent(id)}/proof`, { signal })).body;
}

/** The evaluation's `evaluation.decided` event (its details name the permit it issued, or null); null when there is none. */
export async function getEvaluation(id: string, signal?: AbortSignal): Promise<AuditEventWire | null> {
  return getEvaluationEvent(id, signal);
}

/** `details.permit_id` of an `evaluation.decided` event: the permit the evaluation issued, or null. */
export function permitIdOf(evaluation: AuditEventWire): string | null {
  const id = evaluation.payload.details['permit_id'];
  return typeof id === 'string' && id !== '' ? id : null;
}

export async function getAuditStatus(range: SequenceRange, signal?: AbortSignal): Promise<AuditStatusResponse> {
  return (await json<AuditStatusResponse>(`/v1/audit/status${rangeQuery(range)}`, { signal })).body;
}

/**
 * A signed bundle of the range (`{}`: the whole chain), as the exact text the server sent: the
 * signature covers those bytes, so they are never parsed and written again.
 */
export async function exportAuditBundle(range: SequenceRange): Promise<string> {
  const body: { from_sequence?: number; to_sequence?: number } = {};
  if (range.from !== null) body.from_sequence = range.from;
  if (range.to !== null) body.to_sequence = range.to;
  return (await send('/v1/audit/exports', { method: 'POST', body })).text();
}

/** The key set `countersign audit verify --keys` reads, as the server sent it. */
export async function getAuditKeysText(): Promise<string> {
  return (await send('/v1/audit/keys')).text();
}

/** What a bundle says about itself, for its file name; null fields when the text is not one. */
export function bundleFacts(text: string): { orgId: string | null; first: number | null; last: number | null; count: number | null } {
  try {
    const bundle = JSON.parse(text) as { org_id?: unknown; event_count?: unknown; events?: Array<{ sequence?: unknown }> };
    const sequence = (event: { sequence?: unknown } | undefined) => (typeof event?.sequence === 'number' ? event.sequence : null);
    return {
      orgId: typeof bundle.org_id === 'string' ? bundle.org_id : null,
      first: sequence(bundle.events?.[0]),
      last: sequence(bundle.events?.at(-1)),
      count: typeof bundle.event_count === 'number' ? bundle.event_count : null,
    };
  } catch {
    return { orgId: null, first: null, last: null, count: null };
  }
}

/** File names keep to letters, digits, `.`, `_` and `-`. */
export function fileNamePart(text: string): string {
  return text.replace(/[^A-Za-z0-9._-]+/g, '-').replace(/^-+|-+$/g, '') || 'unknown';
}

/**
 * Offers `text` as a file: a Blob of exactly these characters (UTF-8), an object URL, a temporary
 * `<a download>` clicked, then the URL revoked (a little later: a download that has only just
 * started still reads it).
 */
export function downloadText(fileName: string, text: string): void {
  const url = URL.createObjectURL(new Blob([text], { type: 'application/json' }));
  const link = document.createElement('a');
  link.href = url;
  link.download = fileName;
  link.hidden = true;
  document.body.append(link);
  link.click();
  link.remove();
  window.setTimeout(() => URL.revokeObjectURL(url), 10_000);
}
