/**
 * Who am I: `GET /v1/session` for user JWTs, `GET /v1/api-key-self` for API keys (also at
 * `/v1-api-key-self`, the @atlasent/sdk's path). Each refuses the other kind of credential with
 * 403 and says which path to use instead.
 */
import type { FastifyInstance } from 'fastify';
import type { ZodTypeProvider } from 'fastify-type-provider-zod';
import { CountersignError } from '../../shared/errors.js';
import { ApiKeySelfResponse } from '../../shared/wire/api-keys.js';
import { SessionResponse } from '../../shared/wire/session.js';
import type { Principal } from './principal.js';

/** The slash path first; `/v1-api-key-self` is the SDK's. */
export const API_KEY_SELF_PATHS = ['/v1/api-key-self', '/v1-api-key-self'] as const;

export function identityRoutes(app: FastifyInstance): void {
  const routes = app.withTypeProvider<ZodTypeProvider>();

  routes.get(
    '/v1/session',
    { config: { access: 'authenticated' }, schema: { response: { 200: SessionResponse } } },
    async (request) => {
      const principal = request.principal as Principal;
      if (principal.kind !== 'user') {
        throw new CountersignError('forbidden', 'GET /v1/session needs a user token; API keys use GET /v1/api-key-self');
      }
      if (principal.role === null) throw new CountersignError('forbidden', 'the token carries no known role');
      return {
        user: { id: principal.userId, email: principal.email },
        organization: { id: principal.org.id, name: principal.org.name },
        role: principal.role,
        permissions: [...principal.permissions].sort(),
        expires_at: principal.expiresAt.toISOString(),
      };
    },
  );

  for (const url of API_KEY_SELF_PATHS) {
    routes.get(url, { config: { access: 'authenticated' }, schema: { response: { 200: ApiKeySelfResponse } } }, async (request) => {
      const principal = request.principal as Principal;
      if (principal.kind !== 'api_key') {
        throw new CountersignError('forbidden', 'GET /v1/api-key-self describes API keys; user tokens use GET /v1/session');
      }
      return { key_id: principal.keyId, organization_id: principal.org.id, scopes: [...principal.scopes], allowed_actors: principal.allowedActors === null ? null : [...principal.allowedActors] };
    });
  }
}
