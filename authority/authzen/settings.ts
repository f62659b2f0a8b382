/**
 * The `authzen` section of the authority configuration: how AuthZEN action names become action
 * types (authority/authzen/action-names.ts has the rule).
 *
 * @example
 *   authzen:
 *     action_names: { can_read: documents.read, "document:write": documents.write }
 *     http_method_prefix: http   # GET → http.get
 */
import { z } from 'zod';
import { ActionType } from '../../shared/wire/evaluate.js';

export const AuthzenSettings = z
  .object({
    /** AuthZEN action name → action type, applied before any other rule. */
    action_names: z.record(z.string().min(1).max(1024), ActionType).default({}),
    /** HTTP methods become `<prefix>.<method>`: `GET` → `http.get`. One dotted-lowercase label or more. */
    http_method_prefix: z
      .string()
      .min(1)
      .max(64)
      .regex(/^[a-z0-9_-]+(\.[a-z0-9_-]+)*$/, { message: 'dotted lowercase, such as http' })
      .refine((prefix) => prefix !== 'authzen' && !prefix.startsWith('authzen.'), { message: 'the authzen namespace holds encoded names' })
      .default('http'),
  })
  .strict();
export type AuthzenSettings = z.infer<typeof AuthzenSettings>;

export const AUTHZEN_DEFAULTS: AuthzenSettings = { action_names: {}, http_method_prefix: 'http' };
