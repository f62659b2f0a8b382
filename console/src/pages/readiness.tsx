/**
 * Per proxy route: would-block counts in shadow mode, and whether it is ready for enforce.
 */
import type { SignedInSession } from '../api';
import { usePageTitle } from '../page-title';

export function ReadinessPage({ session }: { session: SignedInSession }) {
  usePageTitle('Shadow readiness');
  return (
    <>
      <h1 id="page-title" tabIndex={-1}>
        Shadow readiness
      </h1>
      <p>This page is not built yet for {session.organization.name}.</p>
    </>
  );
}
