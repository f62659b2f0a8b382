/**
 * Renders `docs/api.md` from the authority's OpenAPI document (the one `GET /openapi.json`
 * serves): an introduction (base URL, authentication, the error envelope and code catalogue,
 * aliases, rate limits), then each operation with its method and path, aliases, access, request
 * fields, response fields and error statuses, and the component schemas they refer to.
 * test/docs/api-reference.test.ts keeps the committed file equal to this rendering.
 *
 * @example
 *   const markdown = renderApiReference(openApiDocument(app));
 */
import { parseAuthorityConfig } from '../../authority/config.js';
import { permissionsOf } from '../../authority/auth/roles.js';
import { codesWithStatus, ERROR_RESPONSES, PROXY_ONLY_CODES } from '../../authority/openapi/components.js';
import { ERROR_CATALOGUE } from '../../shared/errors.js';
import { SCOPES } from '../../shared/wire/scopes.js';
import { ROLES } from '../../shared/wire/session.js';

/** The command that rewrites docs/api.md (package.json script `docs:api`). */
export const REGENERATE_API_COMMAND = 'npm run docs:api';

type Json = Record<string, any>;

const BASE = 'http://127.0.0.1:7070';

/** Short curl examples for the operations people call first. */
const EXAMPLES: Readonly<Record<string, string>> = {
  evaluate: `curl -s ${BASE}/v1/evaluate -H "Authorization: Bearer $KEY" -H 'Content-Type: application/json' \\
  -d '{"action_type": "payments.wire", "actor_id": "finance-bot",
       "context": {"environment": "production", "amount_usd": 500, "account_code": "OPS-001"}}'`,
  verifyPermit: `curl -s ${BASE}/v1/verify-permit -H "Authorization: Bearer $GATE_KEY" -H 'Content-Type: application/json' \\
  -d '{"permit_token": "'"$PERMIT"'", "action_type": "payments.wire", "actor_id": "finance-bot",
       "context": {"environment": "production", "amount_usd": 500, "account_code": "OPS-001"}}'`,
  resolveApproval: `curl -s -X POST ${BASE}/v1/approvals/$APPROVAL_ID/resolve -H "Authorization: Bearer $APPROVER_KEY" \\
  -H 'Content-Type: application/json' -d '{"decision": "approve", "note": "checked with treasury"}'`,
  accessEvaluation: `curl -s ${BASE}/access/v1/evaluation -H "Authorization: Bearer $KEY" -H 'Content-Type: application/json' \\
  -d '{"subject": {"type": "service", "id": "finance-bot"}, "action": {"name": "payments.wire"},
       "resource": {"type": "payee", "id": "acme-supplies"},
       "context": {"environment": "production", "amount_usd": 500, "account_code": "OPS-001"}}'
# {"decision": true, "context": {"decision": "allow", "reason_codes": ["AMOUNT_WITHIN_LIMIT"], "evaluation_id": "…", …}}`,
  accessEvaluations: `curl -s ${BASE}/access/v1/evaluations -H "Authorization: Bearer $KEY" -H 'Content-Type: application/json' \\
  -d '{"subject": {"type": "service", "id": "finance-bot"}, "action": {"name": "payments.wire"},
       "context": {"environment": "production", "amount_usd": 500, "account_code": "OPS-001"},
       "options": {"evaluations_semantic": "deny_on_first_deny"},
       "evaluations": [{"resource": {"type": "payee", "id": "acme-supplies"}},
                       {"resource": {"type": "payee", "id": "globex-ltd"}}]}'
# {"evaluations": [{"decision": true, "context": {…}}, {"decision": true, "context": {…}}]}`,
  getAuthzenConfiguration: `curl -s ${BASE}/.well-known/authzen-configuration`,
  createApiKey: `curl -s ${BASE}/v1/api-keys -H "Authorization: Bearer $ADMIN_KEY" -H 'Content-Type: application/json' \\
  -d '{"name": "payments gate", "scopes": ["verify:execute"], "allowed_cidrs": ["10.0.0.0/8"]}'`,
  exportAuditBundle: `curl -s -X POST ${BASE}/v1/audit/exports -H "Authorization: Bearer $AUDITOR_KEY" > bundle.json
curl -s ${BASE}/v1/audit/keys -H "Authorization: Bearer $AUDITOR_KEY" > audit-keys.json
countersign audit verify bundle.json --keys audit-keys.json   # picks the key the bundle names`,
};

/** Enumerations longer than this are listed in the notes rather than as the type. */
const ENUM_INLINE = 6;
/** Bounds this large are zod's safe-integer defaults, not constraints worth a note. */
const HUGE = 1e15;

const cell = (text: string): string => text.replace(/\|/g, '\\|').replace(/\n+/g, ' ');
const code = (text: string): string => `\`${text}\``;

function refName(schema: Json): string | null {
  return typeof schema.$ref === 'string' ? (schema.$ref.split('/').pop() as string) : null;
}

/** `1–256 characters`, `at least 1`, `at most 20 items`; nothing for absent or huge bounds. */
function range(min: number | undefined, max: number | undefined, unit: string): string[] {
  const low = min !== undefined && Math.abs(min) < HUGE && !(min === 0 && unit !== '') ? min : undefined;
  const high = max !== undefined && Math.abs(max) < HUGE ? max : undefined;
  const suffix = unit ? ` ${unit}` : '';
  if (low !== undefined && high !== undefined) return [`${low}–${high}${suffix}`];
  if (low !== undefined) return [`at least ${low}${suffix}`];
  if (high !== undefined) return [`at most ${high}${suffix}`];
  return [];
}

/** A compact type for a table cell. */
function typeOf(schema: Json | undefined): string {
  if (!schema || Object.keys(schema).length === 0) return 'any';
  const ref = refName(schema);
  if (ref) return `[${ref}](#${ref.toLowerCase()})`;
  if (schema.const !== undefined) return code(JSON.stringify(schema.const));
  // Long enumerations go to the notes (notesOf); the type cell stays readable.
  if (Array.isArray(schema.enum)) return schema.enum.length > ENUM_INLINE ? String(schema.type ?? 'string') : schema.enum.map((value: unknown) => code(JSON.stringify(value))).join(' or ');
  const union = (schema.anyOf ?? schema.oneOf) as Json[] | undefined;
  if (union) return union.map((branch) => typeOf(branch)).join(' or ');
  if (schema.type === 'array') return `${typeOf(schema.items)}[]`;
  if (Array.isArray(schema.type)) return schema.type.join(' or ');
  if (schema.type === 'string' && schema.format) return `string (${schema.format})`;
  if (schema.type === 'object' && !schema.properties) return 'object';
  return String(schema.type ?? 'any');
}

function notesOf(schema: Json | undefined): string {
  if (!schema) return '';
  const notes: string[] = [];
  if (schema.description) notes.push(schema.description);
  const values = (schema.enum ?? schema.items?.enum) as unknown[] | undefined;
  if (values && values.length > ENUM_INLINE) notes.push(`${schema.type === 'array' ? 'each ' : ''}one of ${values.map((value) => code(String(value))).join(', ')}`);
  notes.push(...range(schema.minLength, schema.maxLength, 'characters'), ...range(schema.minimum, schema.maximum, ''), ...range(schema.minItems, schema.maxItems, 'items'));
  if (schema.default !== undefined) notes.push(`default ${code(JSON.stringify(schema.default))}`);
  if (typeof schema.pattern === 'string' && schema.pattern.length <= 60) notes.push(`pattern ${code(schema.pattern)}`);
  return notes.join('; ');
}

/** Field rows of an object schema, nested objects flattened to `a.b` (components stay links). */
function fieldRows(schema: Json, prefix = '', depth = 0): string[] {
  const properties = (schema.properties ?? {}) as Record<string, Json>;
  const required = new Set<string>((schema.required as string[] | undefined) ?? []);
  const rows: string[] = [];
  for (const [name, property] of Object.entries(properties)) {
    const field = `${prefix}${name}`;
    rows.push(`| ${code(field)} | ${cell(typeOf(property))} | ${required.has(name) ? 'yes' : 'no'} | ${cell(notesOf(property))} |`);
    if (property.type === 'object' && property.properties && depth < 2) rows.push(...fieldRows(property, `${field}.`, depth + 1));
    if (property.type === 'array' && property.items?.type === 'object' && property.items.properties && depth < 2) rows.push(...fieldRows(property.items, `${field}[].`, depth + 1));
  }
  if (schema.additionalProperties && typeof schema.additionalProperties === 'object' && Object.keys(schema.additionalProperties).length === 0 && Object.keys(properties).length > 0) {
    rows.push(`| ${code(`${prefix}…`)} | any | no | further fields are accepted |`);
  }
  return rows;
}

/** A schema as one or more field tables (a union gives one table per form). */
function schemaTables(schema: Json | undefined, what: string): string[] {
  if (!schema) return [];
  const header = ['| Field | Type | Required | Notes |', '|---|---|---|---|'];
  const ref = refName(schema);
  if (ref) return [`${what}: [${ref}](#${ref.toLowerCase()}).`, ''];
  if (schema.type === 'array') return [`${what}: an array of ${typeOf(schema.items)}.`, ''];
  const union = (schema.anyOf ?? schema.oneOf) as Json[] | undefined;
  if (union) {
    const lines = [`${what}, one of ${union.length} forms:`, ''];
    union.forEach((branch, index) => {
      const branchRef = refName(branch);
      if (branchRef) {
        lines.push(`- [${branchRef}](#${branchRef.toLowerCase()})`, '');
        return;
      }
      // A form told apart by a constant field (webhooks' `action`) is named by it.
      const constant = (property: Json): unknown => property.const ?? (property.enum?.length === 1 ? property.enum[0] : undefined);
      const tag = Object.entries((branch.properties ?? {}) as Record<string, Json>).find(([, property]) => constant(property) !== undefined);
      lines.push(tag ? `Form ${code(`${tag[0]}: ${JSON.stringify(constant(tag[1]))}`)}:` : `Form ${index + 1}:`, '', ...header, ...fieldRows(branch), '');
    });
    return lines;
  }
  if (!schema.properties) return [`${what}: ${typeOf(schema)}.`, ''];
  return [`${what}:`, '', ...header, ...fieldRows(schema), ''];
}

function parameterTable(parameters: Json[] | undefined): string[] {
  if (!parameters || parameters.length === 0) return [];
  return [
    '| Parameter | In | Type | Required | Notes |',
    '|---|---|---|---|---|',
    ...parameters.map((p) => `| ${code(p.name)} | ${p.in} | ${cell(typeOf(p.schema))} | ${p.required ? 'yes' : 'no'} | ${cell(notesOf(p.schema))} |`),
    '',
  ];
}

/** One line naming every error status, then a bullet for each whose meaning is particular to the operation. */
function errorLines(responses: Record<string, Json>): string[] {
  const statuses = Object.keys(responses).filter((status) => !status.startsWith('2'));
  if (statuses.length === 0) return [];
  const particular = statuses
    .filter((status) => refName(responses[status]!) === null || responses[status]!.description)
    .map((status) => `- **${status}**: ${responses[status]!.description}`);
  return [`Errors: ${statuses.join(', ')} (see [error statuses](#error-statuses)).`, '', ...particular, ...(particular.length > 0 ? [''] : [])];
}

function renderOperation(document: Json, method: string, path: string, operation: Json): string[] {
  const lines = [`### ${operation.summary}`, '', `${code(`${method.toUpperCase()} ${path}`)}`, ''];
  lines.push(...String(operation.description).split('\n'), '');
  lines.push(...parameterTable(operation.parameters));
  const body = operation.requestBody?.content?.['application/json']?.schema as Json | undefined;
  lines.push(...schemaTables(body, operation.requestBody?.required === false ? 'Request body (optional)' : 'Request body'));
  for (const [status, response] of Object.entries(operation.responses as Record<string, Json>)) {
    if (!status.startsWith('2')) continue;
    const schema = response.content?.['application/json']?.schema as Json | undefined;
    lines.push(...schemaTables(schema, `Response ${status}: ${response.description.replace(/\.$/, '')}`));
  }
  lines.push(...errorLines(operation.responses));
  const example = EXAMPLES[operation.operationId as string];
  if (example) lines.push('Example:', '', '```sh', example, '```', '');
  return lines;
}

function introduction(document: Json): string[] {
  const defaults = parseAuthorityConfig({});
  const plans = defaults.rate_limits.plans;
  const aliasRows = Object.entries(document.paths as Json).flatMap(([path, item]) =>
    Object.entries(item as Json)
      .filter(([, op]) => (op as Json)['x-aliases'].length > 0)
      .map(([method, op]) => `| ${code(`${method.toUpperCase()} ${path}`)} | ${(op as Json)['x-aliases'].map(code).join(', ')} |`),
  );
  return [
    '# API reference',
    '',
    `<!-- Generated from the OpenAPI document by \`${REGENERATE_API_COMMAND}\`; edit authority/openapi/ or the wire schemas, not this file. -->`,
    '',
    'The authority\'s HTTP API, as described by its OpenAPI 3.1 document. A running authority serves that document at `GET /openapi.json` (no credential needed); feed it to a client generator or an API explorer.',
    '',
    '## Conventions',
    '',
    `**Base URL.** ${code(BASE)} with the default configuration (\`listen\` in \`config/authority.yaml\`). Request and response bodies are JSON (\`Content-Type: application/json\`, at most 64 KiB). Every answer carries \`X-Request-ID\`: yours when you send a sane one, else a fresh UUID.`,
    '',
    '**Authentication.** Send `Authorization: Bearer <credential>`, where the credential is an API key (`ask_live_…` or `ask_test_…`) or a user JWT from the configured identity provider. The deprecated `X-Service-Key: <API key>` header still works while `auth.x_service_key.enabled` is true, and its answers carry `Deprecation: true`. Only `/healthz`, `/readyz`, `/openapi.json` and the AuthZEN discovery document `/.well-known/authzen-configuration` need no credential. Everything else is confined to the credential\'s organization: another organization\'s resources are not found (404).',
    '',
    'Each operation names the permission it needs (**Access**); one of those listed suffices. An API key holds the scopes it was created with; a user token holds the permissions of its role:',
    '',
    `| Permission | ${ROLES.join(' | ')} |`,
    `|---|${ROLES.map(() => '---').join('|')}|`,
    ...SCOPES.map((scope) => `| ${code(scope)} | ${ROLES.map((role) => (permissionsOf(role).has(scope) ? 'yes' : '')).join(' | ')} |`),
    '',
    '**Errors.** Every non-2xx answer is the error envelope:',
    '',
    '```json',
    '{ "error": "forbidden", "message": "this credential lacks the permission keys:write", "status": 403, "request_id": "5f0c…" }',
    '```',
    '',
    '`error` is a stable code and always comes with the same `status`; `message` is for people. A 400 adds `details` (`[{path, message, line?, column?}]`), a 429 `unavailable` adds `retry_after_ms`, and some refusals add a machine `reason`. 429 and 503 answers carry `Retry-After` (seconds). Any path answers 404 `not_found` when unknown and 405 `method_not_allowed` (with `Allow`) for a wrong method.',
    '',
    '| Code | Status | Meaning |',
    '|---|---|---|',
    ...(Object.entries(ERROR_CATALOGUE) as Array<[string, { status: number; message: string }]>).map(([name, entry]) => `| ${code(name)} | ${entry.status} | ${entry.message} |`),
    '',
    `The proxy answers with the same envelope; ${[...PROXY_ONLY_CODES].map(code).join(', ')} come from the proxy, never from the authority.`,
    '',
    '### Error statuses',
    '',
    'What each error status means for any operation that lists it; an operation adds its own particular cases.',
    '',
    '| Status | Codes | When |',
    '|---|---|---|',
    ...Object.entries(ERROR_RESPONSES).map(([status, name]) => {
      const description = String((document.components.responses[name] as Json).description).replace(/ Error codes?: .*$/, '');
      return `| ${status} | ${codesWithStatus(Number(status)).map(code).join(', ')} | ${cell(description)} |`;
    }),
    '',
    '**Aliases.** Each operation has one slash path. Operations that the SDK calls in function style are served at those paths too, with the same request, answer and access; the OpenAPI document lists them in `x-aliases`.',
    '',
    '| Operation | Also served at |',
    '|---|---|',
    ...aliasRows,
    '',
    '**The AtlaSent SDKs.** The public AtlaSent SDKs (`@atlasent/sdk` for TypeScript, `atlasent` for Python) work against this API as they are: wherever a permit id goes in a path (get, revoke, proof, verify) the permit token they pass instead is accepted, once its signature verifies; `POST /v1/permits/{id}/verify` verifies and consumes the token like `POST /v1/verify-permit` and never calls a bare id valid; the deprecated `POST /v1-revoke-permit` still revokes, with `Deprecation: true`; evaluate takes their legacy `{action, agent}` names and `?include=constraint_trace` (the preflight); `POST /v1-evaluate-stream` answers the streaming protect as Server-Sent Events; audit filters take their `evaluate.allow`-style type names. Their calls to operations this authority does not have (SCIM, HITL, governance, licensing and the like) are answered 404.',
    '',
    `**Rate limits.** Each organization has an \`api\` bucket sized by its plan (per minute: ${Object.entries(plans).map(([plan, bucket]) => `${plan} ${bucket.per_minute}`).join(', ')}) and an \`evaluate\` bucket (${defaults.rate_limits.evaluate.per_minute} per minute) for evaluate; both are configurable per organization. Answers of authenticated requests carry \`X-RateLimit-Limit\`, \`X-RateLimit-Remaining\` and \`X-RateLimit-Reset\`. Over the limit, evaluate and verify-permit answer 429 \`unavailable\` with \`retry_after_ms\`, other operations 429 \`rate_limited\`; both carry \`Retry-After\`. Requests refused for their credential or permission are charged to the client address instead (${defaults.rate_limits.unauthenticated.per_minute} per minute by default). Do not retry a 429 without waiting.`,
    '',
    '**Pagination.** List operations take `limit` and `cursor`; pass the previous answer\'s `next_cursor` (null on the last page) as `cursor`. Escalations return the next cursor in the `X-Next-Cursor` header.',
    '',
  ];
}

/** GitHub's anchor of a heading. */
function slug(heading: string): string {
  return heading
    .toLowerCase()
    .replace(/[^\p{L}\p{N}\s_-]/gu, '')
    .replace(/\s/g, '-');
}

/** The Markdown of docs/api.md for `document`. */
export function renderApiReference(document: Json): string {
  const tags = document.tags as Array<{ name: string; description: string }>;
  const operations = Object.entries(document.paths as Json).flatMap(([path, item]) =>
    Object.entries(item as Json).map(([method, operation]) => ({ method, path, operation: operation as Json })),
  );
  const [title, blank, generated, blank2, about, ...rest] = introduction(document);
  const contents = tags.flatMap((tag) => {
    const tagged = operations.filter(({ operation }) => operation.tags?.[0] === tag.name);
    if (tagged.length === 0) return [];
    return [`- [${tag.name}](#${slug(tag.name)}): ${tagged.map(({ method, path, operation }) => `[${code(`${method.toUpperCase()} ${path}`)}](#${slug(operation.summary)})`).join(', ')}`];
  });
  const lines = [title!, blank!, generated!, blank2!, about!, '', '[Conventions](#conventions) · [Schemas](#schemas)', '', ...contents, '', ...rest];
  for (const tag of tags) {
    const tagged = operations.filter(({ operation }) => operation.tags?.[0] === tag.name);
    if (tagged.length === 0) continue;
    lines.push(`## ${tag.name}`, '', tag.description, '');
    for (const { method, path, operation } of tagged) lines.push(...renderOperation(document, method, path, operation));
  }
  lines.push('## Schemas', '', 'The objects that several operations share.', '');
  for (const [name, schema] of Object.entries(document.components.schemas as Record<string, Json>)) {
    lines.push(`### ${name}`, '');
    if (schema.description) lines.push(String(schema.description), '');
    lines.push(...schemaTables({ ...schema, description: undefined }, 'Fields'));
  }
  return `${lines.join('\n').replace(/\n{3,}/g, '\n\n').trimEnd()}\n`;
}
