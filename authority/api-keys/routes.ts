/**
 * `POST /v1/api-keys`, `GET /v1/api-keys`, `POST /v1/api-keys/:id/revoke`: scope `keys:write`
 * (role admin holds it). Keys are confined to the caller's organization, and a caller can grant
 * a new key only scopes it holds itself, so `keys:write` alone cannot mint a stronger key.
 */
import type { FastifyInstance } from 'fastify';
import type { ZodTypeProvider } from 'fastify-type-provider-zod';
import { CountersignError } from '../../shared/errors.js';
import {
  ApiKeyIdParams,
  CreateApiKeyRequest,
  CreateApiKeyResponse,
  ListApiKeysResponse,
  RevokeApiKeyResponse,
} from '../../shared/wire/api-keys.js';
import type { Principal } from '../auth/principal.js';
import type { Db } from '../store/db.js';
import type { CredentialCache } from '../auth/credential-cache.js';
import type { Clock } from '../time.js';
import { apiKeyToWire, createApiKey, listApiKeys, revokeApiKey } from './keys.js';

export interface ApiKeyRouteDeps {
  db: Db;
  clock: Clock;
  credentials: Pick<CredentialCache, 'invalidate'>;
}

export function apiKeyRoutes(app: FastifyInstance, { db, clock, credentials }: ApiKeyRouteDeps): void {
  const routes = app.withTypeProvider<ZodTypeProvider>();

  routes.post(
    '/v1/api-keys',
    { config: { access: 'keys:write' }, schema: { body: CreateApiKeyRequest, response: { 201: CreateApiKeyResponse } } },
    async (request, reply) => {
      const principal = request.principal as Principal;
      const beyond = request.body.scopes.filter((scope) => !principal.permissions.has(scope));
      if (beyond.length > 0) {
        throw new CountersignError('forbidden', `a key can only be given scopes its creator holds; missing: ${beyond.join(', ')}`);
      }
      const expiresAt = request.body.expires_at === undefined ? undefined : new Date(request.body.expires_at);
      if (expiresAt !== undefined && expiresAt.getTime() <= clock.now()) {
        throw new CountersignError('invalid_request', 'expires_at must be in the future', {
          details: [{ path: 'expires_at', message: 'must be in the future' }],
        });
      }
      const { key, secret } = await createApiKey(
        db,
        {
          org: principal.org,
          name: request.body.name,
          scopes: request.body.scopes,
          allowedCidrs: request.body.allowed_cidrs,
          expiresAt,
          createdBy: principal.credential,
        },
        clock,
      );
      request.log.info({ api_key_id: key.id, scopes: key.scopes }, 'API key created');
      return reply.code(201).send({ api_key: apiKeyToWire(key), secret });
    },
  );

  routes.get(
    '/v1/api-keys',
    { config: { access: 'keys:write' }, schema: { response: { 200: ListApiKeysResponse } } },
    async (request) => {
      const principal = request.principal as Principal;
      return { api_keys: (await listApiKeys(db, principal.org.id)).map(apiKeyToWire) };
    },
  );

  routes.post(
    '/v1/api-keys/:id/revoke',
    { config: { access: 'keys:write' }, schema: { params: ApiKeyIdParams, response: { 200: RevokeApiKeyResponse } } },
    async (request) => {
      const principal = request.principal as Principal;
      const key = await revokeApiKey(db, principal.org.id, request.params.id, clock);
      // The change notice reaches this process a moment later; the caller's next request must not.
      credentials.invalidate();
      if (!key) throw new CountersignError('not_found', 'no such API key in this organization');
      request.log.info({ api_key_id: key.id }, 'API key revoked');
      return { api_key: apiKeyToWire(key) };
    },
  );
}
