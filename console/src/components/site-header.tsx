/**
 * The banner on every page: the product, and once signed in, the organization, who is signed in
 * (saying plainly when it is through an API key, a development-only way in) and Sign out.
 */
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
  return (
    <header class="site-header">
      <div class="wrap header-row">
        <p class="brand">
          <Link href={PATHS.inbox}>Countersign</Link>
        </p>
        {signedIn && (
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
            <button type="button" class="button secondary" onClick={onSignOut} disabled={signingOut} data-testid="sign-out">
              {signingOut ? 'Signing out…' : 'Sign out'}
            </button>
            {signOutError !== null && (
              <p role="alert" class="error">
                {signOutError}
              </p>
            )}
          </div>
        )}
      </div>
      {signedIn && (
        <nav class="wrap site-nav" aria-label="Console">
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
