/**
 * The organization's webhook subscriptions (action list), each with its name, URL, events,
 * whether it is enabled, when it was created, and its deliveries. Every webhook action needs
 * webhooks:write (the only webhooks scope); without it the section says so and calls nothing.
 * Subscriptions are created, changed and deleted with the API (docs/webhooks.md), not here.
 */
import { useEffect, useState } from 'preact/hooks';
import { isAbort, type SignedInSession } from '../api';
import { formatDateTime } from '../format';
import { listSubscriptions, type WebhookSubscriptionWire } from '../webhooks-api';
import { messageOf, MissingPermission, Row } from './parts';
import { WebhookDeliveries } from './webhooks-deliveries';

type Load = { state: 'loading' } | { state: 'failed'; message: string } | { state: 'ready'; subscriptions: WebhookSubscriptionWire[] };

function WebhookCard({ subscription }: { subscription: WebhookSubscriptionWire }) {
  const titleId = `webhook-${subscription.id}-title`;
  return (
    <article class="item" aria-labelledby={titleId} data-testid="webhook-row" data-id={subscription.id} data-enabled={String(subscription.is_active)}>
      <h3 id={titleId} data-testid="webhook-name">
        {subscription.name}
      </h3>
      <p class="status-line">
        <span class={`badge ${subscription.is_active ? 'badge-enabled' : 'badge-disabled'}`} data-testid="webhook-enabled">
          {subscription.is_active ? 'Enabled' : 'Disabled: nothing is sent'}
        </span>
      </p>
      <dl class="facts">
        <Row label="URL">
          <code data-testid="webhook-url">{subscription.url}</code>
        </Row>
        <Row label="Events">
          {subscription.event_types === null ? (
            'Every event'
          ) : (
            <ul class="codes">
              {subscription.event_types.map((type) => (
                <li key={type}>
                  <code>{type}</code>
                </li>
              ))}
            </ul>
          )}
        </Row>
        <Row label="Retries">
          Up to {subscription.max_attempts} {subscription.max_attempts === 1 ? 'attempt' : 'attempts'}, {subscription.timeout_seconds} s each
        </Row>
        <Row label="Created">
          <time dateTime={subscription.created_at}>{formatDateTime(subscription.created_at)}</time>
        </Row>
      </dl>
      <WebhookDeliveries subscriptionId={subscription.id} headingId={`webhook-${subscription.id}-deliveries`} />
    </article>
  );
}

export function WebhooksSection({ session }: { session: SignedInSession }) {
  const allowed = session.permissions.includes('webhooks:write');
  const [load, setLoad] = useState<Load>({ state: 'loading' });

  const refresh = async (signal?: AbortSignal): Promise<void> => {
    setLoad({ state: 'loading' });
    try {
      const subscriptions = await listSubscriptions(signal);
      if (!signal?.aborted) setLoad({ state: 'ready', subscriptions });
    } catch (error) {
      if (isAbort(error) || signal?.aborted) return;
      setLoad({ state: 'failed', message: messageOf(error) });
    }
  };

  useEffect(() => {
    if (!allowed) return;
    const controller = new AbortController();
    void refresh(controller.signal);
    return () => controller.abort();
  }, [allowed]);

  return (
    <section aria-labelledby="webhooks-heading" data-testid="webhooks-section">
      <h2 id="webhooks-heading">Webhooks</h2>
      {!allowed && <MissingPermission what="Seeing webhook subscriptions and their deliveries" needs={<code>webhooks:write</code>} testId="webhooks-permission" />}
      {allowed && load.state === 'loading' && <p role="status">Loading the webhook subscriptions…</p>}
      {allowed && load.state === 'failed' && (
        <div role="alert" class="alert">
          <p data-testid="webhooks-error">The webhook subscriptions could not be loaded: {load.message}</p>
          <button type="button" class="button secondary" onClick={() => void refresh()}>
            Try again
          </button>
        </div>
      )}
      {allowed && load.state === 'ready' && load.subscriptions.length === 0 && (
        <p data-testid="webhooks-empty">
          This organization has no webhook subscriptions. Create one with <code>POST /v1/webhooks</code> (action <code>create</code>).
        </p>
      )}
      {allowed && load.state === 'ready' && load.subscriptions.length > 0 && (
        <ul class="items">
          {load.subscriptions.map((subscription) => (
            <li key={subscription.id}>
              <WebhookCard subscription={subscription} />
            </li>
          ))}
        </ul>
      )}
    </section>
  );
}
