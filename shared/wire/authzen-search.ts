/**
 * The AuthZEN 1.0 search APIs on the wire: subject search (which subjects may perform an action on
 * a resource) and action search (which actions a subject may perform on a resource), each with
 * AuthZEN's paging (`page.token` and `page.limit` in, `page.next_token`, `count` and `total` out).
 * As everywhere in AuthZEN, keys this authority does not know are ignored. Resource search is not
 * offered: a policy names action types and actors, never the resources they act on.
 *
 * @example
 *   AuthzenActionSearchRequest.parse({ subject: { type: 'agent', id: 'support-bot' }, resource: { type: 'mcp', id: 'tools' }, page: { limit: 20 } });
 */
import { z } from 'zod';
import { AuthzenAction, AuthzenContext, AuthzenResource, AuthzenSubject } from './authzen.js';

/** The most results one page holds; also the size of a page whose request names no limit. */
export const MAX_AUTHZEN_SEARCH_PAGE = 100;

export const AuthzenPageRequest = z.object({
  /** The `next_token` of the previous page. */
  token: z.string().max(256).optional(),
  /** The most results to return: 1 to 100 (fewer than 1 is read as 1, more as 100); 100 unless given. */
  limit: z.number().int().nonnegative().optional(),
  properties: z.record(z.string(), z.unknown()).optional(),
});

export const AuthzenPageResponse = z.object({
  /** Empty when this page is the last. */
  next_token: z.string(),
  /** How many results this page holds. */
  count: z.number().int().nonnegative(),
  /** How many results match in all. */
  total: z.number().int().nonnegative(),
});

/** `POST /access/v1/search/action`: the subject and the resource; an `action` is ignored. */
export const AuthzenActionSearchRequest = z.object({
  subject: AuthzenSubject,
  resource: AuthzenResource,
  context: AuthzenContext.optional(),
  page: AuthzenPageRequest.optional(),
});
export type AuthzenActionSearchRequest = z.infer<typeof AuthzenActionSearchRequest>;

/** `POST /access/v1/search/subject`: the subject's type (an `id` is ignored), the action and the resource. */
export const AuthzenSubjectSearchRequest = z.object({
  subject: AuthzenSubject.pick({ type: true, properties: true }),
  action: AuthzenAction,
  resource: AuthzenResource,
  context: AuthzenContext.optional(),
  page: AuthzenPageRequest.optional(),
});
export type AuthzenSubjectSearchRequest = z.infer<typeof AuthzenSubjectSearchRequest>;

export const AuthzenActionSearchResponse = z.object({
  /** Action names, each of which an evaluation with this subject and resource would answer `true`. */
  results: z.array(z.object({ name: z.string() })),
  page: AuthzenPageResponse,
});
export type AuthzenActionSearchResponse = z.infer<typeof AuthzenActionSearchResponse>;

export const AuthzenSubjectSearchResponse = z.object({
  /** Subjects of the requested type, each of which an evaluation of this action and resource would answer `true`. */
  results: z.array(z.object({ type: z.string(), id: z.string() })),
  page: AuthzenPageResponse,
});
export type AuthzenSubjectSearchResponse = z.infer<typeof AuthzenSubjectSearchResponse>;
