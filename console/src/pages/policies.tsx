/**
 * The policy and its versions; webhook subscriptions and deliveries.
 */
import type { SignedInSession } from '../api';
import { usePageTitle } from '../page-title';

export function PoliciesPage({ session }: { session: SignedInSession }) {
  usePageTitle('Policies and webhooks');
  return (
    <>
      <h1 id="page-title" tabIndex={-1}>
        Policies and webhooks
      </h1>
      <p>This page is not built yet for {session.organization.name}.</p>
    </>
  );
}
