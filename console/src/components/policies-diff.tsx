/**
 * Two texts side by side in time: choose what to compare (any stored version, read when first
 * compared, or the draft) and see a line diff. Each changed line says what it is three ways: a `+` or `-`,
 * the words "added" or "removed" for screen readers, and a colour that only repeats them.
 * Unchanged runs longer than a few lines are folded, with how many lines were left out.
 */
import { useState } from 'preact/hooks';
import { diffLines, hunks, type DiffLine, type LineDiff } from '../line-diff';
import { ApiError } from '../api';
import { getPolicyVersion, type PolicyVersionEntry, type PolicyWire } from '../policies-api';
import { CodeBox } from './parts';

interface Text {
  key: string;
  label: string;
  /** null: an older version, whose text is read when it is first compared. */
  source: string | null;
  version: number | null;
}

interface Shown {
  from: string;
  to: string;
  diff: LineDiff;
  /** The draft as it was compared, when one side was the draft. */
  draft: string | null;
}

const SIGNS: Record<DiffLine['kind'], string> = { same: ' ', added: '+', removed: '-' };

const lowerFirst = (text: string): string => text.charAt(0).toLowerCase() + text.slice(1);

const plural = (count: number, one: string, many: string): string => `${count} ${count === 1 ? one : many}`;

export function LineDiffView({ diff, label }: { diff: LineDiff; label: string }) {
  return (
    <CodeBox label={label} testId="policy-diff">
      <div class="diff">
        {hunks(diff.lines).map((hunk, index) =>
          hunk.kind === 'skipped' ? (
            <p key={`skip-${index}`} class="diff-skip">
              {plural(hunk.count, 'unchanged line', 'unchanged lines')} not shown
            </p>
          ) : (
            hunk.lines.map((line) => (
              <div key={`${line.before ?? '-'}:${line.after ?? '-'}`} class={`diff-line diff-${line.kind}`} data-testid="diff-line" data-kind={line.kind}>
                <span class="diff-sign" aria-hidden="true">
                  {SIGNS[line.kind]}
                </span>
                {line.kind !== 'same' && <span class="visually-hidden">{line.kind}: </span>}
                <span class="diff-text">{line.text}</span>
              </div>
            ))
          ),
        )}
      </div>
    </CodeBox>
  );
}

interface Props {
  policy: PolicyWire;
  versions: PolicyVersionEntry[];
  draft: string;
}

export function PolicyCompare({ policy, versions, draft }: Props) {
  const currentKey = `version-${policy.version}`;
  const texts: Text[] = [
    ...versions.map((entry) => ({
      key: `version-${entry.version}`,
      label: entry.version === policy.version ? `Version ${entry.version} (current)` : `Version ${entry.version}`,
      source: entry.version === policy.version ? policy.source : null,
      version: entry.version,
    })),
    { key: 'draft', label: 'The draft above', source: draft, version: null },
  ];
  if (!versions.some((entry) => entry.version === policy.version)) {
    texts.unshift({ key: currentKey, label: `Version ${policy.version} (current)`, source: policy.source, version: policy.version });
  }
  const [from, setFrom] = useState(currentKey);
  const [to, setTo] = useState('draft');
  const [shown, setShown] = useState<Shown | null>(null);
  const [problem, setProblem] = useState<string | null>(null);
  const [older, setOlder] = useState<ReadonlyMap<number, string>>(new Map());
  const textOf = (key: string): Text | undefined => texts.find((text) => text.key === key);

  const sourceOf = async (text: Text): Promise<string> => {
    if (text.source !== null) return text.source;
    const version = text.version as number;
    const known = older.get(version);
    if (known !== undefined) return known;
    const { source } = await getPolicyVersion(version);
    setOlder((previous) => new Map(previous).set(version, source));
    return source;
  };

  const compare = async (): Promise<void> => {
    const before = textOf(from);
    const after = textOf(to);
    if (!before || !after || before.key === after.key) {
      setProblem('Choose two different texts to compare.');
      return;
    }
    setProblem(null);
    try {
      const [a, b] = await Promise.all([sourceOf(before), sourceOf(after)]);
      setShown({ from: before.label, to: after.label, diff: diffLines(a, b), draft: before.key === 'draft' || after.key === 'draft' ? draft : null });
    } catch (error) {
      setProblem(`The version could not be read: ${error instanceof ApiError ? error.message : 'try again'}`);
    }
  };

  const onSubmit = (event: Event): void => {
    event.preventDefault();
    void compare();
  };

  const chooser = (id: string, label: string, value: string, onChange: (key: string) => void) => (
    <div>
      <label for={id}>{label}</label>
      <select id={id} value={value} onChange={(event) => onChange(event.currentTarget.value)} data-testid={id}>
        {texts.map((text) => (
          <option key={text.key} value={text.key}>
            {text.label}
          </option>
        ))}
      </select>
    </div>
  );

  return (
    <form class="compare" onSubmit={onSubmit}>
      <div class="compare-choices">
        {chooser('compare-from', 'Compare', from, setFrom)}
        {chooser('compare-to', 'With', to, setTo)}
      </div>
      <div class="actions">
        <button type="submit" class="button secondary" data-testid="compare">
          Show the changes
        </button>
      </div>
      {problem !== null && (
        <p role="alert" class="error">
          {problem}
        </p>
      )}
      <div role="status" data-testid="diff-summary">
        {shown !== null && (
          <p>
            From {lowerFirst(shown.from)} to {lowerFirst(shown.to)}:{' '}
            {shown.diff.added === 0 && shown.diff.removed === 0
              ? 'no differences.'
              : `${plural(shown.diff.added, 'line', 'lines')} added, ${plural(shown.diff.removed, 'line', 'lines')} removed.`}
            {!shown.diff.minimal && ' The texts differ too much to match line by line here: every changed line is shown as removed, then added.'}
          </p>
        )}
        {shown !== null && shown.draft !== null && shown.draft !== draft && <p class="muted">The draft has changed since; show the changes again to see them.</p>}
      </div>
      {shown !== null && (shown.diff.added > 0 || shown.diff.removed > 0) && <LineDiffView diff={shown.diff} label={`Changes from ${shown.from} to ${shown.to}`} />}
    </form>
  );
}
