/**
 * The proxy's configuration: defaults < proxy.yaml < environment, validated with zod. Every bad
 * field is reported at once, by its dotted path, in one `ProxyConfigError`. Routes come out
 * compiled: the path pattern parsed, fact sources checked against it (fact-sources.ts: a
 * `{path: x}` source needs `:x` in the pattern), JSON pointers split, mode and body limit
 * resolved, `needsBody` computed.
 *
 * @example
 *   const config = await loadProxyConfig('config/proxy.yaml', process.env);
 *   config.listen; // { host: '127.0.0.1', port: 7080 }
 *   config.routes[0]; // { name: 'echo', methods: ['POST'], path: '/echo/:id', action_type: 'demo.echo',
 *                     //   mode: 'enforce', needsBody: false, facts: [...], ... }
 */
import { z } from 'zod';
import { formatIssues, hostPort, readConfigMapping, withEnvOverrides } from '../shared/config-file.js';
import { DEFAULT_STORE_SETTINGS, StoreSettings, storeSettingsWithEnv } from '../shared/store/config.js';
import { ActionType } from '../shared/wire/evaluate.js';
import { API_KEY_FIELDS, ONE_API_KEY, readApiKey } from './api-key-source.js';
import { asksExtAuthzOnly, ExtAuthzSchema } from './ext-authz/config.js';
import { compileFacts, isPlainObject, usesBody, type Report, type RouteFact } from './fact-sources.js';
import { compileMcp, DEFAULT_TOOL_ACTION_TYPE, resolveToolModes, type McpRoute, type McpRouteDraft } from './mcp/config.js';
import { PROXY_MODES, type ProxyMode } from './modes.js';
import { PassThroughSchema } from './pass-through.js';
import { parsePathPattern, type PathPattern } from './routes.js';

export const HTTP_METHODS = ['GET', 'POST', 'PUT', 'PATCH', 'DELETE'] as const;
export type HttpMethod = (typeof HTTP_METHODS)[number];
export { PROXY_MODES, type ProxyMode } from './modes.js';
export interface ProxyRoute {
  /** Unique; the metric label. */
  readonly name: string;
  readonly methods: readonly HttpMethod[];
  /** The pattern as configured. */
  readonly path: string;
  readonly pattern: PathPattern;
  readonly action_type: string;
  /** The route's own mode, else the configuration's default. */
  readonly mode: ProxyMode;
  /** `actor_id` first, then the others in configuration order. */
  readonly facts: readonly RouteFact[];
  readonly max_body_bytes: number;
  /** A fact comes from the JSON body, so the gate must buffer and parse it. */
  readonly needsBody: boolean;
  /** An MCP route (mcp/config.ts): its requests are decided by the MCP gate, per JSON-RPC message. */
  readonly mcp?: McpRoute;
}

const HostPort = hostPort('127.0.0.1:7080');

const HttpUrl = z.string().refine(
  (value) => {
    try {
      const url = new URL(value);
      return (url.protocol === 'http:' || url.protocol === 'https:') && url.hostname !== '';
    } catch {
      return false;
    }
  },
  { message: 'expected an http:// or https:// URL' },
);

/** A zod error map: says what is missing instead of `expected string, received undefined`. */
const required = (what: string) => (issue: { input: unknown }) => (issue.input === undefined ? `required: ${what}` : undefined);

const MAX_BODY_LIMIT = 64 * 1024 * 1024;
const BodyLimit = z.number().int().positive().max(MAX_BODY_LIMIT);
const DEFAULT_MAX_BODY_BYTES = 65_536;

/**
 * The records the proxy holds while the store cannot take them (record-backlog.ts): how many at
 * most, and optionally a file that keeps them across a restart (one per proxy process).
 */
const Records = z
  .object({
    backlog_max: z.number().int().min(1).max(1_000_000).default(10_000),
    backlog_file: z.string().min(1).optional(),
  })
  .strict();

const Authority = z
  .object(
    {
    url: z.string({ error: required('the authority\'s URL, such as http://127.0.0.1:7070') }).pipe(HttpUrl),
    /** The proxy's own API key (scope `verify:execute`). */
    ...API_KEY_FIELDS,
    },
    { error: required('{url, api_key_file}: where the authority is and the proxy\'s API key') },
  )
  .strict()
  .refine(ONE_API_KEY.check, { message: ONE_API_KEY.message });
export type ProxyAuthorityConfig = z.infer<typeof Authority>;

const RouteShape = z
  .object({
    name: z.string().min(1).max(64).regex(/^[a-z0-9_-]+$/, { message: 'lowercase letters, digits, _ and - only (it is a metric label)' }),
    match: z
      .object({
        method: z.union([z.enum(HTTP_METHODS), z.array(z.enum(HTTP_METHODS)).min(1)], {
          message: `one of ${HTTP_METHODS.join(', ')}, or a list of them`,
        }),
        path: z.string().min(1),
      })
      .strict(),
    action_type: ActionType.refine((value) => !value.includes('*'), { message: 'a route names one action type, without *' }),
    mode: z.enum(PROXY_MODES).optional(),
    facts: z.record(z.string(), z.unknown(), { message: 'a mapping from fact name to source' }),
    max_body_bytes: BodyLimit.optional(),
  })
  .strict();

/** A route with `mcp:` (mcp/config.ts): its match is a path alone, and its tools say the rest. */
const McpRouteShape = z
  .object({
    name: RouteShape.shape.name,
    match: z.object({ path: z.string().min(1) }, { message: 'an MCP route matches a path: {path: /mcp}' }).strict(),
    mode: z.enum(PROXY_MODES).optional(),
    max_body_bytes: BodyLimit.optional(),
    mcp: z.unknown(),
  })
  .strict();

/** The methods of the Streamable HTTP transport: JSON-RPC messages, the server's event stream, a session's end. */
const MCP_METHODS: HttpMethod[] = ['POST', 'GET', 'DELETE'];

type CompiledRouteInput = Omit<z.output<typeof RouteShape>, 'facts'> & { methods: HttpMethod[]; pattern: PathPattern; facts: RouteFact[]; mcp?: McpRouteDraft };

function compileMcpRoute(raw: Record<string, unknown>, report: Report): CompiledRouteInput | undefined {
  const shape = McpRouteShape.safeParse(raw);
  if (!shape.success) for (const issue of shape.error.issues) report(issue.path as Array<string | number>, issue.message);
  const match = raw.match;
  const patternText = isPlainObject(match) ? match.path : undefined;
  const pattern = typeof patternText === 'string' ? parsePathPattern(patternText) : undefined;
  if (pattern !== undefined && 'error' in pattern) report(['match', 'path'], pattern.error);
  const usablePattern = pattern !== undefined && !('error' in pattern) ? pattern : undefined;
  const mcp = compileMcp(raw.mcp, usablePattern, (path, message) => report(['mcp', ...path], message));
  if (!shape.success || usablePattern === undefined || mcp === undefined) return undefined;
  const { match: matched, ...rest } = shape.data;
  return { ...rest, match: { method: MCP_METHODS, path: matched.path }, action_type: DEFAULT_TOOL_ACTION_TYPE, methods: MCP_METHODS, pattern: usablePattern, facts: [], mcp };
}

/**
 * Checks one route. By hand rather than as a zod transform because zod skips a transform once a
 * field has failed, and an operator fixing a config wants the pattern, the fact sources and the
 * other fields reported together.
 */
function compileRoute(raw: unknown, report: Report): CompiledRouteInput | undefined {
  if (isPlainObject(raw) && Object.hasOwn(raw, 'mcp')) return compileMcpRoute(raw, report);
  const shape = RouteShape.safeParse(raw);
  if (!shape.success) for (const issue of shape.error.issues) report(issue.path as Array<string | number>, issue.message);
  if (!isPlainObject(raw)) return undefined;
  const match = raw.match;
  const patternText = isPlainObject(match) ? match.path : undefined;
  const pattern = typeof patternText === 'string' ? parsePathPattern(patternText) : undefined;
  if (pattern !== undefined && 'error' in pattern) report(['match', 'path'], pattern.error);
  const usablePattern = pattern !== undefined && !('error' in pattern) ? pattern : undefined;
  const facts = isPlainObject(raw.facts)
    ? compileFacts(raw.facts, usablePattern, (path, message) => report(['facts', ...path], message))
    : undefined;
  if (!shape.success || usablePattern === undefined || facts === undefined) return undefined;
  const method = shape.data.match.method;
  const methods = typeof method === 'string' ? [method] : [...new Set(method)];
  return { ...shape.data, methods, pattern: usablePattern, facts };
}

const Routes = z
  .array(z.unknown(), { message: 'a list of routes' })
  .default([])
  .transform((raws, ctx) => {
    const routes: CompiledRouteInput[] = [];
    const names = new Map<string, number>();
    raws.forEach((raw, index) => {
      const route = compileRoute(raw, (path, message) => ctx.addIssue({ code: 'custom', path: [index, ...path], message }));
      if (route !== undefined) routes.push(route);
      const name = isPlainObject(raw) ? raw.name : undefined;
      if (typeof name !== 'string') return;
      const first = names.get(name);
      if (first === undefined) names.set(name, index);
      else ctx.addIssue({ code: 'custom', path: [index, 'name'], message: `duplicate route name (also routes.${first}.name)` });
    });
    return routes;
  });

export const ProxyConfigSchema = z
  .object({
    listen: HostPort.default({ host: '127.0.0.1', port: 7080 }),
    /** Prometheus /metrics and the health probes. */
    admin_listen: HostPort.default({ host: '127.0.0.1', port: 7081 }),
    /** Required unless `ext_authz.only` (checked below, beside every other field). */
    upstream: z.string().pipe(HttpUrl).optional(),
    authority: Authority,
    /** The organization id this gate serves; a permit of any other organization is refused. */
    organization: z.string({ error: required('the id of the organization this gate serves (or COUNTERSIGN_PROXY_ORGANIZATION)') }).min(1),
    issuer: z.string().min(1).default('countersign'),
    audience: z.string().min(1).default('countersign:gate'),
    mode: z.enum(PROXY_MODES).default('enforce'),
    permit_header: z
      .string()
      .regex(/^[!#$%&'*+.^_`|~0-9A-Za-z-]+$/, { message: 'an HTTP header name' })
      .default('X-Service-Permit'),
    /** Unset: `deny` when `mode` is enforce (fail closed), `pass` in a shadow rollout. */
    unmatched: z.enum(['pass', 'deny']).optional(),
    redis_url: z.string().min(1).optional(),
    /**
     * Without redis_url, run on an in-process store anyway: replay state, revocations and records
     * are then shared with nobody (development only; COUNTERSIGN_ALLOW_IN_PROCESS_STORE=1 too).
     */
    allow_in_process_store: z.boolean().default(false),
    /** Redis topology and durability (shared/store/config.ts); used when Redis is configured. */
    store: StoreSettings.default(DEFAULT_STORE_SETTINGS),
    log_level: z.enum(['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent']).default('info'),
    /** How long an idle client connection to `listen` stays open: longer than the clients' own idle timeout. */
    keep_alive_timeout_ms: z.number().int().min(1_000).max(3_600_000).default(120_000),
    max_body_bytes: BodyLimit.default(DEFAULT_MAX_BODY_BYTES),
    routes: Routes,
    /** The record backlog: records held while the store cannot take them. */
    records: Records.default({ backlog_max: 10_000 }),
    /** Requests forwarded without a permit while `unmatched` is deny (pass-through.ts). */
    pass_through: PassThroughSchema,
    /** The gate as an Envoy external authorizer (ext-authz/config.ts). */
    ext_authz: ExtAuthzSchema.optional(),
  })
  .strict()
  .refine((config) => config.upstream !== undefined || asksExtAuthzOnly(config), {
    path: ['upstream'],
    message: 'required: the URL of the protected system (or ext_authz.only: true, when Envoy forwards and the proxy only decides)',
    // Reported together with the other fields' problems, not only once they are fixed.
    when: (payload) => typeof payload.value === 'object' && payload.value !== null,
  })
  .transform((config) => {
    const routes: ProxyRoute[] = config.routes.map((route) => ({
      name: route.name,
      methods: route.methods,
      path: route.match.path,
      pattern: route.pattern,
      action_type: route.action_type,
      mode: route.mode ?? config.mode,
      facts: route.facts,
      max_body_bytes: route.max_body_bytes ?? config.max_body_bytes,
      needsBody: route.facts.some(usesBody),
      ...(route.mcp !== undefined ? { mcp: resolveToolModes(route.mcp, route.mode ?? config.mode) } : {}),
    }));
    return {
      ...config,
      unmatched: config.unmatched ?? (config.mode === 'enforce' ? 'deny' : 'pass'),
      // Lower case once: node:http hands header names over in lower case.
      permit_header: config.permit_header.toLowerCase(),
      routes,
    };
  });

export type ProxyConfig = z.output<typeof ProxyConfigSchema>;
export type ProxyConfigInput = z.input<typeof ProxyConfigSchema>;

/** A configuration problem, with the dotted path of every bad field. */
export class ProxyConfigError extends Error {
  readonly code = 'PROXY_CONFIG_INVALID' as const;

  constructor(message: string) {
    super(message);
    this.name = 'ProxyConfigError';
  }
}

/** Parses an already-assembled object (tests and hot reload build configurations this way). */
export function parseProxyConfig(input: unknown, source = 'proxy configuration'): ProxyConfig {
  const result = ProxyConfigSchema.safeParse(input);
  if (!result.success) throw new ProxyConfigError(formatIssues(source, result.error));
  return result.data;
}

/** Environment variables that override a top-level key of the file. */
export const PROXY_ENV_OVERRIDES: ReadonlyArray<readonly [env: string, key: string]> = [
  ['COUNTERSIGN_PROXY_LISTEN', 'listen'],
  ['COUNTERSIGN_PROXY_ADMIN_LISTEN', 'admin_listen'],
  ['COUNTERSIGN_PROXY_UPSTREAM', 'upstream'],
  ['COUNTERSIGN_PROXY_ORGANIZATION', 'organization'],
  ['COUNTERSIGN_PROXY_MODE', 'mode'],
  ['COUNTERSIGN_LOG_LEVEL', 'log_level'],
  ['REDIS_URL', 'redis_url'],
];

/** Reads, parses and validates proxy.yaml, then applies `PROXY_ENV_OVERRIDES` from `env`. */
export async function loadProxyConfig(file: string, env: NodeJS.ProcessEnv = process.env): Promise<ProxyConfig> {
  const fromFile = await readConfigMapping(file, (message) => new ProxyConfigError(message));
  const merged = withEnvOverrides(fromFile, PROXY_ENV_OVERRIDES, env);
  // Keys inside `authority:`; a key file given here replaces an inline api_key.
  const authority: Record<string, unknown> = typeof merged.authority === 'object' && merged.authority !== null ? { ...merged.authority } : {};
  const authorityUrl = env.COUNTERSIGN_PROXY_AUTHORITY_URL;
  if (authorityUrl !== undefined && authorityUrl !== '') authority.url = authorityUrl;
  const keyFile = env.COUNTERSIGN_PROXY_API_KEY_FILE;
  if (keyFile !== undefined && keyFile !== '') {
    authority.api_key_file = keyFile;
    delete authority.api_key;
  }
  if (Object.keys(authority).length > 0) merged.authority = authority;
  const inlineKeyFile = env.COUNTERSIGN_PROXY_MCP_API_KEY_FILE;
  if (inlineKeyFile !== undefined && inlineKeyFile !== '') merged.routes = withInlineKeyFile(merged.routes, inlineKeyFile);
  merged.store = storeSettingsWithEnv(merged.store, env);
  return parseProxyConfig(merged, file);
}

/** `routes` with `file` as the key of every MCP route's inline decisions (in place of its api_key_file or api_key). */
function withInlineKeyFile(routes: unknown, file: string): unknown {
  if (!Array.isArray(routes)) return routes;
  return routes.map((route: unknown) => {
    if (!isPlainObject(route) || !isPlainObject(route.mcp) || !isPlainObject(route.mcp.inline)) return route;
    const { api_key: _inlineKey, ...inline } = route.mcp.inline;
    return { ...route, mcp: { ...route.mcp, inline: { ...inline, api_key_file: file } } };
  });
}

/** The proxy's API key (api-key-source.ts). */
export function readProxyApiKey(authority: ProxyAuthorityConfig): Promise<string> {
  return readApiKey(authority, 'authority', (message) => new ProxyConfigError(message));
}
