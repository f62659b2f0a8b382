/**
 * Creating a key: a name, the scopes (only those the creator holds are offered), an optional
 * address allowlist, optional allowed actors and an optional expiry. The server narrows and
 * refuses (a key is never wider than its creator); the form only keeps people from asking for
 * what they cannot have, and shows the server's message when it refuses anyway (an allowlist or
 * actors outside the creating key's, say).
 */
import { useState } from 'preact/hooks';
import { ApiError, type SignedInSession } from '../api';
import { actorLines, allowlistLines, badActorPatterns, badCidrs, createKey, endOfDay, scopeHint, todayLocal, type CreatedKey } from '../keys-api';

/** What the form starts with: empty, or the key being rotated's name, scopes, allowlist and actors. */
export interface KeyDraft {
  name: string;
  scopes: readonly string[];
  allowlist: string;
  /** Allowed actors, one per line. */
  actors: string;
  /** The name of the key this one is to replace. */
  replaces: string | null;
  /** Scopes of that key the creator cannot give. */
  withheld: readonly string[];
}

export const EMPTY_DRAFT: KeyDraft = { name: '', scopes: [], allowlist: '', actors: '', replaces: null, withheld: [] };

interface Props {
  session: SignedInSession;
  draft: KeyDraft;
  onCreated: (created: CreatedKey, replaces: string | null) => void;
}

const MAX_NAME = 200;
const fieldId = (scope: string): string => `scope-${scope.replace(/[^a-z_]/g, '-')}`;

export function KeyCreateForm({ session, draft, onCreated }: Props) {
  const grantable = session.permissions;
  const [name, setName] = useState(draft.name);
  const [scopes, setScopes] = useState<ReadonlySet<string>>(() => new Set(draft.scopes.filter((scope) => grantable.includes(scope))));
  const [allowlist, setAllowlist] = useState(draft.allowlist);
  const [actors, setActors] = useState(draft.actors);
  const [expiry, setExpiry] = useState('');
  const [sending, setSending] = useState(false);
  const [problem, setProblem] = useState<string | null>(null);
  const today = todayLocal(Date.now());
  const asKey = session.method === 'api_key';

  const toggle = (scope: string, on: boolean): void => {
    setScopes((previous) => {
      const next = new Set(previous);
      if (on) next.add(scope);
      else next.delete(scope);
      return next;
    });
  };

  const submit = async (event: Event): Promise<void> => {
    event.preventDefault();
    if (sending) return;
    const trimmed = name.trim();
    const blocks = allowlistLines(allowlist);
    const bad = badCidrs(blocks);
    const patterns = actorLines(actors);
    const badPatterns = badActorPatterns(patterns);
    const expiresAt = expiry === '' ? null : endOfDay(expiry);
    let refusal: string | null = null;
    if (trimmed === '') refusal = 'Give the key a name, so people can tell what it is for.';
    else if (scopes.size === 0) refusal = 'Choose at least one scope.';
    else if (bad.length > 0) refusal = `Not a CIDR block (such as 10.0.0.0/8 or 2001:db8::/32): ${bad.join(', ')}.`;
    else if (badPatterns.length > 0) refusal = `A * may only end an actor pattern (such as agent:*): ${badPatterns.join(', ')}.`;
    else if (expiry !== '' && (expiresAt === null || expiry < today)) refusal = 'The expiry date must be today or later.';
    if (refusal !== null) {
      setProblem(refusal);
      return;
    }
    setSending(true);
    setProblem(null);
    try {
      // In the order the session lists them, so the new key reads like its creator.
      const chosen = grantable.filter((scope) => scopes.has(scope));
      const created = await createKey({
        name: trimmed,
        scopes: chosen,
        ...(blocks.length > 0 ? { allowed_cidrs: blocks } : {}),
        ...(patterns.length > 0 ? { allowed_actors: patterns } : {}),
        ...(expiresAt !== null ? { expires_at: expiresAt } : {}),
      });
      onCreated(created, draft.replaces);
    } catch (error) {
      setProblem(error instanceof ApiError ? error.message : 'The key could not be created. Try again.');
      setSending(false);
    }
  };

  return (
    <form class="key-form" onSubmit={(event) => void submit(event)} noValidate data-testid="create-key-form">
      {draft.replaces !== null && (
        <p class="notice" data-testid="rotation-draft">
          This new key is to replace “{draft.replaces}”: it starts with the same scopes and allowlist. Change the name if you like, then create it.
          {draft.withheld.length > 0 && (
            <>
              {' '}
              <strong>You cannot give it these scopes of the old key, because you do not hold them: {draft.withheld.join(', ')}.</strong> Someone
              who holds them must rotate this key.
            </>
          )}
        </p>
      )}
      <label for="key-name">Name</label>
      <p class="hint" id="key-name-hint">
        What the key is for and where it is used, such as “payments service, production”.
      </p>
      <input
        id="key-name"
        name="name"
        type="text"
        maxLength={MAX_NAME}
        autoComplete="off"
        aria-describedby="key-name-hint"
        value={name}
        onInput={(event) => setName(event.currentTarget.value)}
        data-testid="key-name"
      />
      <fieldset class="key-scopes" aria-describedby="key-scopes-hint">
        <legend>Scopes</legend>
        <p class="hint" id="key-scopes-hint">
          What the key may do. Only the scopes {asKey ? 'this session’s API key holds' : 'your role grants'} are offered. Give a key only what its
          service needs: an agent usually needs just <code>evaluate:write</code> and <code>verify:execute</code>.
        </p>
        {grantable.length === 0 && <p class="error">You hold no scope to give.</p>}
        <ul class="scope-options">
          {grantable.map((scope) => (
            <li key={scope}>
              <input
                id={fieldId(scope)}
                type="checkbox"
                name="scopes"
                value={scope}
                checked={scopes.has(scope)}
                onChange={(event) => toggle(scope, event.currentTarget.checked)}
                data-testid="scope-option"
              />
              <label for={fieldId(scope)}>
                <code>{scope}</code>
                {scopeHint(scope) !== null && <span class="scope-hint"> {scopeHint(scope)}</span>}
              </label>
            </li>
          ))}
        </ul>
      </fieldset>
      <label for="key-allowlist">Allowed addresses (optional)</label>
      <p class="hint" id="key-allowlist-hint">
        One CIDR block per line, such as <code>10.0.0.0/8</code> or <code>2001:db8::/32</code>; a bare address means just that address. The key is
        refused from anywhere else. Leave empty for any address
        {asKey ? ' your session’s key may be used from (a key made by a key keeps within its allowlist)' : ''}.
      </p>
      <textarea
        id="key-allowlist"
        name="allowed_cidrs"
        rows={3}
        autoComplete="off"
        spellcheck={false}
        aria-describedby="key-allowlist-hint"
        value={allowlist}
        onInput={(event) => setAllowlist(event.currentTarget.value)}
        data-testid="key-allowlist"
      />
      <label for="key-actors">Allowed actors (optional)</label>
      <p class="hint" id="key-actors-hint">
        The actor ids the key may ask decisions for, one per line: an exact id such as <code>finance-bot</code>, or a prefix ending in{' '}
        <code>*</code> such as <code>agent:*</code>. Any other actor is refused. Give an agent’s key only its agents, so it cannot speak for a
        person. Leave empty for any actor
        {asKey ? ' your session’s key may speak for (a key made by a key keeps within its actors)' : ''}.
      </p>
      <textarea
        id="key-actors"
        name="allowed_actors"
        rows={2}
        autoComplete="off"
        spellcheck={false}
        aria-describedby="key-actors-hint"
        value={actors}
        onInput={(event) => setActors(event.currentTarget.value)}
        data-testid="key-actors"
      />
      <label for="key-expiry">Expires (optional)</label>
      <p class="hint" id="key-expiry-hint">
        The key stops working at the end of this day, in your time zone. Leave empty for a key that does not expire
        {asKey ? ' before your session’s key does (a key made by a key cannot outlive it)' : ''}.
      </p>
      <input
        id="key-expiry"
        name="expires_at"
        type="date"
        min={today}
        aria-describedby="key-expiry-hint"
        value={expiry}
        onInput={(event) => setExpiry(event.currentTarget.value)}
        data-testid="key-expiry"
      />
      <div class="actions">
        <button type="submit" class="button primary" disabled={sending || grantable.length === 0} data-testid="create-key">
          {sending ? 'Creating…' : 'Create key'}
        </button>
      </div>
      {problem !== null && (
        <p role="alert" class="error" data-testid="create-error">
          {problem}
        </p>
      )}
    </form>
  );
}
