/**
 * API key scopes: `resource:action`. Bare names (`evaluate`, `admin`) are not scopes and are
 * refused wherever a scope is accepted.
 *
 * @example
 *   Scope.parse('evaluate:write'); // ok
 *   Scope.parse('evaluate');       // ZodError: scopes have the form resource:action
 */
import { z } from 'zod';

export const SCOPES = [
  'evaluate:write',
  'verify:execute',
  'audit:read',
  'approvals:read',
  'approvals:write',
  'policy:read',
  'policy:write',
  'webhooks:write',
  'permits:read',
  'permits:write',
  'effects:write',
  'hitl:approve',
  'keys:write',
] as const;
export type Scope = (typeof SCOPES)[number];

const SCOPE_FORM = /^[a-z][a-z_]*:[a-z][a-z_]*$/;
const known = new Set<string>(SCOPES);

export function isScope(value: string): value is Scope {
  return known.has(value);
}

export const Scope = z
  .string()
  .regex(SCOPE_FORM, { message: 'scopes have the form resource:action; bare names are not scopes' })
  .refine(isScope, { message: `unknown scope; known scopes: ${SCOPES.join(', ')}` })
  .transform((value) => value as Scope);
