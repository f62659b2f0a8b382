/**
 * A permit's story and the audit chain's status.
 */
import type { SignedInSession } from '../api';
import { usePageTitle } from '../page-title';

export function PermitsPage({ session }: { session: SignedInSession }) {
  usePageTitle('Permits and audit');
  return (
    <>
      <h1 id="page-title" tabIndex={-1}>
        Permits and audit
      </h1>
      <p>This page is not built yet for {session.organization.name}.</p>
    </>
  );
}
