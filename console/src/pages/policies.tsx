/**
 * Policies and webhooks: the current policy, its versions, a draft to validate and a line diff;
 * the webhook subscriptions and their deliveries, with replay of a dead letter. Each section
 * needs its own permission (policy:read or policy:write; webhooks:write) and says so when the
 * session lacks it. Every call goes through the public API with the session (see
 * policies-api.ts and webhooks-api.ts).
 */
import type { SignedInSession } from '../api';
import { PolicySection } from '../components/policies-section';
import { WebhooksSection } from '../components/webhooks-section';
import { usePageTitle } from '../page-title';
import '../policies.css';

export function PoliciesPage({ session }: { session: SignedInSession }) {
  usePageTitle('Policies and webhooks');
  return (
    <div class="policies-page">
      <h1 id="page-title" tabIndex={-1}>
        Policies and webhooks
      </h1>
      <p>
        The policy that decides for {session.organization.name}, and the webhooks that tell other systems what was recorded.
      </p>
      <PolicySection session={session} />
      <WebhooksSection session={session} />
    </div>
  );
}
