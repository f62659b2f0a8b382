/**
 * API keys: list, create, revoke, rotate. Needs `keys:write`, the permission every key endpoint
 * asks for; without it the page says so and shows nothing else.
 *
 * A new key's secret is in the create answer only (the server keeps its hash): it is held in this
 * page's state until "Done", and never written anywhere, so a reload cannot bring it back. A new
 * key is never wider than its creator: the form offers only
 * the session's own permissions, and the server narrows the rest and refuses what is wider.
 */
import { useEffect, useRef, useState } from 'preact/hooks';
import type { SignedInSession } from '../api';
import { KeyCard } from '../components/keys-card';
import { EMPTY_DRAFT, KeyCreateForm, type KeyDraft } from '../components/keys-create-form';
import { KeySecretPanel } from '../components/keys-secret';
import { formatClock } from '../format';
import { rememberIdentities } from '../identities';
import { KEYS_PERMISSION, keyStatus, listKeys, type ApiKeyRecord, type CreatedKey } from '../keys-api';
import { useLatestLoad } from '../latest-load';
import { usePageTitle } from '../page-title';
import '../keys.css';

/** Newest first: the key just made is the one people look for. */
const newestFirst = (a: ApiKeyRecord, b: ApiKeyRecord): number => b.created_at.localeCompare(a.created_at);

function rotatedName(name: string, nowMs: number): string {
  const date = new Date(nowMs).toISOString().slice(0, 10);
  return `${name} (rotated ${date})`.slice(0, 200);
}

function MissingPermission({ session }: { session: SignedInSession }) {
  const who =
    session.method === 'api_key'
      ? 'The API key this session is signed in with does not hold it.'
      : `Your role${session.role === null ? '' : ` (${session.role})`} does not grant it; administrators have it.`;
  return (
    <p class="notice" data-testid="keys-forbidden">
      Managing API keys needs the permission <code>{KEYS_PERMISSION}</code>. {who} Ask an administrator of {session.organization.name} for a key or
      for the permission.
    </p>
  );
}

export function KeysPage({ session }: { session: SignedInSession }) {
  usePageTitle('API keys');
  const allowed = session.permissions.includes(KEYS_PERMISSION);
  const [keys, setKeys] = useState<ApiKeyRecord[] | null>(null);
  const [loadedAt, setLoadedAt] = useState<number | null>(null);
  const [problem, setProblem] = useState<string | null>(null);
  const [created, setCreated] = useState<{ key: CreatedKey; replaces: string | null } | null>(null);
  const [draft, setDraft] = useState<KeyDraft>(EMPTY_DRAFT);
  /** Bumped to start the form afresh (after a key is made, or to rotate another key). */
  const [formRound, setFormRound] = useState(0);
  const [outcome, setOutcome] = useState<string | null>(null);
  const formHeading = useRef<HTMLHeadingElement>(null);
  const outcomeLine = useRef<HTMLParagraphElement>(null);
  const listHeading = useRef<HTMLHeadingElement>(null);
  const focusForm = useRef(false);

  const refresh = useLatestLoad(
    listKeys,
    (list) => {
      setKeys(list);
      setLoadedAt(Date.now());
    },
    setProblem,
  );

  useEffect(() => {
    if (allowed) void refresh();
  }, [allowed]);

  useEffect(() => {
    if (!focusForm.current) return;
    focusForm.current = false;
    formHeading.current?.focus();
  }, [formRound]);

  useEffect(() => {
    if (outcome !== null) outcomeLine.current?.focus();
  }, [outcome]);

  // The secret's panel goes away on "Done": focus goes on to the list, not to the page's start.
  const hadSecret = useRef(false);
  useEffect(() => {
    if (hadSecret.current && created === null) listHeading.current?.focus();
    hadSecret.current = created !== null;
  }, [created]);

  const heading = (
    <h1 id="page-title" tabIndex={-1}>
      API keys
    </h1>
  );
  if (!allowed) {
    return (
      <>
        {heading}
        <MissingPermission session={session} />
      </>
    );
  }

  const onCreated = (key: CreatedKey, replaces: string | null): void => {
    setCreated({ key, replaces });
    setOutcome(null);
    setDraft(EMPTY_DRAFT);
    setFormRound((round) => round + 1);
    void refresh();
  };

  const onRotate = (key: ApiKeyRecord): void => {
    setDraft({
      name: rotatedName(key.name, Date.now()),
      scopes: key.scopes,
      allowlist: (key.allowed_cidrs ?? []).join('\n'),
      actors: (key.allowed_actors ?? []).join('\n'),
      replaces: key.name,
      withheld: key.scopes.filter((scope) => !session.permissions.includes(scope)),
    });
    focusForm.current = true;
    setFormRound((round) => round + 1);
  };

  const onRevoked = (key: ApiKeyRecord): void => {
    setKeys((previous) => previous?.map((each) => (each.id === key.id ? key : each)) ?? previous);
    setOutcome(`Key “${key.name}” is revoked: every request with it is refused from now on.`);
    void refresh();
  };

  const nowMs = Date.now();
  const sorted = [...(keys ?? [])].sort(newestFirst);
  const active = sorted.filter((key) => keyStatus(key, nowMs) === 'active');
  const inactive = sorted.filter((key) => keyStatus(key, nowMs) !== 'active');
  // The list names every key of the organization: the cards show these names, nothing is asked.
  rememberIdentities((keys ?? []).map((key) => ({ identity: `api_key:${key.id}`, name: key.name, prefix: key.prefix, owner: key.owner, revoked: key.revoked_at !== null })));
  const card = (key: ApiKeyRecord) => (
    <li key={key.id}>
      <KeyCard apiKey={key} session={session} nowMs={nowMs} onRotate={onRotate} onRevoked={onRevoked} />
    </li>
  );

  return (
    <>
      {heading}
      <p>
        Keys let services and agents of {session.organization.name} call the API. Each holds the scopes it was created with, may be limited to
        some addresses and to the actors it may speak for, and may expire.
      </p>
      {created !== null && <KeySecretPanel created={created.key} replaces={created.replaces} onDone={() => setCreated(null)} />}
      {outcome !== null && (
        <p class="outcome" tabIndex={-1} ref={outcomeLine} data-testid="keys-outcome">
          {outcome}
        </p>
      )}
      <section aria-labelledby="active-keys-heading">
        <h2 id="active-keys-heading" tabIndex={-1} ref={listHeading}>
          Active keys{keys !== null && ` (${active.length})`}
        </h2>
        <div class="key-list-status">
          {loadedAt !== null && (
            <p class="muted" data-testid="keys-updated-at">
              Listed at {formatClock(loadedAt)}. “Last used” is updated about once a minute.
            </p>
          )}
          <button type="button" class="button secondary" onClick={() => void refresh()} data-testid="refresh-keys">
            Refresh the list
          </button>
        </div>
        {problem !== null && (
          <div role="alert" class="alert" data-testid="keys-error">
            <p>{keys === null ? problem : `The list could not be refreshed: ${problem}`}</p>
          </div>
        )}
        {keys === null && problem === null && <p role="status">Loading…</p>}
        {keys !== null && active.length === 0 && <p data-testid="keys-empty">There is no active key.</p>}
        {active.length > 0 && (
          <ul class="items" data-testid="active-keys">
            {active.map(card)}
          </ul>
        )}
      </section>
      {inactive.length > 0 && (
        <section aria-labelledby="inactive-keys-heading">
          <h2 id="inactive-keys-heading">Revoked and expired keys ({inactive.length})</h2>
          <p class="muted">These are refused on every request and stay listed for the record.</p>
          <ul class="items" data-testid="inactive-keys">
            {inactive.map(card)}
          </ul>
        </section>
      )}
      <section class="panel" aria-labelledby="create-key-heading">
        <h2 id="create-key-heading" tabIndex={-1} ref={formHeading}>
          Create a key
        </h2>
        <p class="notice" data-testid="narrowing-note">
          A new key can be no wider than you, its creator: it can hold only scopes you hold
          {session.method === 'api_key'
            ? ', and, since you are signed in with an API key, only addresses within that key’s allowlist, only actors it may speak for, and no expiry later than its own (it inherits them when you leave them empty)'
            : ''}
          . The server refuses anything wider.
        </p>
        <KeyCreateForm key={formRound} session={session} draft={draft} onCreated={onCreated} />
      </section>
      <section aria-labelledby="rotation-heading">
        <h2 id="rotation-heading">Rotating a key</h2>
        <p>A key’s secret cannot be shown again or changed. To replace a key (its secret was lost or exposed, or it is simply time), rotate it:</p>
        <ol class="rotation-steps" data-testid="rotation-steps">
          <li>
            <strong>Create a new key with the same scopes as the old one.</strong> “Rotate” on a key fills in the form with its scopes, allowlist and allowed actors.
          </li>
          <li>
            <strong>Deploy the new key to the consuming service</strong>, in place of the old one.
          </li>
          <li>
            <strong>Revoke the old key once the new one works.</strong> You can tell: the new key’s “Last used” moves, and the old key’s “Last used”
            stops moving.
          </li>
        </ol>
        <p class="muted">A lost key cannot be recovered: only the hash of its secret is stored. Rotation is how it is replaced.</p>
      </section>
    </>
  );
}
