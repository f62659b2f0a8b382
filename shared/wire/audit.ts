/**
 * The audit log on the wire: `GET /v1/audit/events` (and the SDK's `GET /v1-audit/events`),
 * `POST /v1/audit/exports` (and `POST /v1-audit/exports`), `GET /v1/audit/keys`, and the shapes
 * an offline verifier reads (export bundles, checkpoints).
 *
 * Field names are snake_case and events are wire-identical with what the hash chain covers, so a
 * saved response can be handed to `countersign audit verify` without reshaping.
 *
 * @example
 *   const page = AuditEventsResponse.parse(await response.json());
 *   const next = page.next_cursor; // null on the last page
 */
import { z } from 'zod';
import { EventType } from './events.js';
import { queryList } from './query-list.js';

export const HEX_SHA256 = /^[0-9a-f]{64}$/;
const Hash = z.string().regex(HEX_SHA256, { message: 'not a lowercase hex SHA-256' });

/** The most events one page of `GET /v1/audit/events` returns. */
export const MAX_AUDIT_PAGE = 500;
export const DEFAULT_AUDIT_PAGE = 50;

/**
 * The @atlasent/sdk's names for evaluations, one per decision, as filters: each stands for our
 * `evaluation.decided` events with that decision. Its other names (`policy.updated`, the
 * `permit.*` ones) are ours already.
 */
export const SDK_EVENT_TYPE_ALIASES = {
  'evaluate.allow': { type: 'evaluation.decided', decision: 'allow' },
  'evaluate.deny': { type: 'evaluation.decided', decision: 'deny' },
  'evaluate.hold': { type: 'evaluation.decided', decision: 'hold' },
  'evaluate.escalate': { type: 'evaluation.decided', decision: 'escalate' },
} as const satisfies Record<string, { type: EventType; decision: string }>;
export type SdkEventTypeAlias = keyof typeof SDK_EVENT_TYPE_ALIASES;

/** An event type, or one of the SDK's names for some of them. */
const EventTypeFilter = z.union([EventType, z.enum(Object.keys(SDK_EVENT_TYPE_ALIASES) as [SdkEventTypeAlias, ...SdkEventTypeAlias[]])]);

/**
 * `type=a&type=b`, `type=a,b` or the SDK's `types=a,b`: one list of event types (or the SDK's
 * aliases). Unknown names are refused so a typo does not silently return nothing.
 */
const EventTypeList = queryList(EventTypeFilter, EventType.options.length + Object.keys(SDK_EVENT_TYPE_ALIASES).length);

const Filter = z.string().min(1).max(256);
const Instant = z.iso.datetime({ offset: true });

export const AuditEventsQuery = z.object({
  limit: z.coerce.number().int().min(1).max(MAX_AUDIT_PAGE).default(DEFAULT_AUDIT_PAGE),
  /** `next_cursor` of the previous page. */
  cursor: z.string().min(1).max(64).optional(),
  type: EventTypeList.optional(),
  /** The SDK's spelling of `type`. */
  types: EventTypeList.optional(),
  actor_id: Filter.optional(),
  request_id: Filter.optional(),
  resource_id: Filter.optional(),
  /** occurred_at ≥ from. */
  from: Instant.optional(),
  /** occurred_at < to. */
  to: Instant.optional(),
});
export type AuditEventsQuery = z.infer<typeof AuditEventsQuery>;

/**
 * Every fact of an event; the hash covers its canonical JSON. Loose on purpose: a field this
 * build does not know must still reach the verifier, or the hash would no longer match.
 */
export const AuditPayloadWire = z.looseObject({
  id: z.string(),
  org_id: z.string(),
  sequence: z.number().int().min(1),
  type: z.string(),
  actor_id: z.string().nullable(),
  decision: z.string().nullable(),
  resource_type: z.string().nullable(),
  resource_id: z.string().nullable(),
  request_id: z.string().nullable(),
  credential: z.string().nullable(),
  occurred_at: z.string(),
  recorded_at: z.string(),
  details: z.record(z.string(), z.unknown()),
});

export const AuditEventWire = z.object({
  id: z.string(),
  organization_id: z.string(),
  sequence: z.number().int().min(1),
  type: z.string(),
  decision: z.string().nullable(),
  actor_id: z.string().nullable(),
  resource_type: z.string().nullable(),
  resource_id: z.string().nullable(),
  request_id: z.string().nullable(),
  payload: AuditPayloadWire,
  hash: Hash,
  previous_hash: Hash,
  occurred_at: z.string(),
  created_at: z.string(),
});
export type AuditEventWire = z.infer<typeof AuditEventWire>;

export const AuditEventsResponse = z.object({
  events: z.array(AuditEventWire),
  next_cursor: z.string().nullable(),
  /** Events matching the filters, on every page (the cursor does not change it). */
  total: z.number().int().nonnegative(),
});
export type AuditEventsResponse = z.infer<typeof AuditEventsResponse>;

/**
 * A sequence range, both ends inclusive, both optional (an empty body exports the whole chain),
 * and the SDK's filters: `types` (a comma list, as on the list, aliases included), `actor_id`,
 * `from` and `to` (occurred_at, `to` exclusive). A bundle is always a gap-free piece of the chain,
 * so that it verifies offline: with filters it runs from the first matching event to the last,
 * the events between them included. Strict: an unknown key is refused rather than ignored.
 */
export const AuditExportRequest = z
  .object({
    from_sequence: z.number().int().min(1).optional(),
    to_sequence: z.number().int().min(1).optional(),
    types: EventTypeList.optional(),
    actor_id: Filter.optional(),
    from: Instant.optional(),
    to: Instant.optional(),
  })
  .strict();
export type AuditExportRequest = z.infer<typeof AuditExportRequest>;

/** The signed part of a bundle, in the key order the signature covers. */
export const AUDIT_BUNDLE_SIGNED_FIELDS = ['export_id', 'org_id', 'chain_head_hash', 'event_count', 'signed_at', 'events'] as const;

export const AuditBundle = z.object({
  export_id: z.string(),
  org_id: z.string(),
  /** The hash of the bundle's last event; 64 zeros when it holds none. */
  chain_head_hash: Hash,
  event_count: z.number().int().nonnegative(),
  signed_at: z.string(),
  events: z.array(AuditEventWire),
  /** base64url (no padding) Ed25519 over JSON.stringify of the signed fields, in that order. */
  signature: z.string(),
  signing_key_id: z.string(),
});
export type AuditBundle = z.infer<typeof AuditBundle>;

/** A signed statement "organization `org_id`'s chain had `head_hash` at `sequence`". */
export const AuditCheckpointWire = z.object({
  org_id: z.string(),
  sequence: z.number().int().min(1),
  head_hash: Hash,
  signed_at: z.string(),
  /** base64url (no padding) Ed25519 over canonicalJSON({org_id, sequence, head_hash, signed_at}). */
  signature: z.string(),
  signing_key_id: z.string(),
});
export type AuditCheckpointWire = z.infer<typeof AuditCheckpointWire>;

export const AuditPublicKeyWire = z.object({
  key_id: z.string(),
  algorithm: z.literal('Ed25519'),
  /** SPKI PEM, what `countersign audit verify --key` reads. */
  public_key_pem: z.string(),
  created_at: z.string(),
  retired_at: z.string().nullable(),
});

export const AuditKeysResponse = z.object({ keys: z.array(AuditPublicKeyWire) });

/** `GET /v1/audit/status`: the range to verify; default the newest MAX_STATUS_EVENTS events. */
export const AuditStatusQuery = z
  .object({
    from_sequence: z.coerce.number().int().min(1).optional(),
    to_sequence: z.coerce.number().int().min(1).optional(),
  })
  .strict();

/**
 * `GET /v1/audit/status` (audit:read): the chain's head, its last signed checkpoint, and a
 * verification of a range of it, done as `countersign audit verify` does (hashes recomputed from
 * the stored events, links, the signature, and the checkpoint where the range reaches it).
 */
export const AuditStatusResponse = z.object({
  /** The newest event; null while the chain is empty. */
  head: z.object({ sequence: z.number().int(), hash: Hash, occurred_at: z.string() }).nullable(),
  last_checkpoint: AuditCheckpointWire.nullable(),
  verification: z.object({
    ok: z.boolean(),
    from_sequence: z.number().int().nullable(),
    to_sequence: z.number().int().nullable(),
    events: z.number().int(),
    /** `matched`: the range reaches the last checkpoint and agrees with it; `not_covered`: the range lies beside it. */
    checkpoint: z.enum(['none', 'matched', 'not_covered', 'failed']),
    problems: z.array(z.object({ kind: z.string(), sequence: z.number().int().nullable(), message: z.string() })),
  }),
});
export type AuditStatusResponse = z.infer<typeof AuditStatusResponse>;
