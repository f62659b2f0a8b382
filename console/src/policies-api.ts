/**
 * The policy calls the policies page makes, all through `json` (the session cookie, the CSRF
 * header, the server's own error messages):
 *
 *   GET  /v1/policies           the current version (with its source) and the list of versions
 *                               (id, number, who stored it, when; newest first, at most 100);
 *                               policy:read or policy:write
 *   GET  /v1/policies/versions/N  one stored version with its text (an older one, for a diff);
 *                               policy:read or policy:write
 *   POST /v1/policies/validate  a draft compiled and checked, nothing stored; policy:write
 */
import type { z } from 'zod';
import type { PolicyRecord, PolicyResponse, PolicyValidationResponse } from '../../shared/wire/policies.js';
import { json } from './api';

export type PolicyState = z.infer<typeof PolicyResponse>;
export type PolicyWire = z.infer<typeof PolicyRecord>;
export type PolicyVersionEntry = PolicyState['versions'][number];
export type PolicyValidation = z.infer<typeof PolicyValidationResponse>;
export type PolicyFormat = PolicyWire['format'];

/** The most `source` may hold (shared/wire/policies.ts). */
export const MAX_POLICY_SOURCE = 60_000;

/** The current policy and the versions, newest first. */
export async function getPolicy(signal?: AbortSignal): Promise<PolicyState> {
  const { body } = await json<PolicyState>('/v1/policies', { signal });
  return { ...body, versions: [...body.versions].sort((x, y) => y.version - x.version) };
}

/** A stored version's text: versions never change, so a page asks for each at most once. */
export async function getPolicyVersion(version: number): Promise<PolicyWire> {
  return (await json<{ policy: PolicyWire }>(`/v1/policies/versions/${version}`)).body.policy;
}

export async function validatePolicy(source: string, format: PolicyFormat): Promise<PolicyValidation> {
  return (await json<PolicyValidation>('/v1/policies/validate', { method: 'POST', body: { source, format } })).body;
}
