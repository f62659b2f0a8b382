/**
 * What the readiness page counts: the window in days, the quiet days a route needs without an
 * unexpected would-block, and the refusal codes the operator expects (counted, but not against
 * readiness). Each control is checked as the server checks it; "Show readiness" puts the values
 * in the query string (or, unchanged, asks again).
 */
import { useState } from 'preact/hooks';
import { checkDraft, codesOf, MAX_DAYS, REFUSAL_CODES, unknownCodes, type DraftProblems, type ReadinessDraft, type ReadinessQueryValues } from '../readiness-api';

interface Props {
  initial: ReadinessDraft;
  /** What is wrong with `initial` (a hand-edited link), shown at once. */
  initialProblems: DraftProblems;
  busy: boolean;
  onApply: (query: ReadinessQueryValues) => void;
}

export function ReadinessControls({ initial, initialProblems, busy, onApply }: Props) {
  const [draft, setDraft] = useState<ReadinessDraft>(initial);
  const [problems, setProblems] = useState<DraftProblems>(initialProblems);

  const field = (name: keyof ReadinessDraft) => ({
    value: draft[name],
    onInput: (event: { currentTarget: HTMLInputElement }) => setDraft({ ...draft, [name]: event.currentTarget.value }),
    'aria-invalid': problems[name] !== undefined,
  });

  const onSubmit = (event: Event): void => {
    event.preventDefault();
    const checked = checkDraft(draft);
    setProblems(checked.problems ?? {});
    if (checked.query !== null) onApply(checked.query);
  };

  const problem = (name: keyof ReadinessDraft) =>
    problems[name] === undefined ? null : (
      <p id={`readiness-${name}-problem`} class="error" data-testid={`readiness-${name}-problem`}>
        {problems[name]}
      </p>
    );
  const described = (name: keyof ReadinessDraft, hint: string) => (problems[name] === undefined ? hint : `${hint} readiness-${name}-problem`);
  const strange = unknownCodes(codesOf(draft.expected).filter((code) => /^[A-Z][A-Z0-9_]*$/.test(code)));
  const anyProblem = Object.keys(problems).length > 0;

  return (
    <form class="readiness-controls" onSubmit={onSubmit} aria-labelledby="controls-heading" noValidate>
      <h2 id="controls-heading">What to count</h2>
      <div class="readiness-days">
        <div>
          <label for="readiness-window">Window (days)</label>
          <p id="readiness-window-hint" class="hint">
            How far back to count, 1 to {MAX_DAYS}.
          </p>
          <input id="readiness-window" name="window_days" type="number" min={1} max={MAX_DAYS} step={1} inputMode="numeric" aria-describedby={described('windowDays', 'readiness-window-hint')} data-testid="readiness-window" {...field('windowDays')} />
          {problem('windowDays')}
        </div>
        <div>
          <label for="readiness-quiet">Quiet days</label>
          <p id="readiness-quiet-hint" class="hint">
            Days without an unexpected would-block before a route is ready; at most the window.
          </p>
          <input id="readiness-quiet" name="quiet_days" type="number" min={1} max={MAX_DAYS} step={1} inputMode="numeric" aria-describedby={described('quietDays', 'readiness-quiet-hint')} data-testid="readiness-quiet" {...field('quietDays')} />
          {problem('quietDays')}
        </div>
      </div>
      <label for="readiness-expected">Expected refusal codes</label>
      <p id="readiness-expected-hint" class="hint">
        Separated by commas; counted, but not against readiness. The codes: {REFUSAL_CODES.join(', ')}.
      </p>
      <input id="readiness-expected" name="expected" type="text" autocomplete="off" spellcheck={false} aria-describedby={described('expected', 'readiness-expected-hint')} data-testid="readiness-expected" {...field('expected')} />
      {problem('expected')}
      {strange.length > 0 && problems.expected === undefined && (
        <p class="muted" data-testid="readiness-expected-unknown">
          No gate gives {strange.join(', ')}: {strange.length === 1 ? 'it is' : 'they are'} counted as expected anyway, but check the spelling.
        </p>
      )}
      <div class="actions">
        <button type="submit" class="button primary" disabled={busy} data-testid="readiness-apply">
          {busy ? 'Counting…' : 'Show readiness'}
        </button>
      </div>
      {anyProblem && (
        <p role="alert" class="visually-hidden">
          Check the controls: {Object.values(problems).join(' ')}
        </p>
      )}
    </form>
  );
}
