/**
 * An MCP route in proxy.yaml: a route with `mcp:` in place of `action_type` and `facts`. It gates
 * one Streamable HTTP endpoint of an MCP server (`POST` for JSON-RPC, `GET` for the server's event
 * stream, `DELETE` to end a session) and decides each `tools/call` by its tool table: the first
 * entry whose `name` matches the called tool says which action type, target and facts the call's
 * permit must be bound to, in which mode, or that the tool is never allowed (`block: true`).
 *
 * Fact sources are the HTTP routes' (fact-sources.ts), with `{argument: /json/pointer}` reading
 * the call's `arguments` as `{body: …}` reads a body, same conversions (`as: number`). `actor_id`
 * is the route's (`mcp.actor_id`, default `{permit: true}`), `target` is `{type: tool, id:
 * <server>/<tool>}` unless the entry sets it, and `arguments_digest` is always bound (call-facts.ts).
 * With `inline:` (inline-config.ts) the gate evaluates calls that bring no permit itself, as the
 * caller its credential names, so `actor_id` stays the permit's. `hide_denied_tools: true` (inline
 * routes only: the gate must know the caller and hold a key to ask with) leaves out of `tools/list`
 * the tools the policy denies that caller whatever the arguments (tool-policy.ts).
 *
 * @example
 *   routes:
 *     - name: helpdesk
 *       match: { path: /mcp }
 *       mcp:
 *         server: helpdesk
 *         tools:
 *           - { name: get_ticket }
 *           - { name: issue_refund, facts: { amount_usd: { argument: /amount_usd } } }
 *           - { name: delete_*, block: true }
 */
import { z } from 'zod';
import { ActionType } from '../../shared/wire/evaluate.js';
import { compileFacts, isPlainObject, type Report, type RouteFact } from '../fact-sources.js';
import { PROXY_MODES, type ProxyMode } from '../modes.js';
import type { PathPattern } from '../routes.js';
import { compileInline, type McpInline } from './inline-config.js';

/** The action type of a tool call when its entry names none. */
export const DEFAULT_TOOL_ACTION_TYPE = 'agent.tool.invoke';
/** The bound fact that holds the digest of the call's arguments; every permit for a call binds it. */
export const ARGUMENTS_DIGEST_FACT = 'arguments_digest';

export interface McpTool {
  /** The pattern as configured: a tool name, or a prefix ending in `*` (`tickets.*`, `*`). */
  readonly name: string;
  readonly action_type: string;
  /** `id` undefined: `<server>/<the called tool's name>`. */
  readonly target: { readonly type: string; readonly id: string | undefined };
  /** `actor_id` first (the route's source), then the entry's own facts. */
  readonly facts: readonly RouteFact[];
  /** The entry's own mode, else the route's, else the configuration's. */
  readonly mode: ProxyMode;
  /** Never allowed, in either mode's sense: refused in enforce, a would-block in shadow. */
  readonly block: boolean;
}

export interface McpRoute {
  /** Names the MCP server in default targets (`<server>/<tool>`). */
  readonly server: string;
  /** The gate decides calls that bring no permit (inline-config.ts, inline.ts). */
  readonly inline?: McpInline;
  /** `tools/list` also leaves out the tools the policy denies the caller whatever the arguments (tool-policy.ts); inline routes only. */
  readonly hide_denied_tools: boolean;
  /** In configuration order; the first match wins. */
  readonly tools: readonly McpTool[];
}

/** An entry as compiled before the modes are known (config.ts resolves them). */
export type McpRouteDraft = Omit<McpRoute, 'tools'> & { readonly tools: ReadonlyArray<Omit<McpTool, 'mode'> & { readonly mode: ProxyMode | undefined }> };

const TOOL_PATTERN = /^[A-Za-z0-9_./-]*\*?$/;

const ToolShape = z
  .object({
    name: z.string().min(1).max(128).regex(TOOL_PATTERN, { message: 'a tool name (letters, digits, _ . / -), optionally ending in * to match a prefix' }),
    action_type: ActionType.refine((value) => !value.includes('*'), { message: 'a tool names one action type, without *' }).optional(),
    target: z.object({ type: z.string().min(1).max(128), id: z.string().min(1).max(256).optional() }).strict().optional(),
    facts: z.record(z.string(), z.unknown(), { message: 'a mapping from fact name to source' }).optional(),
    mode: z.enum(PROXY_MODES).optional(),
    block: z.boolean().optional(),
  })
  .strict();

const McpShape = z
  .object({
    server: z.string().min(1).max(64).regex(/^[A-Za-z0-9._-]+$/, { message: 'letters, digits, . _ and - (it names the server in targets)' }),
    actor_id: z.unknown().optional(),
    inline: z.unknown().optional(),
    hide_denied_tools: z.boolean().optional(),
    tools: z.array(z.unknown(), { message: 'a list of tools: [{name, action_type?, target?, facts?, mode?, block?}]' }),
  })
  .strict();

/** Facts an entry cannot set: the route or the gate supplies them. */
const SUPPLIED_FACTS: Record<string, string> = {
  actor_id: "comes from the route's mcp.actor_id",
  target: 'set with target: {type, id} on the tool entry',
  [ARGUMENTS_DIGEST_FACT]: 'always bound: the digest of the whole arguments object',
};

/**
 * The `mcp:` mapping compiled, or undefined after reporting every problem. `pattern` is the
 * route's path pattern, which has no parameters to read (a `{path: x}` source is reported).
 */
export function compileMcp(raw: unknown, pattern: PathPattern | undefined, report: Report): McpRouteDraft | undefined {
  const shape = McpShape.safeParse(raw);
  if (!shape.success) for (const issue of shape.error.issues) report(issue.path as Array<string | number>, issue.message);
  if (!isPlainObject(raw) || !Array.isArray(raw.tools)) return undefined;
  let ok = shape.success && pattern !== undefined;
  const actorSource = raw.actor_id ?? { permit: true };
  const inline = raw.inline === undefined ? undefined : compileInline(raw.inline, (path, message) => report(['inline', ...path], message));
  if (raw.inline !== undefined && inline === undefined) ok = false;
  if (raw.inline !== undefined && (!isPlainObject(actorSource) || actorSource.permit !== true || Object.keys(actorSource).length !== 1)) {
    // The gate's own permit names the caller the credential identified; nothing else may.
    report(['actor_id'], 'with inline, the actor is the caller the credential identifies: leave actor_id out');
    ok = false;
  }
  if (raw.hide_denied_tools === true && raw.inline === undefined) {
    // The policy is asked as the caller the credential identifies, with the gate's own key.
    report(['hide_denied_tools'], "needs inline: the gate asks the policy about each tool as the caller inline's actor identifies, with inline's API key");
    ok = false;
  }
  const tools = raw.tools.map((entry, index) => {
    const tool = compileTool(entry, actorSource, pattern, (path, message) => report(path[0] === 'actor_id' ? ['actor_id', ...path.slice(1)] : ['tools', index, ...path], message));
    if (tool === undefined) ok = false;
    return tool;
  });
  if (!ok || !shape.success) return undefined;
  return {
    server: shape.data.server,
    ...(inline !== undefined ? { inline } : {}),
    hide_denied_tools: shape.data.hide_denied_tools ?? false,
    tools: tools.filter((tool) => tool !== undefined),
  };
}

function compileTool(raw: unknown, actorSource: unknown, pattern: PathPattern | undefined, report: Report): McpRouteDraft['tools'][number] | undefined {
  const shape = ToolShape.safeParse(raw);
  if (!shape.success) for (const issue of shape.error.issues) report(issue.path as Array<string | number>, issue.message);
  if (!isPlainObject(raw)) return undefined;
  const given = isPlainObject(raw.facts) ? raw.facts : {};
  let ok = shape.success;
  const sources: Record<string, unknown> = { actor_id: actorSource };
  for (const name of Object.keys(given)) {
    if (Object.hasOwn(SUPPLIED_FACTS, name)) {
      report(['facts', name], SUPPLIED_FACTS[name]!);
      ok = false;
    } else {
      sources[name] = asBodySource(given[name]);
    }
  }
  if (pattern === undefined) return undefined;
  const facts = compileFacts(sources, pattern, (path, message) => report(path[0] === 'actor_id' ? path : ['facts', ...path], message.replace(/\{body: \/json\/pointer\}/, '{argument: /json/pointer}')));
  if (!ok || facts === undefined || !shape.success) return undefined;
  const { name, action_type, target, mode, block } = shape.data;
  return {
    name,
    action_type: action_type ?? DEFAULT_TOOL_ACTION_TYPE,
    target: { type: target?.type ?? 'tool', id: target?.id },
    facts,
    mode,
    block: block ?? false,
  };
}

/** `{argument: /x}` is read from the call's arguments the way `{body: /x}` is read from a body. */
function asBodySource(source: unknown): unknown {
  if (!isPlainObject(source) || !Object.hasOwn(source, 'argument')) return source;
  const { argument, ...rest } = source;
  return Object.hasOwn(rest, 'body') ? source : { ...rest, body: argument };
}

/** The modes resolved: an entry's own, else `routeMode` (the route's, else the configuration's). */
export function resolveToolModes(draft: McpRouteDraft, routeMode: ProxyMode): McpRoute {
  return { ...draft, tools: draft.tools.map((tool) => ({ ...tool, mode: tool.mode ?? routeMode })) };
}

/** The first entry matching `tool` (exactly, or by the prefix before a trailing `*`), or undefined. */
export function toolEntry(route: McpRoute, tool: string): McpTool | undefined {
  for (const entry of route.tools) {
    const name = entry.name;
    if (name.endsWith('*') ? tool.startsWith(name.slice(0, -1)) : tool === name) return entry;
  }
  return undefined;
}
