/**
 * One subscription's deliveries, newest first (list_deliveries), all of them or only the dead
 * letters: each with its status in words, event type, attempts, the receiver's answer once
 * delivered or the last error while it is not (a success is never shown as an error), the next
 * attempt, and every attempt on request. A dead letter has "Replay" (action replay): the delivery goes back to
 * pending, due now; the page says what the API answered and loads the list again.
 */
import { useEffect, useRef, useState } from 'preact/hooks';
import { isAbort } from '../api';
import { formatDateTime } from '../format';
import { listDeliveries, replayDelivery, type DeliveryStatus, type WebhookDeliveryWire } from '../webhooks-api';
import { messageOf, Row } from './parts';

type Filter = 'all' | 'dead_lettered';

const STATUS_LABELS: Record<DeliveryStatus, string> = {
  pending: 'Pending',
  delivered: 'Delivered',
  failed: 'Failed; will be retried',
  dead_lettered: 'Dead letter; no more retries',
};

export function deliveryStatusLabel(status: string): string {
  return STATUS_LABELS[status as DeliveryStatus] ?? status;
}

type Load = { state: 'loading' } | { state: 'failed'; message: string } | { state: 'ready'; deliveries: WebhookDeliveryWire[]; nextCursor: string | null };

function nextAttempt(delivery: WebhookDeliveryWire) {
  if (delivery.next_attempt_at !== null && (delivery.status === 'pending' || delivery.status === 'failed')) {
    return <time dateTime={delivery.next_attempt_at}>{formatDateTime(delivery.next_attempt_at)}</time>;
  }
  if (delivery.status === 'delivered') return 'none: delivered';
  if (delivery.status === 'dead_lettered') return 'none until it is replayed';
  return 'not scheduled';
}

/**
 * What went wrong with the last attempt, or null when nothing did: a delivered delivery's last
 * answer was a success, and one not yet attempted has no error.
 */
function lastError(delivery: WebhookDeliveryWire): string | null {
  if (delivery.status === 'delivered') return null;
  if (delivery.last_error !== null) return delivery.last_error;
  return delivery.last_status_code === null ? null : `the receiver answered ${delivery.last_status_code}`;
}

function DeliveryRow({ delivery, replaying, onReplay }: { delivery: WebhookDeliveryWire; replaying: boolean; onReplay: () => void }) {
  const error = lastError(delivery);
  return (
    <li class="delivery" data-testid="delivery-row" data-id={delivery.id} data-status={delivery.status}>
      <p class="status-line">
        <span class={`badge badge-delivery-${delivery.status}`} data-testid="delivery-status">
          {deliveryStatusLabel(delivery.status)}
        </span>{' '}
        <code data-testid="delivery-event">{delivery.event_type}</code>
      </p>
      <dl class="facts">
        <Row label="Attempts">{delivery.attempts}</Row>
        {delivery.status === 'delivered' && delivery.last_status_code !== null && (
          <Row label="Receiver answered">
            <span data-testid="delivery-answer">{delivery.last_status_code}: delivered</span>
          </Row>
        )}
        {error !== null && (
          <Row label="Last error">
            <span data-testid="delivery-error">{error}</span>
          </Row>
        )}
        <Row label="Next attempt">{nextAttempt(delivery)}</Row>
        {delivery.dead_lettered_at !== null && (
          <Row label="Dead-lettered">
            <time dateTime={delivery.dead_lettered_at}>{formatDateTime(delivery.dead_lettered_at)}</time>
          </Row>
        )}
        {delivery.delivered_at !== null && (
          <Row label="Delivered">
            <time dateTime={delivery.delivered_at}>{formatDateTime(delivery.delivered_at)}</time>
          </Row>
        )}
        <Row label="Created">
          <time dateTime={delivery.created_at}>{formatDateTime(delivery.created_at)}</time>
        </Row>
        <Row label="Delivery id">
          <code>{delivery.id}</code>
        </Row>
      </dl>
      {delivery.history.length > 0 && (
        <details class="attempts">
          <summary>Every attempt ({delivery.history.length})</summary>
          <ol>
            {delivery.history.map((attempt) => (
              <li key={attempt.attempt}>
                Attempt {attempt.attempt}: {attempt.outcome.replace('_', ' ')}
                {attempt.status_code !== null && `, status ${attempt.status_code}`}
                {attempt.duration_ms !== null && `, ${attempt.duration_ms} ms`}, started <time dateTime={attempt.started_at}>{formatDateTime(attempt.started_at)}</time>
                {attempt.error !== null && <span class="attempt-error">{attempt.error}</span>}
              </li>
            ))}
          </ol>
        </details>
      )}
      {delivery.status === 'dead_lettered' && (
        <div class="actions">
          <button type="button" class="button secondary" disabled={replaying} onClick={onReplay} data-testid="replay">
            {replaying ? 'Replaying…' : 'Replay'}
            <span class="visually-hidden">
              {' '}
              the {delivery.event_type} delivery of {formatDateTime(delivery.created_at)}
            </span>
          </button>
        </div>
      )}
    </li>
  );
}

export function WebhookDeliveries({ subscriptionId, headingId }: { subscriptionId: string; headingId: string }) {
  const [filter, setFilter] = useState<Filter>('all');
  const [load, setLoad] = useState<Load>({ state: 'loading' });
  const [moreLoading, setMoreLoading] = useState(false);
  const [replaying, setReplaying] = useState<string | null>(null);
  const [outcome, setOutcome] = useState<string | null>(null);
  const [problem, setProblem] = useState<string | null>(null);
  const running = useRef<AbortController | null>(null);
  const filterId = `delivery-filter-${subscriptionId}`;

  const refresh = async (shown: Filter = filter): Promise<void> => {
    running.current?.abort();
    const mine = new AbortController();
    running.current = mine;
    try {
      const page = await listDeliveries(subscriptionId, { status: shown === 'all' ? undefined : shown, signal: mine.signal });
      if (!mine.signal.aborted) setLoad({ state: 'ready', ...page });
    } catch (error) {
      if (isAbort(error) || mine.signal.aborted) return;
      setLoad({ state: 'failed', message: messageOf(error) });
    } finally {
      if (running.current === mine) running.current = null;
    }
  };

  useEffect(() => {
    void refresh();
    return () => running.current?.abort();
  }, [subscriptionId]);

  const choose = (next: Filter): void => {
    setFilter(next);
    setLoad({ state: 'loading' });
    void refresh(next);
  };

  const more = async (): Promise<void> => {
    if (load.state !== 'ready' || load.nextCursor === null) return;
    setMoreLoading(true);
    setProblem(null);
    try {
      const page = await listDeliveries(subscriptionId, { status: filter === 'all' ? undefined : filter, cursor: load.nextCursor });
      setLoad({ state: 'ready', deliveries: [...load.deliveries, ...page.deliveries], nextCursor: page.nextCursor });
    } catch (error) {
      setProblem(messageOf(error));
    } finally {
      setMoreLoading(false);
    }
  };

  const replay = async (delivery: WebhookDeliveryWire): Promise<void> => {
    setReplaying(delivery.id);
    setProblem(null);
    setOutcome(null);
    try {
      const replayed = await replayDelivery(delivery.id);
      const due = replayed.next_attempt_at === null ? '' : `, next attempt ${formatDateTime(replayed.next_attempt_at)}`;
      setOutcome(`Replayed the ${replayed.event_type} delivery: it is now ${deliveryStatusLabel(replayed.status).toLowerCase()}${due}.`);
    } catch (error) {
      setProblem(`The delivery was not replayed: ${messageOf(error)}`);
    } finally {
      setReplaying(null);
      await refresh();
    }
  };

  const deliveries = load.state === 'ready' ? load.deliveries : [];
  return (
    <>
      <h4 id={headingId}>Deliveries</h4>
      <div class="delivery-controls">
        <div>
          <label for={filterId}>Show</label>
          <select id={filterId} value={filter} onChange={(event) => choose(event.currentTarget.value === 'dead_lettered' ? 'dead_lettered' : 'all')} data-testid="delivery-filter">
            <option value="all">All deliveries</option>
            <option value="dead_lettered">Dead letters only</option>
          </select>
        </div>
        <button type="button" class="button secondary" onClick={() => void refresh()} data-testid="deliveries-refresh">
          Refresh
        </button>
      </div>
      <div role="status">
        {outcome !== null && (
          <p class="outcome" data-testid="replay-outcome">
            {outcome}
          </p>
        )}
        {load.state === 'loading' && <p>Loading the deliveries…</p>}
      </div>
      {problem !== null && (
        <p role="alert" class="error" data-testid="webhook-error">
          {problem}
        </p>
      )}
      {load.state === 'failed' && (
        <div role="alert" class="alert">
          <p data-testid="webhook-error">The deliveries could not be loaded: {load.message}</p>
          <button type="button" class="button secondary" onClick={() => void refresh()}>
            Try again
          </button>
        </div>
      )}
      {load.state === 'ready' && deliveries.length === 0 && (
        <p data-testid="deliveries-empty">{filter === 'all' ? 'No deliveries yet.' : 'No dead letters.'}</p>
      )}
      {deliveries.length > 0 && (
        <ul class="deliveries" aria-labelledby={headingId}>
          {deliveries.map((delivery) => (
            <DeliveryRow key={delivery.id} delivery={delivery} replaying={replaying === delivery.id} onReplay={() => void replay(delivery)} />
          ))}
        </ul>
      )}
      {load.state === 'ready' && load.nextCursor !== null && (
        <div class="actions">
          <button type="button" class="button secondary" disabled={moreLoading} onClick={() => void more()} data-testid="deliveries-more">
            {moreLoading ? 'Loading…' : 'Show older deliveries'}
          </button>
        </div>
      )}
    </>
  );
}
