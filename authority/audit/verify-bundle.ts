/**
 * Offline verification of an audit export bundle (no database, no network): the Ed25519
 * signature, every event's hash, the links between events, the declared count and head, and
 * optionally a checkpoint kept elsewhere. Each kind of tampering is named, with the sequence it
 * concerns:
 *
 *   signature   the bundle was changed after signing, another key signed it, or the key set
 *               holds no key with the bundle's signing_key_id
 *   malformed   not a bundle / not an event (a missing or mistyped field)
 *   modified    an event's contents disagree with its hash, a field outside the payload
 *               disagrees with the payload, or an event was rewritten with a recomputed hash
 *   removed     sequences are missing (a gap, or a cut-off tail)
 *   reordered   events are not in sequence order
 *   inserted    a second event claims a sequence, an event of another organization, or events
 *               appended after the head the bundle was signed with
 *   count       event_count disagrees with the events held
 *   head        chain_head_hash is not the hash of the last event
 *   checkpoint  the chain does not reach, or does not agree with, the given checkpoint
 *
 * The key is one PEM, or a key set (key-set.ts) from which the bundle's and the checkpoint's keys
 * are each picked by their signing_key_id.
 *
 * @example
 *   const report = verifyAuditBundle(JSON.parse(text), publicKeyPem, { checkpoint });
 *   const again = verifyAuditBundle(JSON.parse(text), parseAuditKeySet(keysJson), { checkpoint });
 *   if (!report.ok) for (const p of report.problems) console.log(p.kind, p.sequence, p.message);
 */
import { canonicalJson } from '../../shared/canonical-json.js';
import { AUDIT_BUNDLE_SIGNED_FIELDS, AuditCheckpointWire, AuditEventWire, AuditBundle as BundleShape } from '../../shared/wire/audit.js';
import { describeRange, reportLinks, reportOrder, resolveDuplicates, type ChainItem } from './bundle-chain.js';
import { computeEventHash } from './chain.js';
import { signedByProblem, type VerificationKey } from './signatures.js';
import { GENESIS_HASH } from './types.js';

export { signatureProblem, type VerificationKey } from './signatures.js';

export type ProblemKind = 'signature' | 'malformed' | 'modified' | 'removed' | 'reordered' | 'inserted' | 'count' | 'head' | 'checkpoint';

export interface BundleProblem {
  kind: ProblemKind;
  /** The event concerned; null for the bundle as a whole. */
  sequence: number | null;
  message: string;
}

export interface BundleReport {
  ok: boolean;
  problems: BundleProblem[];
  /** What was looked at, for the CLI's report. */
  checked: {
    events: number;
    first_sequence: number | null;
    last_sequence: number | null;
    signing_key_id: string | null;
    /** `not_covered`: the checkpoint lies before the bundle's first event, so it says nothing here. */
    checkpoint: 'none' | 'matched' | 'not_covered' | 'failed';
  };
}

type Add = (kind: ProblemKind, sequence: number | null, message: string) => void;

export interface VerifyOptions {
  /** A checkpoint (`{org_id, sequence, head_hash, signed_at, signature, signing_key_id}`) kept apart from the bundle. */
  checkpoint?: unknown;
  /** The key that signed the checkpoint, when not the bundle's (or not in the key set). */
  checkpointPublicKeyPem?: string;
}

/** The exact text a bundle's signature covers: JSON.stringify of the signed fields, in this order. */
export function bundleSigningText(bundle: Record<(typeof AUDIT_BUNDLE_SIGNED_FIELDS)[number], unknown>): string {
  const { export_id, org_id, chain_head_hash, event_count, signed_at, events } = bundle;
  return JSON.stringify({ export_id, org_id, chain_head_hash, event_count, signed_at, events });
}

/** The exact text a checkpoint's signature covers. */
export function checkpointSigningText(checkpoint: { org_id: string; sequence: number; head_hash: string; signed_at: string }): string {
  const { org_id, sequence, head_hash, signed_at } = checkpoint;
  return canonicalJson({ org_id, sequence, head_hash, signed_at });
}

const isObject = (value: unknown): value is Record<string, unknown> =>
  typeof value === 'object' && value !== null && !Array.isArray(value);

function sequenceOf(raw: unknown): number | null {
  if (!isObject(raw)) return null;
  if (Number.isSafeInteger(raw['sequence'])) return raw['sequence'] as number;
  const payload = raw['payload'];
  return isObject(payload) && Number.isSafeInteger(payload['sequence']) ? (payload['sequence'] as number) : null;
}

function firstIssue(error: { issues: Array<{ path: PropertyKey[]; message: string }> }): string {
  const issue = error.issues[0];
  if (!issue) return 'invalid';
  const path = issue.path.map(String).join('.');
  return path ? `${path}: ${issue.message}` : issue.message;
}

/** Fields outside the payload must repeat the payload's facts, which the hash covers. */
const MIRRORED: Array<[keyof AuditEventWire, string]> = [
  ...(['id', 'sequence', 'type', 'decision', 'actor_id', 'resource_type', 'resource_id', 'request_id', 'occurred_at'] as const).map(
    (field) => [field, field] as [keyof AuditEventWire, string],
  ),
  ['organization_id', 'org_id'],
  ['created_at', 'recorded_at'],
];

/** The event's hash recomputed, or null when its payload has no canonical form (JSON's 1e999). */
function recomputedHash(previousHash: string, payload: unknown): string | null {
  try {
    return computeEventHash(previousHash, payload);
  } catch {
    return null;
  }
}

export function verifyAuditBundle(bundle: unknown, key: VerificationKey, options: VerifyOptions = {}): BundleReport {
  const problems: BundleProblem[] = [];
  const add: Add = (kind, sequence, message) => {
    problems.push({ kind, sequence, message });
  };
  const checked: BundleReport['checked'] = {
    events: 0,
    first_sequence: null,
    last_sequence: null,
    signing_key_id: null,
    checkpoint: options.checkpoint === undefined ? 'none' : 'failed',
  };
  const finish = (): BundleReport => {
    // Bundle-wide problems first, then by sequence; stable, so discovery order breaks ties.
    problems.sort((a, b) => (a.sequence ?? -1) - (b.sequence ?? -1));
    return { ok: problems.length === 0, problems, checked };
  };

  if (!isObject(bundle) || !Array.isArray(bundle['events'])) {
    add('malformed', null, 'not an audit export bundle: expected an object with an events array');
    return finish();
  }
  // The header must be sound to say anything more; events are checked one by one below.
  const header = BundleShape.omit({ events: true }).safeParse(bundle);
  if (!header.success) {
    add('malformed', null, `the bundle header is malformed (${firstIssue(header.error)})`);
    return finish();
  }
  const head = header.data;
  const rawEvents = bundle['events'] as unknown[];
  checked.events = rawEvents.length;
  checked.signing_key_id = head.signing_key_id;

  const signature = signedByProblem(bundleSigningText({ ...head, events: rawEvents }), head.signature, key, head.signing_key_id);
  if (signature?.noKey) {
    add('signature', null, `${signature.message} (or the bundle's signing_key_id was altered)`);
  } else if (signature !== null) {
    add('signature', null, `${signature.message} (signing_key_id ${head.signing_key_id}): the bundle was changed after signing, or another key signed it`);
  }

  // Each event on its own: shape, hash, and agreement between its outer fields and its payload.
  const items: ChainItem[] = [];
  const malformed = new Set<number>();
  rawEvents.forEach((raw, position) => {
    const parsed = AuditEventWire.safeParse(raw);
    if (!parsed.success) {
      const sequence = sequenceOf(raw);
      if (sequence !== null) malformed.add(sequence);
      add('malformed', sequence, `the event at position ${position + 1} is malformed (${firstIssue(parsed.error)})`);
      return;
    }
    const event = parsed.data;
    // The raw payload, not zod's copy: every key it holds is covered by the hash.
    const payload = (raw as { payload: Record<string, unknown> }).payload;
    const sequence = event.payload.sequence;
    const recomputed = recomputedHash(event.previous_hash, payload);
    if (recomputed === null) {
      add('malformed', sequence, `the payload of event ${sequence} has no canonical JSON form`);
      malformed.add(sequence);
      return;
    }
    const hashOk = recomputed === event.hash;
    if (!hashOk) {
      add('modified', sequence, `event ${sequence} (${event.id}) does not match its hash: its payload, hash or previous_hash was changed`);
    }
    const disagreeing = MIRRORED.filter(([outer, inner]) => event[outer] !== payload[inner]).map(([outer]) => outer);
    if (disagreeing.length > 0) {
      add('modified', sequence, `event ${sequence}: ${disagreeing.join(', ')} outside the payload disagree(s) with the payload the hash covers`);
    }
    items.push({ position, sequence, id: event.id, orgId: event.payload.org_id, hash: event.hash, previousHash: event.previous_hash, hashOk });
  });

  // Events of another organization: one problem when it is the bundle's own org_id that changed.
  const foreign = items.filter((item) => item.orgId !== head.org_id);
  let chained = items.filter((item) => item.orgId === head.org_id);
  if (foreign.length > 0 && foreign.length === items.length && new Set(foreign.map((item) => item.orgId)).size === 1) {
    add('modified', null, `the bundle names organization ${head.org_id} but its events belong to ${foreign[0]?.orgId}`);
    chained = items;
  } else {
    for (const item of foreign) add('inserted', item.sequence, `event ${item.sequence} (${item.id}) belongs to organization ${item.orgId}, not ${head.org_id}`);
  }

  const unique = resolveDuplicates(chained, head.chain_head_hash, add);
  reportOrder(unique, add);
  const removed = reportLinks(unique, malformed, add);
  const last = unique.at(-1);
  checked.first_sequence = unique[0]?.sequence ?? null;
  checked.last_sequence = last?.sequence ?? null;

  // Head: the hash of the last event by sequence (genesis for an empty bundle).
  let appended = 0;
  let tailCut = false;
  if (head.chain_head_hash !== (last?.hash ?? GENESIS_HASH)) {
    const headAt = unique.findIndex((item) => item.hash === head.chain_head_hash);
    if (headAt >= 0) {
      const headSequence = unique[headAt]?.sequence;
      for (const item of unique.slice(headAt + 1)) {
        appended += 1;
        add('inserted', item.sequence, `event ${item.sequence} (${item.id}) comes after event ${headSequence}, the head the bundle was signed with: it was appended`);
      }
    } else {
      tailCut = true;
      add(
        'head',
        last?.sequence ?? null,
        last
          ? `chain_head_hash is not the hash of the last event (${last.sequence}): events after it were removed, or the head was altered`
          : 'the bundle holds no events but its chain_head_hash is not the genesis hash: its events were removed',
      );
    }
  }

  if (head.event_count !== rawEvents.length) {
    add('count', null, `event_count says ${head.event_count} events but the bundle holds ${rawEvents.length}`);
  }
  // What the declared count still lacks once gaps, malformed events and appended ones are
  // accounted for went missing at an end: after the last event when the head says so.
  const missingAtEnds = head.event_count - (unique.length - appended) - removed - (rawEvents.length - items.length);
  const first = unique[0];
  if (missingAtEnds > 0 && first && last) {
    const verb = missingAtEnds === 1 ? 'is' : 'are';
    if (tailCut) {
      add('removed', last.sequence + 1, `${describeRange(last.sequence + 1, last.sequence + missingAtEnds)} after the last event ${verb} missing: the bundle was cut short`);
    } else if (first.sequence - missingAtEnds >= 1) {
      add('removed', first.sequence - missingAtEnds, `${describeRange(first.sequence - missingAtEnds, first.sequence - 1)} before the first event ${verb} missing (or event_count was altered)`);
    }
  }

  if (options.checkpoint !== undefined) {
    checked.checkpoint = checkCheckpoint(options.checkpoint, options.checkpointPublicKeyPem ?? key, head.org_id, unique, add);
  }
  return finish();
}

function checkCheckpoint(
  value: unknown,
  key: VerificationKey,
  orgId: string,
  unique: readonly ChainItem[],
  add: Add,
): BundleReport['checked']['checkpoint'] {
  const parsed = AuditCheckpointWire.safeParse(value);
  if (!parsed.success) {
    add('checkpoint', null, `the checkpoint is malformed (${firstIssue(parsed.error)})`);
    return 'failed';
  }
  const checkpoint = parsed.data;
  const bad = signedByProblem(checkpointSigningText(checkpoint), checkpoint.signature, key, checkpoint.signing_key_id);
  if (bad?.noKey) {
    add('checkpoint', checkpoint.sequence, `the checkpoint cannot be checked: ${bad.message}`);
    return 'failed';
  }
  if (bad !== null) {
    add('checkpoint', checkpoint.sequence, `the checkpoint's ${bad.message} (signing_key_id ${checkpoint.signing_key_id}); it cannot be relied on`);
    return 'failed';
  }
  if (checkpoint.org_id !== orgId) {
    add('checkpoint', checkpoint.sequence, `the checkpoint is of organization ${checkpoint.org_id}, the bundle of ${orgId}`);
    return 'failed';
  }
  const first = unique[0]?.sequence ?? 1;
  const last = unique.at(-1)?.sequence ?? 0;
  if (checkpoint.sequence > last) {
    add(
      'checkpoint',
      checkpoint.sequence,
      `a checkpoint signed at ${checkpoint.signed_at} attests event ${checkpoint.sequence}, but the bundle ends at ${last}: ` +
        'the tail of the chain was truncated (or the export was asked to stop earlier)',
    );
    return 'failed';
  }
  if (checkpoint.sequence < first) return 'not_covered';
  const event = unique.find((item) => item.sequence === checkpoint.sequence);
  if (!event) {
    add('checkpoint', checkpoint.sequence, `event ${checkpoint.sequence}, attested by the checkpoint, is missing from the bundle`);
    return 'failed';
  }
  if (event.hash !== checkpoint.head_hash) {
    add('checkpoint', checkpoint.sequence, `event ${checkpoint.sequence} has another hash than the checkpoint attests: the chain up to it was rewritten`);
    return 'failed';
  }
  return 'matched';
}
