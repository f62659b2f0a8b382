/**
 * Sign-in. OpenID Connect is the server's to run (the link starts its code flow); the API-key
 * form exists only where the server offers it, for the embedded development setup, and says so,
 * because a key signs in with the key's scopes rather than a person's role.
 */
import { useState } from 'preact/hooks';
import { ApiError, signInWithApiKey, type SignedInSession, type SignedOutSession } from '../api';
import { usePageTitle } from '../page-title';

interface Props {
  methods: SignedOutSession['sign_in'];
  /** Why the person is here again (session ended, signed out), if there is something to say. */
  notice: string | null;
  onSignedIn: (session: SignedInSession) => void;
}

function ApiKeyForm({ onSignedIn }: Pick<Props, 'onSignedIn'>) {
  const [key, setKey] = useState('');
  const [sending, setSending] = useState(false);
  const [problem, setProblem] = useState<string | null>(null);

  const submit = async (event: Event): Promise<void> => {
    event.preventDefault();
    const apiKey = key.trim();
    if (apiKey === '') {
      setProblem('Enter an API key.');
      return;
    }
    setSending(true);
    setProblem(null);
    try {
      const session = await signInWithApiKey(apiKey);
      setKey('');
      onSignedIn(session);
    } catch (error) {
      setProblem(error instanceof ApiError ? error.message : 'Signing in failed. Try again.');
      setSending(false);
    }
  };

  return (
    <section class="panel dev" aria-labelledby="api-key-heading">
      <h2 id="api-key-heading">Development sign-in with an API key</h2>
      <p>
        This way in exists for the embedded development setup. You act as the key: its scopes are
        what you may do here, and separation of duties is judged by the key's owner.
      </p>
      <form onSubmit={(event) => void submit(event)} noValidate>
        <label for="api-key">API key</label>
        <input
          id="api-key"
          name="api_key"
          type="password"
          autocomplete="off"
          autocapitalize="off"
          spellcheck={false}
          required
          aria-describedby="api-key-hint"
          value={key}
          onInput={(event) => setKey(event.currentTarget.value)}
          data-testid="api-key-input"
        />
        <p id="api-key-hint" class="hint">
          For example the key written to .countersign/bootstrap.json on first start.
        </p>
        <button type="submit" class="button primary" disabled={sending} data-testid="sign-in-api-key">
          {sending ? 'Signing in…' : 'Sign in with the API key'}
        </button>
        {problem !== null && (
          <p role="alert" class="error" data-testid="sign-in-error">
            {problem}
          </p>
        )}
      </form>
    </section>
  );
}

export function SignInPage({ methods, notice, onSignedIn }: Props) {
  usePageTitle('Sign in');
  return (
    <>
      <h1 id="page-title" tabIndex={-1}>
        Sign in
      </h1>
      {notice !== null && (
        <p role="status" class="notice" data-testid="sign-in-notice">
          {notice}
        </p>
      )}
      <p>Sign in to review and decide the approval requests and escalations of your organization.</p>
      {methods.oidc && (
        <p>
          <a class="button primary" href="/console/sign-in/oidc" data-testid="sign-in-oidc">
            Sign in with your identity provider
          </a>
        </p>
      )}
      {methods.api_key && <ApiKeyForm onSignedIn={onSignedIn} />}
      {!methods.oidc && !methods.api_key && (
        <p class="notice" data-testid="no-sign-in">
          No way to sign in is enabled on this server. An administrator can configure OpenID Connect
          for the console.
        </p>
      )}
    </>
  );
}
