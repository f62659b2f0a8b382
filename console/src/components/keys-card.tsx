/**
 * One API key: what it may do, from where and for which actors, who made it and for whom it
 * acts, when it was last used, and its status in words. An active key offers "Rotate" (a new key like it) and
 * "Revoke", which asks first, inline; a refusal shows the server's message (a narrower
 * credential cannot revoke a wider key).
 */
import { useEffect, useRef, useState } from 'preact/hooks';
import { ApiError, type SignedInSession } from '../api';
import { formatDateTime } from '../format';
import { keyStatus, revokeKey, STATUS_LABELS, type ApiKeyRecord } from '../keys-api';
import { Identity } from './identity';
import { Row } from './parts';

interface Props {
  apiKey: ApiKeyRecord;
  session: SignedInSession;
  nowMs: number;
  onRotate: (key: ApiKeyRecord) => void;
  onRevoked: (key: ApiKeyRecord) => void;
}

function When({ iso, none }: { iso: string | null; none: string }) {
  return iso === null ? <>{none}</> : <time dateTime={iso}>{formatDateTime(iso)}</time>;
}

export function KeyCard({ apiKey: key, session, nowMs, onRotate, onRevoked }: Props) {
  const status = keyStatus(key, nowMs);
  const [confirming, setConfirming] = useState(false);
  const [revoking, setRevoking] = useState(false);
  const [problem, setProblem] = useState<string | null>(null);
  const cancelButton = useRef<HTMLButtonElement>(null);
  const revokeButton = useRef<HTMLButtonElement>(null);
  const wasConfirming = useRef(false);
  const titleId = `key-${key.id}-title`;
  const questionId = `key-${key.id}-question`;

  // Focus follows the question: onto it when asked, back to "Revoke" when cancelled.
  useEffect(() => {
    if (confirming) cancelButton.current?.focus();
    else if (wasConfirming.current) revokeButton.current?.focus();
    wasConfirming.current = confirming;
  }, [confirming]);

  const revoke = async (): Promise<void> => {
    setRevoking(true);
    setProblem(null);
    try {
      onRevoked(await revokeKey(key.id));
    } catch (error) {
      setProblem(error instanceof ApiError ? error.message : 'The key could not be revoked. Try again.');
      setRevoking(false);
      setConfirming(false);
    }
  };

  return (
    <article class="item key-card" aria-labelledby={titleId} data-testid="key-row" data-id={key.id} data-status={status}>
      <h3 id={titleId}>{key.name}</h3>
      <p class="status-line">
        <span class={`badge key-badge-${status}`} data-testid="key-status">
          {STATUS_LABELS[status]}
        </span>
      </p>
      <dl class="facts">
        <Row label="Prefix">
          <code data-testid="key-prefix">{key.prefix}</code>…
        </Row>
        <Row label="Scopes">
          <ul class="codes" data-testid="key-scopes">
            {key.scopes.map((scope) => (
              <li key={scope}>
                <code>{scope}</code>
              </li>
            ))}
          </ul>
        </Row>
        <Row label="Allowed addresses">
          {key.allowed_cidrs === null ? (
            'Any address'
          ) : (
            <ul class="codes" data-testid="key-allowed-addresses">
              {key.allowed_cidrs.map((cidr) => (
                <li key={cidr}>
                  <code>{cidr}</code>
                </li>
              ))}
            </ul>
          )}
        </Row>
        <Row label="Speaks for">
          {key.allowed_actors === null ? (
            'Any actor'
          ) : (
            <ul class="codes" data-testid="key-allowed-actors">
              {key.allowed_actors.map((pattern) => (
                <li key={pattern}>
                  <code>{pattern}</code>
                </li>
              ))}
            </ul>
          )}
        </Row>
        <Row label="Created by">
          <Identity identity={key.created_by} session={session} />
        </Row>
        <Row label="Acts for">
          <Identity identity={key.owner} session={session} />
        </Row>
        <Row label="Created">
          <When iso={key.created_at} none="unknown" />
        </Row>
        <Row label="Last used">
          <span data-testid="key-last-used">
            <When iso={key.last_used_at} none="Never" />
          </span>
        </Row>
        <Row label="Expires">
          <span data-testid="key-expires">
            <When iso={key.expires_at} none="Never" />
          </span>
        </Row>
        {key.revoked_at !== null && (
          <Row label="Revoked">
            <When iso={key.revoked_at} none="" />
          </Row>
        )}
      </dl>
      {status === 'active' && !confirming && (
        <div class="actions">
          <button type="button" class="button secondary" onClick={() => onRotate(key)} data-testid="rotate">
            Rotate<span class="visually-hidden"> “{key.name}”</span>
          </button>
          <button type="button" class="button danger" ref={revokeButton} onClick={() => setConfirming(true)} data-testid="revoke">
            Revoke<span class="visually-hidden"> “{key.name}”</span>
          </button>
        </div>
      )}
      {status === 'active' && confirming && (
        <div class="key-confirm" role="group" aria-labelledby={questionId} data-testid="revoke-confirmation">
          <p id={questionId}>
            <strong>Revoke key “{key.name}”?</strong> Anything that uses it is refused from then on; this cannot be undone.
          </p>
          <div class="actions">
            <button type="button" class="button danger" disabled={revoking} onClick={() => void revoke()} data-testid="confirm-revoke">
              {revoking ? 'Revoking…' : 'Revoke'}
            </button>
            <button type="button" class="button secondary" ref={cancelButton} disabled={revoking} onClick={() => setConfirming(false)} data-testid="cancel-revoke">
              Cancel
            </button>
          </div>
        </div>
      )}
      {problem !== null && (
        <p role="alert" class="error" data-testid="revoke-error">
          {problem}
        </p>
      )}
    </article>
  );
}
