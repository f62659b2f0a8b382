/**
 * A new key's secret, shown once. It lives only in the page's state, passed in here: never in
 * storage, the URL or the history, so a reload, another page or "Done" takes it away for good
 * (the server keeps only its hash). While it is shown, leaving the page asks first.
 */
import { useEffect, useRef, useState } from 'preact/hooks';
import type { CreatedKey } from '../keys-api';

interface Props {
  created: CreatedKey;
  /** The key this one replaces, when it was created to rotate it. */
  replaces: string | null;
  onDone: () => void;
}

type Copy = { state: 'idle' } | { state: 'copied' } | { state: 'failed' };

export function KeySecretPanel({ created, replaces, onDone }: Props) {
  const [copy, setCopy] = useState<Copy>({ state: 'idle' });
  const heading = useRef<HTMLHeadingElement>(null);
  const value = useRef<HTMLElement>(null);
  const { api_key: key, secret } = created;

  useEffect(() => {
    heading.current?.focus();
    // A reload or closing the tab would lose the secret: the browser asks first.
    const warn = (event: BeforeUnloadEvent): void => {
      event.preventDefault();
      event.returnValue = '';
    };
    addEventListener('beforeunload', warn);
    return () => removeEventListener('beforeunload', warn);
  }, []);

  const selectSecret = (): void => {
    const element = value.current;
    const selection = window.getSelection();
    if (!element || !selection) return;
    selection.selectAllChildren(element);
  };

  const copySecret = async (): Promise<void> => {
    try {
      if (!navigator.clipboard) throw new Error('no clipboard');
      await navigator.clipboard.writeText(secret);
      setCopy({ state: 'copied' });
    } catch {
      selectSecret();
      setCopy({ state: 'failed' });
    }
  };

  return (
    <section class="panel key-secret" aria-labelledby="new-key-heading" data-testid="new-key">
      <h2 id="new-key-heading" tabIndex={-1} ref={heading}>
        The secret of “{key.name}”
      </h2>
      <p class="key-warning" data-testid="new-key-warning">
        <strong>Copy it now: it will not be shown again.</strong> Countersign keeps only a hash of it, so nobody can show it to you later.
        Once you leave or reload this page it is gone, and a lost secret can only be replaced by a new key.
      </p>
      <div class="secret-box">
        <code class="secret-value" ref={value} data-testid="new-key-secret">
          {secret}
        </code>
      </div>
      <div class="actions">
        <button type="button" class="button primary" onClick={() => void copySecret()} data-testid="copy-secret">
          Copy
        </button>
        <button type="button" class="button secondary" onClick={onDone} data-testid="secret-done">
          Done, I have stored it
        </button>
      </div>
      <p role="status" class={copy.state === 'failed' ? 'error' : 'muted'} data-testid="copy-status">
        {copy.state === 'copied' && 'Copied to the clipboard. Store it where the service that uses it reads its secrets.'}
        {copy.state === 'failed' &&
          'The browser did not let the console copy it. The secret is selected: copy it yourself (Ctrl+C, or ⌘C on a Mac, or your device’s copy command).'}
      </p>
      {replaces !== null && (
        <p class="notice" data-testid="rotation-next">
          Next, to finish rotating “{replaces}”: deploy this key to the service that uses the old one. Once the new key works (the old key’s
          “Last used” stops moving), revoke “{replaces}” in the list below.
        </p>
      )}
      <p class="muted">
        Recognize it in the list by its prefix <code>{key.prefix}</code>.
      </p>
    </section>
  );
}
