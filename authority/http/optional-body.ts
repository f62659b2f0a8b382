/**
 * For POST routes whose body is optional (`POST /v1/audit/exports`, `POST /v1/permits/:id/revoke`):
 * a request with no body at all is treated as one without a body, which fastify hands over as
 * null, instead of being refused as empty JSON before any schema runs.
 *
 * @example
 *   routes.post(url, { schema: { body: Request.nullish() }, onRequest: emptyBodyIsNoBody }, handler);
 */
import type { FastifyRequest } from 'fastify';

export async function emptyBodyIsNoBody(request: FastifyRequest): Promise<void> {
  const length = request.headers['content-length'];
  const noBody = length === '0' || (length === undefined && request.headers['transfer-encoding'] === undefined);
  if (noBody) delete request.headers['content-type'];
}
