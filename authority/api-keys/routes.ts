/**
 * `POST /v1/api-keys`, `GET /v1/api-keys`, `POST /v1/api-keys/:id/revoke`: scope `keys:write`
 * (role admin holds it). Keys are confined to the caller's organization and never widen
 * (narrowing.ts): a new key gets only scopes its creator holds, and a key's allowlist, allowed
 * actors and expiry pass on to the keys it mints. A caller cannot revoke a key holding scopes it
 * lacks, so `keys:write` alone cannot disable the organization's admin key. A new key's owner is
 * the creating user, or the creating key's owner (auth/identity.ts).
 */
import type { FastifyInstance } from 'fastify';
import type { ZodTypeProvider } from 'fastify-type-provider-zod';
import { CountersignError } from '../../shared/errors.js';
import {
  ApiKeyIdParams,
  CreateApiKeyRequest,
  CreateApiKeyResponse,
  ListApiKeysResponse,
  newKeyExpiryProblem,
  RevokeApiKeyResponse,
} from '../../shared/wire/api-keys.js';
import type { Principal } from '../auth/principal.js';
import type { Db } from '../store/db.js';
import type { CredentialCache } from '../auth/credential-cache.js';
import type { Clock } from '../time.js';
import { apiKeyToWire, createApiKey, getApiKey, listApiKeys, revokeApiKey } from './keys.js';
import { narrowedLimits, scopesBeyond, type RequestedLimits } from './narrowing.js';

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
      const beyond = scopesBeyond(request.body.scopes, principal.permissions);
      if (beyond.length > 0) {
        throw new CountersignError('forbidden', `a key can only be given scopes its creator holds; missing: ${beyond.join(', ')}`);
      }
      const requestedExpiry = request.body.expires_at === undefined ? undefined : new Date(request.body.expires_at);
      const expiryProblem = requestedExpiry === undefined ? null : newKeyExpiryProblem(requestedExpiry, clock.now());
      if (expiryProblem !== null) {
        throw new CountersignError('invalid_request', `expires_at ${expiryProblem}`, { details: [{ path: 'expires_at', message: expiryProblem }] });
      }
      let limits: RequestedLimits = { allowedCidrs: request.body.allowed_cidrs, allowedActors: request.body.allowed_actors, expiresAt: requestedExpiry };
      let owner: string;
      if (principal.kind === 'api_key') {
        // The stored row, not the cached principal: its limits and owner are what the key has now.
        const parent = await getApiKey(db, principal.org.id, principal.keyId);
        if (!parent) throw new CountersignError('forbidden', 'the creating API key is no longer on record');
        limits = narrowedLimits(parent, limits);
        owner = parent.owner;
      } else {
        owner = `user:${principal.userId}`;
      }
      const { key, secret } = await createApiKey(
        db,
        {
          org: principal.org,
          name: request.body.name,
          scopes: request.body.scopes,
          allowedCidrs: limits.allowedCidrs,
          allowedActors: limits.allowedActors,
          expiresAt: limits.expiresAt,
          createdBy: principal.credential,
          owner,
        },
        clock,
      );
      request.log.info({ api_key_id: key.id, scopes: key.scopes, allowed_actors: key.allowedActors }, 'API key created');
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
      const target = await getApiKey(db, principal.org.id, request.params.id);
      if (!target) throw new CountersignError('not_found', 'no such API key in this organization');
      // Revoking is a power over the key: a narrower credential must not switch off a wider one.
      const beyond = scopesBeyond(target.scopes, principal.permissions);
      if (beyond.length > 0) {
        throw new CountersignError('forbidden', `a key holding scopes this credential lacks cannot be revoked by it; missing: ${beyond.join(', ')}`);
      }
      const key = await revokeApiKey(db, principal.org.id, request.params.id, clock);
      // The change notice reaches this process a moment later; the caller's next request must not.
      credentials.invalidate();
      if (!key) throw new CountersignError('not_found', 'no such API key in this organization');
      request.log.info({ api_key_id: key.id }, 'API key revoked');
      return { api_key: apiKeyToWire(key) };
    },
  );
}
