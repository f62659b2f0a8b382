/**
 * AuthZEN action names → Countersign action types. AuthZEN lets an action be named anything
 * (`GET`, `can_read`, `Read Documents`, `document:read`); a policy matches dotted-lowercase action
 * types. The rule, in order, is deterministic and never refuses a name:
 *
 *   1. `authzen.action_names` in the authority configuration: an exact name → the type it gives.
 *   2. A name that already is an action type (dotted lowercase, such as `payments.wire` or
 *      `can_read_user`) is that type, unless it is in the `authzen.` namespace (rule 4 owns it).
 *   3. An HTTP method (`GET`, `POST`, … as RFC 9110 spells them) → `<http_method_prefix>.<method
 *      in lowercase>`: `GET` → `http.get`, so a class `http.*` covers every method and `http.get`
 *      one of them.
 *   4. Anything else → `authzen.<slug>.<digest>`: the slug is the name in lowercase with every run
 *      of other characters than a-z, 0-9, `_` and `-` turned into one `_` (at most 64 characters),
 *      the digest the first 12 hex digits of the SHA-256 of the name. Two different names never
 *      share a type (the digest tells them apart, and no name reaches `authzen.` by rules 1–3), while
 *      names that differ only in case or punctuation share the prefix `authzen.<slug>.`, which one
 *      class `authzen.<slug>.*` matches: `Read Documents` → `authzen.read_documents.<digest>`.
 *
 * Rules 1 and 3 make two names one type on purpose (`GET` and `http.get` are the same action).
 *
 * @example
 *   const names = actionNameMapping({ action_names: { can_read: 'documents.read' }, http_method_prefix: 'http' });
 *   names.toActionType('GET');            // 'http.get'
 *   names.toActionType('can_read');       // 'documents.read'
 *   names.toActionType('payments.wire');  // 'payments.wire'
 *   names.toActionType('Read Documents'); // 'authzen.read_documents.' + 12 hex digits
 */
import { hash } from 'node:crypto';
import { ActionType } from '../../shared/wire/evaluate.js';
import type { AuthzenSettings } from './settings.js';

/** The methods of RFC 9110 and PATCH (RFC 5789), spelled as they are on the wire. */
export const HTTP_METHODS = ['GET', 'HEAD', 'POST', 'PUT', 'DELETE', 'CONNECT', 'OPTIONS', 'TRACE', 'PATCH'] as const;

/** Where rule 4 puts the names it encodes; no name reaches it any other way. */
export const ENCODED_NAMESPACE = 'authzen.';

const SLUG_LENGTH = 64;
const DIGEST_LENGTH = 12;

export interface ActionNameMapping {
  /** The action type the policy sees for an AuthZEN action name. */
  toActionType(name: string): string;
  /** Names whose types are worth trying in an action search: the configured names and the HTTP methods. */
  knownNames(): readonly string[];
}

function isActionType(name: string): boolean {
  return ActionType.safeParse(name).success && !name.startsWith(ENCODED_NAMESPACE);
}

/** Rule 4. */
export function encodedActionType(name: string): string {
  const slug = name.toLowerCase().replace(/[^a-z0-9_-]+/g, '_').slice(0, SLUG_LENGTH) || '_';
  return `${ENCODED_NAMESPACE}${slug}.${hash('sha256', name, 'hex').slice(0, DIGEST_LENGTH)}`;
}

export function actionNameMapping(settings: AuthzenSettings): ActionNameMapping {
  const configured = new Map(Object.entries(settings.action_names));
  const methods = new Set<string>(HTTP_METHODS);
  return {
    toActionType(name) {
      const named = configured.get(name);
      if (named !== undefined) return named;
      if (isActionType(name)) return name;
      if (methods.has(name)) return `${settings.http_method_prefix}.${name.toLowerCase()}`;
      return encodedActionType(name);
    },
    knownNames: () => [...configured.keys(), ...HTTP_METHODS],
  };
}
