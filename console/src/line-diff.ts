/**
 * A line diff small enough to read: the common head and tail are matched first, then the lines
 * between by longest common subsequence (a table of (n + 1) × (m + 1) lengths, fine for policy-
 * sized text). Past MAX_CELLS the middle is shown as all removed, then all added, and the diff
 * says it is not minimal. `hunks` keeps a few unchanged lines around each change and folds the
 * rest, as `diff -u` does.
 *
 * @example
 *   const diff = diffLines('a\nb\nc\n', 'a\nB\nc\n');
 *   diff.lines.map((l) => l.kind); // ['same', 'removed', 'added', 'same']
 *   hunks(diff.lines, 3);          // [{ kind: 'lines', lines: [...] }]
 */

export type DiffKind = 'same' | 'added' | 'removed';

export interface DiffLine {
  kind: DiffKind;
  text: string;
  /** The line's number in the first text (null for an added line). */
  before: number | null;
  /** The line's number in the second text (null for a removed line). */
  after: number | null;
}

export interface LineDiff {
  lines: DiffLine[];
  added: number;
  removed: number;
  /** False when the texts were too far apart to compare line by line (see MAX_CELLS). */
  minimal: boolean;
}

export type Hunk = { kind: 'lines'; lines: DiffLine[] } | { kind: 'skipped'; count: number };

/** 4 million table cells (8 MB as 16-bit lengths): two texts of 2,000 changed lines each. */
const MAX_CELLS = 4_000_000;

/** The text's lines; a final newline ends the last line rather than starting an empty one. */
export function splitLines(text: string): string[] {
  if (text === '') return [];
  const lines = text.split(/\r\n|\r|\n/);
  if (lines[lines.length - 1] === '') lines.pop();
  return lines;
}

export function diffLines(beforeText: string, afterText: string): LineDiff {
  const a = splitLines(beforeText);
  const b = splitLines(afterText);
  const lines: DiffLine[] = [];
  let i = 0;
  let j = 0;
  const same = (): void => {
    lines.push({ kind: 'same', text: a[i] as string, before: i + 1, after: j + 1 });
    i++;
    j++;
  };
  const removed = (): void => {
    lines.push({ kind: 'removed', text: a[i] as string, before: i + 1, after: null });
    i++;
  };
  const added = (): void => {
    lines.push({ kind: 'added', text: b[j] as string, before: null, after: j + 1 });
    j++;
  };

  // The common head and tail cost nothing to match and usually hold nearly everything.
  let head = 0;
  while (head < a.length && head < b.length && a[head] === b[head]) head++;
  let endA = a.length;
  let endB = b.length;
  while (endA > head && endB > head && a[endA - 1] === b[endB - 1]) {
    endA--;
    endB--;
  }
  while (i < head) same();

  const n = endA - head;
  const m = endB - head;
  let minimal = true;
  if (n > 0 && m > 0 && n * m <= MAX_CELLS) {
    // table[x * width + y]: the LCS length of a[head + x .. endA) and b[head + y .. endB).
    // n * m <= MAX_CELLS keeps min(n, m), and so every length, well under 65,536.
    const width = m + 1;
    const table = new Uint16Array((n + 1) * width);
    for (let x = n - 1; x >= 0; x--) {
      for (let y = m - 1; y >= 0; y--) {
        table[x * width + y] =
          a[head + x] === b[head + y] ? (table[(x + 1) * width + y + 1] as number) + 1 : Math.max(table[(x + 1) * width + y] as number, table[x * width + y + 1] as number);
      }
    }
    while (i < endA && j < endB) {
      const x = i - head;
      const y = j - head;
      if (a[i] === b[j]) same();
      // Removed lines first where either order is as short, as `diff` does.
      else if ((table[(x + 1) * width + y] as number) >= (table[x * width + y + 1] as number)) removed();
      else added();
    }
  } else if (n > 0 && m > 0) {
    minimal = false;
  }
  while (i < endA) removed();
  while (j < endB) added();
  while (i < a.length) same();

  return {
    lines,
    added: lines.filter((line) => line.kind === 'added').length,
    removed: lines.filter((line) => line.kind === 'removed').length,
    minimal,
  };
}

/** The changed lines with `context` unchanged lines either side; longer unchanged runs are folded. */
export function hunks(lines: readonly DiffLine[], context = 3): Hunk[] {
  const keep = new Array<boolean>(lines.length).fill(false);
  lines.forEach((line, index) => {
    if (line.kind === 'same') return;
    for (let k = Math.max(0, index - context); k <= Math.min(lines.length - 1, index + context); k++) keep[k] = true;
  });
  const result: Hunk[] = [];
  let index = 0;
  while (index < lines.length) {
    const start = index;
    const kept = keep[index];
    while (index < lines.length && keep[index] === kept) index++;
    if (kept) result.push({ kind: 'lines', lines: lines.slice(start, index) });
    else result.push({ kind: 'skipped', count: index - start });
  }
  return result;
}
