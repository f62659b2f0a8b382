/**
 * The bound facts of one `tools/call`: the tool entry's facts read from the call's `arguments`
 * (facts.ts, as a body's), the target (`{type: tool, id: <server>/<tool>}` unless the entry sets
 * it), and always `arguments_digest`: the SHA-256 of the canonical JSON (RFC 8785) of the whole
 * `arguments` object, in lowercase hex (`{}` when the call has none). A permit for the call must
 * bind the digest (the gate requires it), so it covers exactly these arguments.
 *
 * @example
 *   argumentsDigest({ b: 1, a: 'x' }); // sha256 of '{"a":"x","b":1}', 64 hex characters
 *   const derived = callFacts(route.mcp, entry, 'issue_refund', { amount_usd: 40 }, req.headers, query);
 *   // { ok: true, actorFromPermit: true, facts: { action_type: 'agent.tool.invoke', amount_usd: 40,
 *   //   target: { type: 'tool', id: 'helpdesk/issue_refund' }, arguments_digest: '9f…' } }
 */
import { hash } from 'node:crypto';
import type { IncomingHttpHeaders } from 'node:http';
import { canonicalJson } from '../../shared/canonical-json.js';
import { normalizeBoundFact } from '../../shared/permits/binding.js';
import { deriveFacts, type DerivedFacts } from '../facts.js';
import { ARGUMENTS_DIGEST_FACT, type McpRoute, type McpTool } from './config.js';

/** Lowercase hex SHA-256 of the canonical JSON of `args`; throws when they have no canonical form. */
export function argumentsDigest(args: Record<string, unknown>): string {
  return hash('sha256', canonicalJson(args), 'hex');
}

/** The target a call of `tool` binds, normalized as a bound fact; throws when it has no canonical form. */
export function toolTarget(route: McpRoute, entry: McpTool, tool: string): { type: string; id: string } {
  return normalizeBoundFact('target', { type: entry.target.type, id: entry.target.id ?? `${route.server}/${tool}` }) as { type: string; id: string };
}

/** Never throws: a fact the call does not carry, or cannot carry canonically, is `{ok: false}`. */
export function callFacts(
  route: McpRoute,
  entry: McpTool,
  tool: string,
  args: Record<string, unknown>,
  headers: IncomingHttpHeaders,
  query: URLSearchParams,
): DerivedFacts {
  const derived = deriveFacts(entry, { params: {}, query, headers, body: args });
  if (!derived.ok) return derived;
  try {
    derived.facts.target = toolTarget(route, entry, tool);
  } catch (error) {
    return { ok: false, missing: 'target', reason: (error as Error).message };
  }
  try {
    derived.facts[ARGUMENTS_DIGEST_FACT] = argumentsDigest(args);
  } catch (error) {
    return { ok: false, missing: ARGUMENTS_DIGEST_FACT, reason: `the arguments have no canonical JSON form: ${(error as Error).message}` };
  }
  return derived;
}
