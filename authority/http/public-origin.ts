/**
 * Where callers reach the authority: `console.public_url` when it is configured (the authority's
 * public address, without a trailing slash), else the request's own scheme and Host (behind a
 * proxy, set `trust_proxy` so they are the forwarded ones). The console's sign-in callback and the
 * AuthZEN metadata document build their absolute URLs from it.
 *
 * @example
 *   publicOrigin(config, request); // 'https://countersign.example.com'
 */
import type { FastifyRequest } from 'fastify';
import type { AuthorityConfig } from '../config.js';

export function publicOrigin(config: AuthorityConfig, request: FastifyRequest): string {
  return configuredOrigin(config) ?? `${request.protocol}://${request.host}`;
}

/** The configured public address, or null when each request's own is used. */
export function configuredOrigin(config: AuthorityConfig): string | null {
  return config.console.public_url?.replace(/\/+$/, '') ?? null;
}
