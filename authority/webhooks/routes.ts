/**
 * `POST /v1/webhooks` (and the SDK's `/v1-webhooks`, `/functions/v1/v1-webhooks`), scope
 * `webhooks:write` (the key's IP allowlist applies, as everywhere): one endpoint, the operation
 * chosen by `action`. Request and response shapes are in shared/wire/webhooks.ts; every action
 * answers 200.
 *
 * Subscriptions and deliveries are confined to the caller's organization: another
 * organization's id is 404. A duplicate name is 409, a URL without http(s) or naming a private
 * address (unless allowed by configuration) is 400.
 *
 * @example
 *   webhookRoutes(app, { config, db, clock, secrets });
 */
import type { FastifyInstance } from 'fastify';
import type { ZodTypeProvider } from 'fastify-type-provider-zod';
import { CountersignError } from '../../shared/errors.js';
import { WebhookRequest, WebhookResponse } from '../../shared/wire/webhooks.js';
import type { Principal } from '../auth/principal.js';
import type { AuthorityConfig } from '../config.js';
import type { SecretBox } from '../signing/secret-box.js';
import type { Db } from '../store/db.js';
import type { Clock } from '../time.js';
import { listDeliveries, replayDelivery } from './deliveries.js';
import { enqueueTestDelivery } from './outbox.js';
import {
  createSubscription,
  deleteSubscription,
  findSubscription,
  listSubscriptions,
  rotateSecret,
  subscriptionToWire,
  updateSubscription,
} from './subscriptions.js';
import { literalTargetProblem } from './targets.js';

export interface WebhookRouteDeps {
  config: AuthorityConfig;
  db: Db;
  clock: Clock;
  secrets: SecretBox;
}

/** The slash path first; the function-style aliases are the SDK's. */
export const WEBHOOK_PATHS = ['/v1/webhooks', '/v1-webhooks', '/functions/v1/v1-webhooks'] as const;

export function webhookRoutes(app: FastifyInstance, deps: WebhookRouteDeps): void {
  const routes = app.withTypeProvider<ZodTypeProvider>();
  const { db, clock, secrets } = deps;
  const checkTarget = (url: string | undefined, path: string): void => {
    if (url === undefined) return;
    const problem = literalTargetProblem(url, deps.config.webhooks.allow_private_targets);
    if (problem) throw new CountersignError('invalid_request', problem, { details: [{ path, message: problem }] });
  };
  const notFound = () => new CountersignError('not_found', 'no such webhook subscription in this organization');

  for (const url of WEBHOOK_PATHS) {
    routes.post(url, { config: { access: 'webhooks:write' }, schema: { body: WebhookRequest, response: { 200: WebhookResponse } } }, async (request) => {
      const principal = request.principal as Principal;
      const orgId = principal.org.id;
      const body = request.body;
      switch (body.action) {
        case 'create': {
          checkTarget(body.url, 'url');
          const { subscription, secret } = await createSubscription(
            db,
            secrets,
            {
              orgId,
              name: body.name,
              url: body.url,
              eventTypes: body.event_types ?? null,
              isActive: body.is_active,
              maxAttempts: body.max_attempts,
              timeoutSeconds: body.timeout_seconds,
            },
            clock,
          );
          request.log.info({ webhook_id: subscription.id }, 'webhook subscription created');
          return { subscription: subscriptionToWire(subscription, secret) };
        }
        case 'list':
          return { subscriptions: (await listSubscriptions(db, orgId)).map((subscription) => subscriptionToWire(subscription)) };
        case 'update': {
          checkTarget(body.patch.url, 'patch.url');
          const subscription = await updateSubscription(db, orgId, body.id, body.patch, clock);
          request.log.info({ webhook_id: subscription.id, fields: Object.keys(body.patch) }, 'webhook subscription updated');
          return { subscription: subscriptionToWire(subscription) };
        }
        case 'delete':
          await deleteSubscription(db, orgId, body.id);
          request.log.info({ webhook_id: body.id }, 'webhook subscription deleted');
          return { deleted: true as const, id: body.id };
        case 'rotate_secret': {
          const { subscription, secret } = await rotateSecret(db, secrets, orgId, body.id, clock);
          request.log.info({ webhook_id: subscription.id }, 'webhook signing secret rotated');
          return { subscription: subscriptionToWire(subscription, secret) };
        }
        case 'test': {
          const subscription = await findSubscription(db, orgId, body.id);
          if (!subscription) throw notFound();
          const deliveryId = await enqueueTestDelivery(db, subscription, new Date(clock.now()), principal.credential);
          return { queued: true as const, delivery_id: deliveryId };
        }
        case 'list_deliveries':
          if (body.subscription_id !== undefined && !(await findSubscription(db, orgId, body.subscription_id))) throw notFound();
          return listDeliveries(db, orgId, { subscriptionId: body.subscription_id, status: body.status, limit: body.limit, cursor: body.cursor });
        case 'replay':
          return { delivery: await replayDelivery(db, orgId, body.delivery_id, new Date(clock.now())) };
      }
    });
  }
}
