/**
 * The order and the links of an audit bundle's events, each event already checked on its own
 * (verify-bundle.ts): one genuine event per sequence, the fewest events out of order, and the gaps
 * and broken links between consecutive sequences, each named as the tampering that explains it
 * (`inserted`, `reordered`, `removed`, `modified`).
 *
 * @example
 *   const unique = resolveDuplicates(items, bundle.chain_head_hash, add);
 *   reportOrder(unique, add);
 *   const removed = reportLinks(unique, malformedSequences, add); // how many sequences are missing
 */
import { GENESIS_HASH } from './types.js';

/** One event of the bundle that passed its own checks, in the terms the chain is checked in. */
export interface ChainItem {
  position: number;
  sequence: number;
  id: string;
  orgId: string;
  hash: string;
  previousHash: string;
  /** The event matches its own hash; when false it was already reported as modified. */
  hashOk: boolean;
}

/** The problems the order and links of a chain can show (verify-bundle.ts names the rest). */
export type ChainProblemKind = 'modified' | 'removed' | 'reordered' | 'inserted';

/** Records one problem of the chain, with the sequence it concerns. */
export type AddChainProblem = (kind: ChainProblemKind, sequence: number | null, message: string) => void;

/**
 * One event per sequence. Of several claiming the same sequence, the genuine one is the one the
 * next event (or the signed head) links to; a forger cannot make the original successor point to
 * a forged event without changing it too. Then a matching hash, then a link to its predecessor.
 */
export function resolveDuplicates(items: readonly ChainItem[], chainHeadHash: string, add: AddChainProblem): ChainItem[] {
  const bySequence = new Map<number, ChainItem[]>();
  for (const item of items) bySequence.set(item.sequence, [...(bySequence.get(item.sequence) ?? []), item]);
  const lastSequence = Math.max(0, ...bySequence.keys());
  const unique: ChainItem[] = [];
  for (const [sequence, group] of [...bySequence].sort(([a], [b]) => a - b)) {
    const score = (item: ChainItem): number => {
      const next = sequence === lastSequence ? item.hash === chainHeadHash : bySequence.get(sequence + 1)?.some((n) => n.previousHash === item.hash);
      const previous = sequence === 1 ? item.previousHash === GENESIS_HASH : bySequence.get(sequence - 1)?.some((p) => p.hash === item.previousHash);
      return (next ? 4 : 0) + (item.hashOk ? 2 : 0) + (previous ? 1 : 0);
    };
    // Ties go to the earliest in the bundle (group is in bundle order).
    const genuine = group.reduce((best, item) => (score(item) > score(best) ? item : best));
    unique.push(genuine);
    for (const item of group) {
      if (item === genuine || !item.hashOk) continue;
      const copy = item.id === genuine.id && item.hash === genuine.hash;
      add('inserted', sequence, copy ? `event ${sequence} appears twice` : `a second event (${item.id}) claims sequence ${sequence}; the chain continues from ${genuine.id}`);
    }
  }
  return unique;
}

/** The fewest events that must move to restore sequence order: those outside a longest increasing run. */
export function reportOrder(unique: readonly ChainItem[], add: AddChainProblem): void {
  const byPosition = [...unique].sort((a, b) => a.position - b.position);
  const tails: number[] = [];
  const previous: number[] = [];
  byPosition.forEach((item, i) => {
    let low = 0;
    let high = tails.length;
    while (low < high) {
      const mid = (low + high) >> 1;
      if ((byPosition[tails[mid] as number] as ChainItem).sequence < item.sequence) low = mid + 1;
      else high = mid;
    }
    previous[i] = low > 0 ? (tails[low - 1] as number) : -1;
    tails[low] = i;
  });
  const inOrder = new Set<number>();
  for (let i = tails.at(-1) ?? -1; i >= 0; i = previous[i] as number) inOrder.add(i);
  byPosition.forEach((item, i) => {
    if (inOrder.has(i)) return;
    const before = byPosition[i - 1]?.sequence;
    const after = byPosition[i + 1]?.sequence;
    const between = [before, after].filter((s) => s !== undefined).join(' and ');
    add('reordered', item.sequence, `event ${item.sequence} is out of order: it is at position ${item.position + 1}${between ? `, next to event(s) ${between}` : ''}`);
  });
}

/** Gaps and broken links between consecutive sequences; returns how many sequences are missing. */
export function reportLinks(unique: readonly ChainItem[], malformed: ReadonlySet<number>, add: AddChainProblem): number {
  const first = unique[0];
  if (first?.sequence === 1 && first.hashOk && first.previousHash !== GENESIS_HASH) {
    add('modified', 1, 'event 1 does not start from the genesis hash: it was rewritten');
  }
  let removed = 0;
  const rewritten = new Set<number>();
  for (let i = 1; i < unique.length; i += 1) {
    const a = unique[i - 1] as ChainItem;
    const b = unique[i] as ChainItem;
    if (b.sequence > a.sequence + 1) {
      if (b.hashOk && b.previousHash === a.hash) {
        add('modified', b.sequence, `event ${b.sequence} links to event ${a.sequence} although sequences lie between: its sequence was rewritten`);
        continue;
      }
      const missing: number[] = [];
      for (let s = a.sequence + 1; s < b.sequence; s += 1) if (!malformed.has(s)) missing.push(s);
      const [from, to] = [missing[0], missing.at(-1)];
      if (from !== undefined && to !== undefined) {
        removed += missing.length;
        add('removed', from, `${describeRange(from, to)} ${missing.length === 1 ? 'is' : 'are'} missing: event ${b.sequence} does not follow event ${a.sequence}`);
      }
      continue;
    }
    // A changed event whose hash no longer matches was reported already, and explains a broken link.
    if (b.previousHash === a.hash || !a.hashOk || !b.hashOk) continue;
    // Both match their hashes yet do not link: one was rewritten and its hash recomputed. If the
    // link after b breaks too, b was replaced; otherwise a was.
    const c = unique[i + 1];
    const replaced = c !== undefined && c.sequence === b.sequence + 1 && c.previousHash !== b.hash && c.hashOk;
    const culprit = replaced ? b : a;
    if (rewritten.has(culprit.sequence)) continue;
    rewritten.add(culprit.sequence);
    const why = replaced
      ? `event ${b.sequence} was replaced: it does not link to event ${a.sequence}, and event ${b.sequence + 1} does not link to it`
      : `event ${a.sequence} was rewritten and its hash recomputed: event ${b.sequence} links to a different hash`;
    add('modified', culprit.sequence, why);
  }
  return removed;
}

export function describeRange(from: number, to: number): string {
  return from === to ? `event ${from}` : `events ${from}–${to}`;
}
