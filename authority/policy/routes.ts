/**
 * `GET /v1/policies` (policy:read or policy:write), `GET /v1/policies/versions/:version` (the
 * same: one stored version with its source), `PUT /v1/policies` (policy:write: a new
 * version, audited as policy.updated), `POST /v1/policies/validate` (policy:write: errors with
 * their position, nothing stored).
 */
import type { FastifyInstance } from 'fastify';
import type { ZodTypeProvider } from 'fastify-type-provider-zod';
import { CountersignError } from '../../shared/errors.js';
import { PolicyResponse, PolicySubmission, PolicyValidationResponse, PolicyVersionParams, PolicyVersionResponse, submissionSource } from '../../shared/wire/policies.js';
import type { CredentialCache } from '../auth/credential-cache.js';
import type { Principal } from '../auth/principal.js';
import type { Db } from '../store/db.js';
import { compilePolicy } from './compile.js';
import { policyToWire, type PolicyVersions } from './versions.js';

export function policyRoutes(
  app: FastifyInstance,
  deps: { db: Db; policies: PolicyVersions; credentials: Pick<CredentialCache, 'invalidate'> },
): void {
  const routes = app.withTypeProvider<ZodTypeProvider>();

  const describe = async (orgId: string, version: number | null) => {
    const current = version === null ? null : await deps.policies.get(orgId, version);
    const history = await deps.policies.history(orgId);
    return {
      policy: current ? policyToWire(current) : null,
      versions: history.map((entry) => ({
        id: entry.id,
        version: entry.version,
        created_by: entry.createdBy,
        created_at: entry.createdAt.toISOString(),
      })),
    };
  };

  routes.get(
    '/v1/policies',
    { config: { access: ['policy:read', 'policy:write'] }, schema: { response: { 200: PolicyResponse } } },
    async (request) => {
      const { org } = request.principal as Principal;
      return describe(org.id, org.policyVersion);
    },
  );

  routes.get(
    '/v1/policies/versions/:version',
    { config: { access: ['policy:read', 'policy:write'] }, schema: { params: PolicyVersionParams, response: { 200: PolicyVersionResponse } } },
    async (request) => {
      const { org } = request.principal as Principal;
      const stored = await deps.policies.get(org.id, request.params.version);
      if (!stored) throw new CountersignError('not_found', `this organization has no policy version ${request.params.version}`);
      return { policy: policyToWire(stored) };
    },
  );

  routes.put(
    '/v1/policies',
    { config: { access: 'policy:write' }, schema: { body: PolicySubmission, response: { 200: PolicyResponse } } },
    async (request) => {
      const principal = request.principal as Principal;
      const { source, format } = submissionSource(request.body);
      const stored = await deps.db.transaction((tx) =>
        deps.policies.put(tx, { orgId: principal.org.id, source, format, createdBy: principal.credential, requestId: request.id }),
      );
      // Cached credentials carry the organization's policy version; the change notice reaches
      // this process a moment later, and the caller's next evaluation must use the new version.
      deps.credentials.invalidate();
      request.log.info({ policy_version: stored.version }, 'policy updated');
      return describe(principal.org.id, stored.version);
    },
  );

  routes.post(
    '/v1/policies/validate',
    { config: { access: 'policy:write' }, schema: { body: PolicySubmission, response: { 200: PolicyValidationResponse } } },
    async (request) => {
      const { source, format } = submissionSource(request.body);
      const result = compilePolicy(source, format);
      return { valid: result.ok, errors: result.ok ? [] : result.errors };
    },
  );
}
