/**
 * The console's shell: it asks the server who is signed in, shows the page the path names, and
 * keeps the two consistent. Signed out, every page but "not found" is the sign-in page; signed
 * in, the sign-in page gives way to the inbox. A 401 from any call ends the session here too.
 */
import { useEffect, useRef, useState } from 'preact/hooks';
import { ApiError, getSession, onUnauthorized, setCsrfToken, signOut, type Session, type SignedInSession } from './api';
import { SiteHeader } from './components/site-header';
import { InboxPage } from './pages/inbox';
import { KeysPage } from './pages/keys';
import { PermitsPage } from './pages/permits';
import { PoliciesPage } from './pages/policies';
import { ReadinessPage } from './pages/readiness';
import { NotFoundPage } from './pages/not-found';
import { SignInPage } from './pages/sign-in';
import { navigate, PATHS, useRoute } from './router';

type Load = { state: 'loading' } | { state: 'failed'; message: string } | { state: 'ready'; session: Session };

/** Why a sign-in with the identity provider came back unfinished (`?error=` from authority/console/routes.ts). */
const SIGN_IN_ERRORS: Readonly<Record<string, string>> = {
  identity_provider_unavailable: 'The identity provider could not be reached. Try again in a moment.',
  identity_provider_refused: 'The identity provider did not sign you in.',
  sign_in_expired: 'The sign-in took too long or was started in another browser. Try again.',
  sign_in_failed: 'The sign-in could not be completed. Try again.',
  token_incomplete: 'Your identity provider did not say which organization you belong to, or it is not known here. Ask an administrator.',
};

function signInErrorOf(search: string): string | null {
  const code = new URLSearchParams(search).get('error');
  return code === null ? null : (SIGN_IN_ERRORS[code] ?? SIGN_IN_ERRORS.sign_in_failed ?? null);
}

function messageOf(error: unknown): string {
  return error instanceof ApiError ? error.message : 'The console could not start. Reload the page to try again.';
}

export function App() {
  const route = useRoute();
  const [load, setLoad] = useState<Load>({ state: 'loading' });
  const [notice, setNotice] = useState<string | null>(() => signInErrorOf(window.location.search));
  const [signingOut, setSigningOut] = useState(false);
  const [signOutError, setSignOutError] = useState<string | null>(null);
  const returnTo = useRef<string | null>(null);

  const adopt = (session: Session): void => {
    setCsrfToken(session.signed_in ? session.csrf_token : null);
    setLoad({ state: 'ready', session });
  };

  const reload = async (): Promise<void> => {
    try {
      adopt(await getSession());
    } catch (error) {
      setCsrfToken(null);
      setLoad({ state: 'failed', message: messageOf(error) });
    }
  };

  useEffect(() => {
    onUnauthorized(() => {
      setCsrfToken(null);
      setNotice('Your session has ended. Sign in again to continue.');
      // Not "ready" until the server says who is signed in, so no page bounces back to the inbox.
      setLoad({ state: 'loading' });
      void reload();
    });
    void reload();
  }, []);

  const session = load.state === 'ready' ? load.session : null;
  useEffect(() => {
    if (session === null) return;
    if (!session.signed_in && route !== 'sign-in' && route !== 'not-found') {
      // Back to this page after signing in with an API key; the identity provider lands on the inbox.
      returnTo.current = location.pathname + location.search;
      navigate(PATHS['sign-in'], { replace: true });
    }
    if (session.signed_in && route === 'sign-in') navigate(returnTo.current ?? PATHS.inbox, { replace: true });
  }, [session, route]);

  // A new page moves focus to its heading, so a screen reader announces where the person landed.
  // The first page after start-up keeps the browser's own focus, as any freshly loaded page does.
  const shown: string = load.state !== 'ready' ? load.state : route === 'not-found' ? route : load.session.signed_in ? route : 'sign-in';
  const lastPage = useRef<string | null>(null);
  useEffect(() => {
    if (shown === 'loading') return;
    if (lastPage.current !== null && lastPage.current !== shown) document.getElementById('page-title')?.focus();
    lastPage.current = shown;
  }, [shown]);

  const signedIn = (next: SignedInSession): void => {
    setNotice(null);
    adopt(next);
    navigate(returnTo.current ?? PATHS.inbox, { replace: true });
  };

  const signOutNow = async (): Promise<void> => {
    setSigningOut(true);
    setSignOutError(null);
    try {
      await signOut();
    } catch (error) {
      // 401: the session was gone already, which is what signing out wanted.
      if (!(error instanceof ApiError && error.status === 401)) {
        setSignOutError(messageOf(error));
        setSigningOut(false);
        return;
      }
    }
    setCsrfToken(null);
    setNotice('You have signed out.');
    setSigningOut(false);
    // The signed-out session takes the person to sign-in (see the effect above).
    await reload();
  };

  let page;
  if (load.state === 'loading') {
    page = <p role="status">Loading…</p>;
  } else if (load.state === 'failed') {
    page = (
      <>
        <h1 id="page-title" tabIndex={-1}>
          The console cannot reach the server
        </h1>
        <p role="alert">{load.message}</p>
        <button type="button" class="button secondary" onClick={() => void reload()}>
          Try again
        </button>
      </>
    );
  } else if (route === 'not-found') {
    page = <NotFoundPage />;
  } else if (!load.session.signed_in) {
    page = <SignInPage methods={load.session.sign_in} notice={notice} onSignedIn={signedIn} />;
  } else {
    const pages = { inbox: InboxPage, permits: PermitsPage, readiness: ReadinessPage, keys: KeysPage, policies: PoliciesPage, 'sign-in': InboxPage };
    const Page = pages[route];
    page = <Page session={load.session} />;
  }

  return (
    <>
      <a class="skip-link" href="#main">
        Skip to main content
      </a>
      <SiteHeader session={session} route={route} onSignOut={() => void signOutNow()} signingOut={signingOut} signOutError={signOutError} />
      <main id="main" class="wrap" tabIndex={-1}>
        {page}
      </main>
    </>
  );
}
