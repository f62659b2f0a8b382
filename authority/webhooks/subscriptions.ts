/**
 * Webhook subscriptions (migration 0010): create, read, change, delete, and the signing secret,
 * which is stored only sealed with the configured secret key and shown only when it is issued
 * (`create`, `rotate_secret`). Names are unique per organization: a clash is 409 `conflict`.
 *
 * @example
 *   const { subscription, secret } = await createSubscription(db, box, { orgId, name: 'ops', url, eventTypes: null }, clock);
 *   const opened = openSecret(box, subscription); // 'whsec_…', for the worker
 */
import { randomBytes, randomUUID } from 'node:crypto';
import { CountersignError } from '../../shared/errors.js';
import { WEBHOOK_DEFAULTS, type WebhookPatch, type WebhookSubscriptionWire } from '../../shared/wire/webhooks.js';
import type { SecretBox } from '../signing/secret-box.js';
import type { Queryable } from '../store/db.js';
import type { Clock } from '../time.js';

export interface Subscription {
  id: string;
  orgId: string;
  name: string;
  url: string;
  eventTypes: string[] | null;
  isActive: boolean;
  maxAttempts: number;
  timeoutSeconds: number;
  secretSealed: string;
  createdAt: Date;
  updatedAt: Date;
}

interface SubscriptionRow {
  id: string;
  org_id: string;
  name: string;
  url: string;
  event_types: string[] | null;
  is_active: boolean;
  max_attempts: number;
  timeout_seconds: number;
  secret_sealed: string;
  created_at: Date;
  updated_at: Date;
}

export const subscriptionFromRow = (row: SubscriptionRow): Subscription => ({
  id: row.id,
  orgId: row.org_id,
  name: row.name,
  url: row.url,
  eventTypes: row.event_types,
  isActive: row.is_active,
  maxAttempts: row.max_attempts,
  timeoutSeconds: row.timeout_seconds,
  secretSealed: row.secret_sealed,
  createdAt: row.created_at,
  updatedAt: row.updated_at,
});

/** `whsec_` + base64 of 32 random bytes: the Standard Webhooks form. */
export function newSigningSecret(): string {
  return `whsec_${randomBytes(32).toString('base64')}`;
}

export function openSecret(box: SecretBox, subscription: Pick<Subscription, 'secretSealed'>): string {
  return box.open(subscription.secretSealed).toString('utf8');
}

export function subscriptionToWire(subscription: Subscription, secret?: string): WebhookSubscriptionWire {
  return {
    id: subscription.id,
    name: subscription.name,
    url: subscription.url,
    event_types: subscription.eventTypes,
    is_active: subscription.isActive,
    max_attempts: subscription.maxAttempts,
    timeout_seconds: subscription.timeoutSeconds,
    ...(secret === undefined ? {} : { signing_secret: secret }),
    created_at: subscription.createdAt.toISOString(),
    updated_at: subscription.updatedAt.toISOString(),
  };
}

/** Postgres unique_violation on (org_id, name) becomes the API's 409 conflict. */
function nameClash(error: unknown, name: string): never {
  if ((error as { code?: string }).code === '23505') {
    throw new CountersignError('conflict', `a webhook subscription named "${name}" already exists in this organization`, { cause: error });
  }
  throw error;
}

export interface NewSubscription {
  orgId: string;
  name: string;
  url: string;
  eventTypes: string[] | null;
  isActive?: boolean | undefined;
  maxAttempts?: number | undefined;
  timeoutSeconds?: number | undefined;
}

export async function createSubscription(db: Queryable, box: SecretBox, input: NewSubscription, clock: Clock): Promise<{ subscription: Subscription; secret: string }> {
  const secret = newSigningSecret();
  const now = new Date(clock.now());
  let rows: SubscriptionRow[];
  try {
    rows = await db.query<SubscriptionRow>(
      `INSERT INTO webhook_subscriptions (id, org_id, name, url, event_types, is_active, max_attempts, timeout_seconds, secret_sealed, created_at, updated_at)
       VALUES ($1, $2, $3, $4, $5::text[], $6, $7, $8, $9, $10, $10) RETURNING *`,
      [
        randomUUID(), input.orgId, input.name, input.url, input.eventTypes, input.isActive ?? true,
        input.maxAttempts ?? WEBHOOK_DEFAULTS.max_attempts, input.timeoutSeconds ?? WEBHOOK_DEFAULTS.timeout_seconds, box.seal(secret), now,
      ],
    );
  } catch (error) {
    nameClash(error, input.name);
  }
  return { subscription: subscriptionFromRow(rows[0] as SubscriptionRow), secret };
}

export async function listSubscriptions(db: Queryable, orgId: string): Promise<Subscription[]> {
  const rows = await db.query<SubscriptionRow>('SELECT * FROM webhook_subscriptions WHERE org_id = $1 ORDER BY created_at, id', [orgId]);
  return rows.map(subscriptionFromRow);
}

export async function findSubscription(db: Queryable, orgId: string, id: string): Promise<Subscription | null> {
  const [row] = await db.query<SubscriptionRow>('SELECT * FROM webhook_subscriptions WHERE org_id = $1 AND id = $2', [orgId, id]);
  return row ? subscriptionFromRow(row) : null;
}

const notFound = () => new CountersignError('not_found', 'no such webhook subscription in this organization');

/** Applies the fields present in `patch`; an absent field keeps its value, `event_types: null` means all. */
export async function updateSubscription(db: Queryable, orgId: string, id: string, patch: WebhookPatch, clock: Clock): Promise<Subscription> {
  const sets: string[] = [];
  const params: unknown[] = [orgId, id, new Date(clock.now())];
  const set = (column: string, value: unknown, cast = ''): void => {
    params.push(value);
    sets.push(`${column} = $${params.length}${cast}`);
  };
  if (patch.name !== undefined) set('name', patch.name);
  if (patch.url !== undefined) set('url', patch.url);
  if (patch.event_types !== undefined) set('event_types', patch.event_types, '::text[]');
  if (patch.is_active !== undefined) set('is_active', patch.is_active);
  if (patch.max_attempts !== undefined) set('max_attempts', patch.max_attempts);
  if (patch.timeout_seconds !== undefined) set('timeout_seconds', patch.timeout_seconds);
  let rows: SubscriptionRow[];
  try {
    rows = await db.query<SubscriptionRow>(
      `UPDATE webhook_subscriptions SET ${[...sets, 'updated_at = $3'].join(', ')} WHERE org_id = $1 AND id = $2 RETURNING *`,
      params,
    );
  } catch (error) {
    nameClash(error, patch.name ?? '');
  }
  if (!rows[0]) throw notFound();
  return subscriptionFromRow(rows[0]);
}

/** Deletes the subscription and, with it, its deliveries and their history. */
export async function deleteSubscription(db: Queryable, orgId: string, id: string): Promise<void> {
  const rows = await db.query('DELETE FROM webhook_subscriptions WHERE org_id = $1 AND id = $2 RETURNING id', [orgId, id]);
  if (rows.length === 0) throw notFound();
}

/** A new secret at once: every delivery from now on, retries included, is signed with it only. */
export async function rotateSecret(db: Queryable, box: SecretBox, orgId: string, id: string, clock: Clock): Promise<{ subscription: Subscription; secret: string }> {
  const secret = newSigningSecret();
  const rows = await db.query<SubscriptionRow>(
    'UPDATE webhook_subscriptions SET secret_sealed = $3, updated_at = $4 WHERE org_id = $1 AND id = $2 RETURNING *',
    [orgId, id, box.seal(secret), new Date(clock.now())],
  );
  if (!rows[0]) throw notFound();
  return { subscription: subscriptionFromRow(rows[0]), secret };
}
