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
import { MAX_TOKEN_LENGTH } from '../../shared/permits/signed-claims.js';

export const DEFAULT_MAX_JSON_DEPTH = 32;
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

/** The first problem in `value` (depth-first), or null. The walk itself stops at `maxDepth`. */
export function inputProblem(value: unknown, path: string, maxDepth: number, depth = 0): ErrorDetail | null {
  if (typeof value === 'string') return textProblem(value, path);
  if (typeof value === 'number') return Number.isFinite(value) ? null : { path, message: 'numbers must be finite' };
  if (typeof value !== 'object' || value === null) return null;
  if (depth >= maxDepth) return { path, message: `nested deeper than ${maxDepth} levels` };
  if (Array.isArray(value)) {
    for (let i = 0; i < value.length; i++) {
      const problem = inputProblem(value[i], `${path}.${i}`, maxDepth, depth + 1);
      if (problem) return problem;
    }
    return null;
  }
  for (const [key, inner] of Object.entries(value as Record<string, unknown>)) {
    const keyProblem = textProblem(key, `${path}.${key}`);
    if (keyProblem) return Object.assign({}, keyProblem, { message: `a key: ${keyProblem.message}` });
    const problem = inputProblem(inner, `${path}.${key}`, maxDepth, depth + 1);
    if (problem) return problem;
  }
  return null;
}

function textProblem(text: string, path: string): ErrorDetail | null {
  if (text.includes('\u0000')) return { path, message: 'text must not contain NUL' };
  if (!text.isWellFormed()) return { path, message: 'text must be well-formed Unicode (no lone surrogates)' };
  return null;
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
