/**
 * A draft of the policy, prefilled with the current text, and "Validate": the draft goes to
 * POST /v1/policies/validate (policy:write), which compiles and checks it and stores nothing.
 * The answer is shown as the API gives it: valid, or every problem with its path, line and
 * column. Saving is not offered here; PUT /v1/policies stays with the API and the CLI.
 *
 * Anyone who may read the policy may write a draft (to compare it with the current version);
 * without policy:write the page says so instead of offering "Validate".
 */
import { useState } from 'preact/hooks';
import { MAX_POLICY_SOURCE, validatePolicy, type PolicyFormat, type PolicyValidation } from '../policies-api';
import { messageOf, MissingPermission } from './parts';

interface Props {
  draft: string;
  format: PolicyFormat;
  onDraft: (draft: string) => void;
  onFormat: (format: PolicyFormat) => void;
  /** The current version's text and number, to start again from; null when there is none. */
  current: { source: string; format: PolicyFormat; version: number } | null;
  canValidate: boolean;
}

interface Checked {
  result: PolicyValidation;
  draft: string;
  format: PolicyFormat;
}

const plural = (count: number, one: string, many: string): string => `${count} ${count === 1 ? one : many}`;

function where(error: PolicyValidation['errors'][number]): string {
  if (error.line === null) return '';
  return error.column === null ? `line ${error.line}` : `line ${error.line}, column ${error.column}`;
}

export function PolicyDraft({ draft, format, onDraft, onFormat, current, canValidate }: Props) {
  const [checking, setChecking] = useState(false);
  const [checked, setChecked] = useState<Checked | null>(null);
  const [problem, setProblem] = useState<string | null>(null);

  const validate = async (): Promise<void> => {
    if (draft.trim() === '') {
      setChecked(null);
      setProblem('The draft is empty: write or paste a policy first.');
      return;
    }
    setChecking(true);
    setProblem(null);
    try {
      const result = await validatePolicy(draft, format);
      setChecked({ result, draft, format });
    } catch (error) {
      setChecked(null);
      setProblem(messageOf(error));
    } finally {
      setChecking(false);
    }
  };

  const onSubmit = (event: Event): void => {
    event.preventDefault();
    if (canValidate) void validate();
  };

  const stale = checked !== null && (checked.draft !== draft || checked.format !== format);

  return (
    <form class="draft" onSubmit={onSubmit}>
      <label for="policy-draft">Draft policy</label>
      <p id="policy-draft-hint" class="hint">
        {current === null ? 'Write or paste a policy.' : `Starts as the text of version ${current.version}.`} Nothing written here is stored.
      </p>
      <textarea
        id="policy-draft"
        class="code-input"
        name="draft"
        rows={16}
        spellcheck={false}
        autocomplete="off"
        maxLength={MAX_POLICY_SOURCE}
        aria-describedby="policy-draft-hint"
        value={draft}
        onInput={(event) => onDraft(event.currentTarget.value)}
        data-testid="policy-draft"
      />
      <label for="policy-format">Format</label>
      <select id="policy-format" name="format" value={format} onChange={(event) => onFormat(event.currentTarget.value === 'json' ? 'json' : 'yaml')} data-testid="policy-format">
        <option value="yaml">YAML</option>
        <option value="json">JSON</option>
      </select>
      <div class="actions">
        {canValidate && (
          <button type="submit" class="button primary" disabled={checking} data-testid="validate">
            {checking ? 'Validating…' : 'Validate'}
          </button>
        )}
        {current !== null && (
          <button
            type="button"
            class="button secondary"
            disabled={draft === current.source && format === current.format}
            onClick={() => {
              onDraft(current.source);
              onFormat(current.format);
            }}
            data-testid="draft-reset"
          >
            Start again from version {current.version}
          </button>
        )}
      </div>
      {!canValidate && <MissingPermission what="Validating a draft" needs={<code>policy:write</code>} testId="validate-permission" />}
      {problem !== null && (
        <p role="alert" class="error" data-testid="validation-error">
          {problem}
        </p>
      )}
      <div role="status" data-testid="validation-result" data-valid={checked === null ? undefined : String(checked.result.valid)}>
        {checked !== null && checked.result.valid && <p class="outcome">Valid: the draft compiles and passes every check. Nothing was stored.</p>}
        {checked !== null && !checked.result.valid && (
          <div class="blocked">
            <p>
              <strong>Not valid:</strong> {plural(checked.result.errors.length, 'problem', 'problems')}.
            </p>
            <ul class="problems">
              {checked.result.errors.map((error, index) => (
                <li key={index} data-testid="validation-problem">
                  <code>{error.path === '' ? '(the whole document)' : error.path}</code>
                  {where(error) !== '' && <span class="muted"> ({where(error)})</span>}: {error.message}
                </li>
              ))}
            </ul>
          </div>
        )}
        {stale && <p class="muted">The draft has changed since it was validated.</p>}
      </div>
    </form>
  );
}
