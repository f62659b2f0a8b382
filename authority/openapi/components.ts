/**
 * The shared parts of the OpenAPI document: info, security schemes, the error envelope and one
 * response per error status, each naming the catalogue codes (shared/errors.ts) it can carry.
 *
 * @example
 *   const components = documentComponents(); // { schemas: { ErrorEnvelope }, responses: { Unauthorized, … }, securitySchemes }
 */
import { z } from 'zod';
import { ERROR_CATALOGUE, type ErrorCode } from '../../shared/errors.js';
import { ErrorEnvelope } from '../../shared/wire/envelope.js';
import { ACTOR_NOT_ALLOWED_REASON } from '../api-keys/actors.js';

/** The error statuses the document describes, with their component names. */
export const ERROR_RESPONSES = {
  400: 'BadRequest',
  401: 'Unauthorized',
  403: 'Forbidden',
  404: 'NotFound',
  409: 'Conflict',
  413: 'PayloadTooLarge',
  415: 'UnsupportedMediaType',
  429: 'TooManyRequests',
  500: 'InternalError',
  503: 'ServiceUnavailable',
} as const;
export type ErrorStatus = keyof typeof ERROR_RESPONSES;

const WHEN: Record<ErrorStatus, string> = {
  400: 'The request does not match the schema, or is malformed (bad JSON, bad percent-encoding); `details` names each problem.',
  401: 'No credential, or one that is unknown, revoked, expired or malformed.',
  403: 'The credential lacks the permission this operation needs, or an API key is used from outside its address allowlist.',
  404: 'Not found in the caller\'s organization (another organization\'s resources are not found either).',
  409: 'The request conflicts with the current state.',
  413: 'The body is larger than 64 KiB.',
  415: 'The body is not `application/json`.',
  429: 'Rate limit exceeded: the organization\'s bucket, or, for refused credentials, the client address. Wait for `Retry-After` seconds.',
  500: 'An unexpected error; the message never carries internals. Quote `request_id` when reporting it.',
  503: 'A dependency needed to answer (database, shared store, identity provider keys, audit log) is not reachable, or the authority is shutting down. Retry after `Retry-After` seconds.',
};

/** The 403 of an operation that asks for a decision as an actor: the usual causes, and the key's actors. */
export const ACTOR_FORBIDDEN = `${WHEN[403]} Also 403 \`forbidden\` with \`reason: "${ACTOR_NOT_ALLOWED_REASON}"\` when an API key asks as an actor its \`allowed_actors\` do not match; nothing is decided or recorded.`;

/** Codes only the proxy answers with (the catalogue is shared); the authority never sends them. */
export const PROXY_ONLY_CODES: ReadonlySet<ErrorCode> = new Set(['permit_required', 'permit_rejected', 'upstream_unavailable', 'gate_unavailable']);

/** The codes the authority answers `status` with. */
export function codesWithStatus(status: number): ErrorCode[] {
  return (Object.keys(ERROR_CATALOGUE) as ErrorCode[]).filter((code) => ERROR_CATALOGUE[code].status === status && !PROXY_ONLY_CODES.has(code));
}

const header = (description: string, schema: Record<string, unknown> = { type: 'string' }) => ({ description, schema });

/** Headers on every answer. */
export const REQUEST_ID_HEADER = header('The request id: the caller\'s `X-Request-ID` when it is a sane token, else a fresh UUID. Also `request_id` in error bodies.');
/** Headers on every answer of a guarded route that passed authentication. */
export const RATE_LIMIT_HEADERS = {
  'X-RateLimit-Limit': header('Requests per minute of the organization\'s bucket.', { type: 'integer' }),
  'X-RateLimit-Remaining': header('Requests left in the bucket.', { type: 'integer' }),
  'X-RateLimit-Reset': header('When the bucket is full again, in Unix seconds.', { type: 'integer' }),
};

function errorResponse(status: ErrorStatus): Record<string, unknown> {
  const codes = codesWithStatus(status).map((code) => `\`${code}\``);
  const headers: Record<string, unknown> = { 'X-Request-ID': REQUEST_ID_HEADER };
  if (status === 429 || status === 503) headers['Retry-After'] = header('Seconds to wait before retrying.', { type: 'integer' });
  return {
    description: `${WHEN[status]} Error code${codes.length > 1 ? 's' : ''}: ${codes.join(', ')}.`,
    headers,
    content: { 'application/json': { schema: { $ref: '#/components/schemas/ErrorEnvelope' } } },
  };
}

function envelopeSchema(): Record<string, unknown> {
  const { $schema: _ignored, ...schema } = z.toJSONSchema(ErrorEnvelope, { target: 'draft-2020-12', io: 'output' }) as Record<string, unknown>;
  return {
    ...schema,
    description:
      'Every non-2xx answer. `error` is a stable code from the catalogue, always with the same `status`; `message` is for people. `details` (400) names each invalid field, `retry_after_ms` comes with 429 `unavailable`, `reason` is a stable machine reason where one applies.',
  };
}

export const SECURITY_SCHEMES = {
  apiKey: {
    type: 'http',
    scheme: 'bearer',
    bearerFormat: 'API key (ask_live_… or ask_test_…)',
    description: 'An API key: `Authorization: Bearer ask_live_…`. Its scopes are its permissions; it may be confined to address ranges and expire.',
  },
  userToken: {
    type: 'http',
    scheme: 'bearer',
    bearerFormat: 'JWT',
    description: 'A user JWT from the configured identity provider: `Authorization: Bearer <JWT>`. Its role (admin, approver, member, viewer) grants the permissions.',
  },
  serviceKey: {
    type: 'apiKey',
    in: 'header',
    name: 'X-Service-Key',
    description: 'Deprecated: an API key in `X-Service-Key` instead of `Authorization`. Answers carry `Deprecation: true`; refused with 401 when `auth.x_service_key.enabled` is false.',
  },
} as const;

export function documentComponents(): Record<string, unknown> {
  return {
    securitySchemes: SECURITY_SCHEMES,
    schemas: { ErrorEnvelope: envelopeSchema() },
    responses: Object.fromEntries(
      (Object.entries(ERROR_RESPONSES) as Array<[string, string]>).map(([status, name]) => [name, errorResponse(Number(status) as ErrorStatus)]),
    ),
  };
}
