/**
 * `mcp.inline:` of an MCP route: the gate decides for clients that bring no permit (inline.ts).
 * It evaluates each such call with its own API key (scope `evaluate:write`, best restricted to the
 * agents' actor ids), as the caller, whose identity comes from the request's credential, never from
 * the call's arguments:
 *
 * - `actor: {jwt: {...}}`: the OAuth bearer token of the `Authorization` header, verified as a JWT
 *   of `issuer` (shared/jwt/verify.ts) whose audience is `audience`, this MCP endpoint's resource
 *   URL (RFC 8707); the actor id is its `claim` (default `sub`);
 * - `actor: {header: x-authenticated-agent}`: a header a trusted hop in front of the gate sets;
 * - `actor.prefix` goes before the id (`agent:` + `sub`), to fall under the key's actor pattern.
 *
 * The caller's `Authorization` header reaches the MCP server only with `pass_token: true`.
 * `console_url` is where approval links point (default: the authority's URL + `/console`).
 *
 * @example
 *   mcp:
 *     server: helpdesk
 *     inline:
 *       api_key_file: /run/secrets/mcp-gate-key
 *       actor:
 *         jwt: { issuer: https://idp.example/, audience: https://gate.example/mcp, jwks_url: https://idp.example/jwks.json }
 *         prefix: 'agent:'
 *     tools: [{ name: '*' }]
 */
import { z } from 'zod';
import { JWT_ISSUER_FIELDS, ONE_KEY_SOURCE } from '../../shared/jwt/verify.js';
import { API_KEY_FIELDS, ONE_API_KEY } from '../api-key-source.js';
import type { Report } from '../fact-sources.js';

const WebUrl = z.url({ protocol: /^https?$/, message: 'an http:// or https:// URL' });

const JwtActor = z
  .object({
    ...JWT_ISSUER_FIELDS,
    /** The claim that names the caller. */
    claim: z.string().min(1).max(64).default('sub'),
  })
  .strict()
  .refine(ONE_KEY_SOURCE.check, { message: ONE_KEY_SOURCE.message });

const Actor = z
  .object({
    jwt: JwtActor.optional(),
    header: z
      .string()
      .regex(/^[!#$%&'*+.^_`|~0-9A-Za-z-]+$/, { message: 'an HTTP header name' })
      .refine((name) => name.toLowerCase() !== 'authorization', { message: 'the Authorization header is read as a JWT: use actor.jwt' })
      .transform((name) => name.toLowerCase())
      .optional(),
    prefix: z.string().min(1).max(64).optional(),
  })
  .strict()
  .refine((actor) => (actor.jwt === undefined) !== (actor.header === undefined), {
    message: 'give exactly one of jwt (the OAuth bearer token, verified) and header (set by a trusted hop)',
  });

const InlineShape = z
  .object(
    {
      /** The gate's evaluating key (scope `evaluate:write`). */
      ...API_KEY_FIELDS,
      actor: Actor,
      /** Forward the caller's Authorization header to the MCP server. */
      pass_token: z.boolean().default(false),
      /** The authority's console, for approval links; default the authority's URL + /console. */
      console_url: WebUrl.optional(),
      /** Named in WWW-Authenticate answers: the endpoint's OAuth protected resource metadata (RFC 9728). */
      resource_metadata: WebUrl.optional(),
    },
    { message: '{api_key_file, actor: {jwt | header}, pass_token?, console_url?}' },
  )
  .strict()
  .refine(ONE_API_KEY.check, { message: ONE_API_KEY.message });

export type McpInline = z.output<typeof InlineShape>;

/** `mcp.inline` compiled, or undefined after reporting every problem (paths relative to `inline`). */
export function compileInline(raw: unknown, report: Report): McpInline | undefined {
  const shape = InlineShape.safeParse(raw);
  if (shape.success) return shape.data;
  for (const issue of shape.error.issues) report(issue.path as Array<string | number>, issue.message);
  return undefined;
}
