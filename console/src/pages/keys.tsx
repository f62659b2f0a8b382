/**
 * API keys: list, create, revoke, rotate.
 */
import type { SignedInSession } from '../api';
import { usePageTitle } from '../page-title';

export function KeysPage({ session }: { session: SignedInSession }) {
  usePageTitle('API keys');
  return (
    <>
      <h1 id="page-title" tabIndex={-1}>
        API keys
      </h1>
      <p>This page is not built yet for {session.organization.name}.</p>
    </>
  );
}
