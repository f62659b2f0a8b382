/**
 * Every input is bounded at the edge, before a handler or the database sees it: a JSON body nested
 * deeper than `maxDepth`, a number that is not finite (JSON's `1e999` parses to Infinity), a string
 * that is not well-formed Unicode (a lone surrogate) or holds NUL, in a value or a key, in the body,
 * the query or the path, is the caller's 400 `invalid_request` with the path of the bad field.
 * A path segment is at most DEFAULT_MAX_PARAM_LENGTH characters unless its route declares
 * `config.maxParamLength` (the permit routes admit a permit token); the router itself admits
 * ROUTER_MAX_PARAM_LENGTH, the longest any route declares.
 * Whatever passes can be stored, canonicalized, exported and proved later: Postgres refuses NUL in
 * text and JSON numbers must be finite, so a value let through here would break every later read
 * of the audit chain that holds it.
 *
 * @example
 *   installBoundedInput(app, { maxDepth: 32 });
 *   inputProblem({ a: [1, 'x\u0000'] }, 'body', 32); // { path: 'body.a.1', message: 'text must not contain NUL' }
 */
import type { FastifyInstance } from 'fastify';
import { CountersignError, type ErrorDetail } from '../../shared/errors.js';
import { valueProblem } from '../../shared/wire/recordable-value.js';
import { MAX_TOKEN_LENGTH } from '../../shared/permits/signed-claims.js';

/** The longest path segment a route takes unless it says otherwise. */
export const DEFAULT_MAX_PARAM_LENGTH = 100;
/** The router's own bound (fastify's `maxParamLength`): a permit token, MAX_TOKEN_LENGTH. */
export const ROUTER_MAX_PARAM_LENGTH = MAX_TOKEN_LENGTH;

declare module 'fastify' {
  interface FastifyContextConfig {
    /** The longest path segment this route takes (default DEFAULT_MAX_PARAM_LENGTH). */
    maxParamLength?: number;
  }
}

/** The first path parameter longer than `limit`, as the caller's 400. */
function longParam(params: unknown, limit: number): CountersignError | null {
  if (typeof params !== 'object' || params === null) return null;
  for (const [name, value] of Object.entries(params as Record<string, unknown>)) {
    if (typeof value === 'string' && value.length > limit) {
      return new CountersignError('invalid_request', `a path segment is longer than ${limit} characters`, { details: [{ path: `params.${name}`, message: `at most ${limit} characters` }] });
    }
  }
  return null;
}

/** The first problem in `value` (depth-first; shared/wire/recordable-value.ts), its path under `root`, or null. */
export function inputProblem(value: unknown, root: string, maxDepth: number): ErrorDetail | null {
  const problem = valueProblem(value, maxDepth);
  if (!problem) return null;
  return {
    path: [root, ...problem.path].join('.'),
    message: problem.inKey ? `a key: ${problem.message}` : problem.message,
  };
}

/**
 * Checks the parsed body, the query and the path parameters of every request before validation
 * (preValidation: after parsing, before the route's schema and handler).
 */
export function installBoundedInput(app: FastifyInstance, options: { maxDepth: number }): void {
  app.addHook('preValidation', async (request) => {
    const tooLong = longParam(request.params, request.routeOptions.config.maxParamLength ?? DEFAULT_MAX_PARAM_LENGTH);
    if (tooLong) throw tooLong;
    const problem =
      inputProblem(request.params, 'params', 2) ??
      inputProblem(request.query, 'query', 3) ??
      (request.body === undefined ? null : inputProblem(request.body, 'body', options.maxDepth));
    if (problem) throw new CountersignError('invalid_request', `the request is not acceptable input: ${problem.message}`, { details: [problem] });
  });
}
