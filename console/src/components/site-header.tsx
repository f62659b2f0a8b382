/**
 * The banner on every page: the product, and once signed in, the organization, who is signed in
 * (saying plainly when it is through an API key, a development-only way in), Sign out, and the
 * navigation. It stays small (styles.css): the product and Sign out share a row, who is signed in
 * takes the next, and on a phone the navigation is one row that scrolls sideways, the current
 * page's link kept in view.
 */
import { useEffect, useRef } from 'preact/hooks';
import type { Session } from '../api';
import { Link, NAVIGATION, PATHS, type RouteName } from '../router';

interface Props {
  session: Session | null;
  /** The page being shown, marked in the navigation. */
  route: RouteName;
  onSignOut: () => void;
  signingOut: boolean;
  signOutError: string | null;
}

export function SiteHeader({ session, route, onSignOut, signingOut, signOutError }: Props) {
  const signedIn = session?.signed_in === true ? session : null;
  const nav = useRef<HTMLElement>(null);
  useEffect(() => {
    // Only the row scrolls (block: nearest): the page stays where it is.
    nav.current?.querySelector('[aria-current="page"]')?.scrollIntoView({ block: 'nearest', inline: 'nearest' });
  }, [route, signedIn !== null]);
  return (
    <header class="site-header">
      <div class="wrap header-row">
        <p class="brand">
          <Link href={PATHS.inbox}>Countersign</Link>
        </p>
        {signedIn && (
          <>
            <div class="who" data-testid="signed-in-as">
              <p>
                <span class="label">Organization</span> <strong>{signedIn.organization.name}</strong>
              </p>
              <p>
                <span class="label">Signed in as</span> <strong>{signedIn.display_name}</strong>
                {signedIn.role !== null && <span>, role: {signedIn.role}</span>}
              </p>
              {signedIn.method === 'api_key' && (
                <p class="dev-note" data-testid="api-key-session">
                  Signed in with an API key (development)
                </p>
              )}
            </div>
            <div class="sign-out">
              <button type="button" class="button secondary" onClick={onSignOut} disabled={signingOut} data-testid="sign-out">
                {signingOut ? 'Signing out…' : 'Sign out'}
              </button>
              {signOutError !== null && (
                <p role="alert" class="error">
                  {signOutError}
                </p>
              )}
            </div>
          </>
        )}
      </div>
      {signedIn && (
        <nav class="wrap site-nav" aria-label="Console" ref={nav}>
          <ul>
            {NAVIGATION.map((page) => (
              <li key={page.route}>
                <Link href={PATHS[page.route as keyof typeof PATHS]} current={page.route === route}>
                  {page.label}
                </Link>
              </li>
            ))}
          </ul>
        </nav>
      )}
    </header>
  );
}
