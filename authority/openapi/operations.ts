/**
 * What the OpenAPI document says about each operation that its route's zod schemas cannot:
 * operation id, summary, prose, the errors particular to it (404, 409) and, where a route
 * validates by hand or answers without a response schema, the wire schemas that describe it.
 * Keyed by the canonical route (`METHOD url`, fastify's `:param` form); aliases are derived
 * (aliases.ts) and never listed here. Who may call an operation comes from the route's
 * `config.access`, not from here, so the document cannot drift from the guard.
 *
 * @example
 *   OPERATIONS['POST /v1/evaluate'].operationId; // 'evaluate'
 */
import { z } from 'zod';
import { EvaluateAgentRequest, EvaluateLegacyRequest, EvaluateWireRequest } from '../../shared/wire/evaluate.js';
import { HealthResponse, ReadinessResponse } from '../../shared/wire/health.js';
import { PermitProofResponse } from '../../shared/wire/permits.js';
import { AUTHZEN_OPERATIONS } from './authzen-operations.js';
import { ACTOR_FORBIDDEN } from './components.js';
import { SDK_OPERATIONS } from './sdk-operations.js';

export const TAGS = {
  Evaluate: 'Decide whether an action may happen; an allow carries a signed, single-use permit.',
  AuthZEN: [
    'The OpenID AuthZEN Authorization API 1.0, for policy enforcement points that speak it (API gateways, identity providers, service meshes, agent gateways): access evaluation, batches of them, subject and action search, and the discovery document. Each evaluation is decided by the same core as `POST /v1/evaluate`: the organization\'s policy, presented approvals, the approval request a `hold` opens and the escalation an `escalate` opens, `X-Request-ID` idempotency, the `evaluate` rate-limit bucket and the audit log (`evaluation.decided` with `via: "authzen"` and `permit_status: "not_issued"`).',
    '',
    '**It never issues a permit.** The answer is a decision, not an executable artifact, and carries no token. An action whose gate needs a permit is evaluated with `POST /v1/evaluate`.',
    '',
    'As AuthZEN asks, keys this authority does not know are ignored wherever they appear (top level, entities, `options`, batch entries); the bounded-input rules (depth, finite numbers, well-formed text) still apply to the whole body. How a request maps onto an evaluation:',
    '',
    '| AuthZEN | evaluate |',
    '|---|---|',
    '| `subject.id` | `actor_id`; an id longer than 256 characters becomes `sha256:<hex digest of the id>` (the full id stays in `context.subject.id`) |',
    '| `action.name` | `action_type`: a name in `authzen.action_names` (configuration) → the type given there; a name that already is an action type (dotted lowercase) → itself; an HTTP method → `http.<method>` (`GET` → `http.get`; the prefix is `authzen.http_method_prefix`); any other name → `authzen.<slug>.<digest>` (the name lowercased with other characters than `a-z 0-9 _ -` as `_`, then 12 hex digits of its SHA-256), so two names never share a type and `authzen.<slug>.*` matches names differing only in case or punctuation |',
    '| `resource.type`, `resource.id` | `context.target` (`{type, id}`): a bound fact, so the decision and any approval it opens are for this resource only |',
    '| `subject`, `action`, `resource` as sent (`properties` included) | `context.subject`, `context.action`, `context.resource`, for policy conditions |',
    '| `context` | the rest of `context`, key by key: `environment`, `amount_usd`, `account_code` and `approvals` when their values have evaluate\'s types, and any other key as sent |',
    '',
    'The AuthZEN `context` is free-form and never refused for its keys. A key the entities fill (`subject`, `action`, `resource`, `target`), the key `authzen_context`, and a key of evaluate\'s whose value has another type (`environment` as an object, say) go under `context.authzen_context.<key>` as sent: nothing in the context can pose as the entities or bind another resource.',
    '',
    'The answer: `decision` is `true` only when Countersign decides `allow`; `deny`, `hold` and `escalate` are `false`. Its `context` carries Countersign\'s `decision`, `reason_codes`, the `action_type` decided, `remediation` (when not allowed), `risk_score`, `mode`, `human_approval_status`, `evaluation_id` and `request_id`, and the `approval_request_id` a hold opened or the `escalation_id` an escalate opened. Once that is approved, send the same evaluation with its id in `context.approvals` (a fresh `X-Request-ID`): the fresh decision is `true`. An approval backs AuthZEN decisions until it expires (no permit uses it up) and still backs one permit on `POST /v1/evaluate`.',
    '',
    '`X-Request-ID` is echoed on every answer and is the idempotency key, as on evaluate: the same question under the same value from the same credential returns the recorded decision. Entry `i` of a batch is recorded under `<X-Request-ID>/<i>`. Unlike evaluate, another question under a value already used is not refused: enforcement points often pass the X-Request-ID of the request they guard on to every check they make for it, so that question is decided and recorded under `<X-Request-ID>#<digest of the question>` (idempotent in turn), and `context.request_id` says so. A value used by another credential is 409 only when that credential also asked this very question under it.',
    '',
    'Errors are the error envelope (`{error, message, status, request_id}`), never a 200: 400 with `details` for a malformed body or one that is not JSON (whatever its `Content-Type`), 401 (with `WWW-Authenticate: Bearer`), 403, 429 and 503 as on evaluate. A `deny` is a 200 with `decision: false`. Resource search is not offered (not advertised, 404): a policy names action types and actors, never the resources they act on, so no resource can be enumerated.',
  ].join('\n'),
  Permits: 'Verify permits at the gate, list and revoke them, prove what happened, and report effects.',
  Approvals: 'Approval requests opened by a `hold` decision, resolved by a person.',
  Escalations: 'Human-in-the-loop escalations with quorums and approver tiers (self-hosted deployments only).',
  Policies: 'The organization\'s policy: read, replace and validate.',
  'API keys': 'Keys for machines, confined to the caller\'s organization and never wider than their creator.',
  Identity: 'Who the presented credential is.',
  Webhooks: 'Webhook subscriptions and their deliveries, one endpoint with the operation chosen by `action`.',
  Audit: 'The tamper-evident audit log: pages of events, signed export bundles, and the keys that verify them.',
  Service: 'Health probes and this document; no credential needed.',
} as const;
export type Tag = keyof typeof TAGS;

export interface OperationDoc {
  operationId: string;
  summary: string;
  tag: Tag;
  /** Markdown; the scope, aliases and rate limit are appended from the route itself. */
  description: string;
  /** The meaning of the success answer. */
  success: string;
  /** Error statuses particular to this operation, beyond those every guarded route can answer. */
  errors?: Readonly<Partial<Record<403 | 404 | 409 | 503, string>>>;
  /** Document-only schemas for a route that validates its body by hand or has no response schema. */
  body?: z.ZodType;
  responses?: Readonly<Record<number, z.ZodType>>;
  /** Response headers of the success answer beyond the rate-limit ones. */
  successHeaders?: Readonly<Record<string, string>>;
  /** A body that is not JSON is 400 here, not the API's usual 415 (AuthZEN asks so). */
  notJsonIs400?: true;
  /** A deprecated operation (OpenAPI `deprecated: true`); say what replaces it in the description. */
  deprecated?: true;
  /** The media type of the success answer when it is not JSON (`text/event-stream`). */
  successMediaType?: string;
}

/** One JWK as published; extra members of a key type pass through. */
const PublishedJwk = z.looseObject({
  kty: z.string(),
  kid: z.string(),
  crv: z.string().optional(),
  x: z.string().optional(),
  alg: z.string().optional(),
  use: z.string().optional(),
});

const OpenApiDocument = z.looseObject({ openapi: z.string(), info: z.looseObject({ title: z.string(), version: z.string() }), paths: z.record(z.string(), z.unknown()) });

export const OPERATIONS: Readonly<Record<string, OperationDoc>> = {
  'GET /healthz': {
    operationId: 'getHealth',
    summary: 'Liveness: the process answers',
    tag: 'Service',
    description: 'Answers 200 while the process runs; it checks no dependency. Also served on the admin port.',
    success: 'The process is up.',
    responses: { 200: HealthResponse },
  },
  'GET /readyz': {
    operationId: 'getReadiness',
    summary: 'Readiness: the database and the shared store answer',
    tag: 'Service',
    description: 'Answers 200 when the database and the shared store (replay store, rate limits) both answer within 2 s, else 503 with the same body naming the check that failed. Also served on the admin port.',
    success: 'Every dependency answers.',
    errors: { 503: 'A dependency does not answer; the body (not the error envelope) names which.' },
    responses: { 200: ReadinessResponse, 503: ReadinessResponse },
  },
  ...AUTHZEN_OPERATIONS,
  'GET /openapi.json': {
    operationId: 'getOpenApiDocument',
    summary: 'This OpenAPI 3.1 document',
    tag: 'Service',
    description: 'The OpenAPI 3.1 description of this authority, generated from the wire schemas it validates with. It describes the operations this deployment serves (escalations only when self-hosted).',
    success: 'The OpenAPI document.',
    responses: { 200: OpenApiDocument },
  },
  'GET /v1/session': {
    operationId: 'getSession',
    summary: 'The user behind a user token',
    tag: 'Identity',
    description: 'For user JWTs only: the user, organization, role and the permissions the role grants. An API key gets 403 and is pointed to `GET /v1/api-key-self`.',
    success: 'The session of the user token.',
  },
  'GET /v1/api-key-self': {
    operationId: 'getApiKeySelf',
    summary: 'The API key presented',
    tag: 'Identity',
    description: 'For API keys only: the key id, its organization and its scopes. A user token gets 403 and is pointed to `GET /v1/session`.',
    success: 'The presented API key.',
  },
  'POST /v1/api-keys': {
    operationId: 'createApiKey',
    summary: 'Create an API key',
    tag: 'API keys',
    description:
      'Creates a key in the caller\'s organization. A key gets only scopes its creator holds (403 otherwise); a key created by a key inherits the creator\'s address allowlist, allowed actors and expiry, narrowed by what the request asks (403 for anything wider). `allowed_actors` lists the actor ids the key may ask decisions for: exact ids, prefixes ending in `*` (`agent:*`), or `*` for any; without it the key speaks for any actor (or, made by a key, for its creator\'s). A key restricted to `agent:*` may give `agent:billing*` or `agent:x`, never `*` or `finance-bot`. An `expires_at` that is not in the future is refused (400). The plaintext `secret` is in this answer only; only its hash is stored.',
    success: 'The key and its secret, shown once.',
  },
  'GET /v1/api-keys': {
    operationId: 'listApiKeys',
    summary: 'List API keys',
    tag: 'API keys',
    description: 'Every key of the caller\'s organization, revoked ones included, without secrets.',
    success: 'The organization\'s keys.',
  },
  'POST /v1/api-keys/:id/revoke': {
    operationId: 'revokeApiKey',
    summary: 'Revoke an API key',
    tag: 'API keys',
    description: 'Revokes a key at once. A credential cannot revoke a key holding scopes it lacks (403), so `keys:write` alone cannot switch off the admin key.',
    success: 'The revoked key.',
    errors: { 404: 'No such key in this organization.' },
  },
  'GET /v1/policies': {
    operationId: 'getPolicy',
    summary: 'The current policy and its versions',
    tag: 'Policies',
    description: 'The organization\'s current policy version (source and parsed document) and the list of every version.',
    success: 'The current policy (null before the first one) and the version history.',
  },
  'PUT /v1/policies': {
    operationId: 'putPolicy',
    summary: 'Replace the policy with a new version',
    tag: 'Policies',
    description:
      'Stores a new policy version, sent as text (`source`, YAML or JSON) or as a JSON object (`document`), and makes it current; audited as `policy.updated`. An invalid policy is 400 with each problem\'s path, line and column in `details`.',
    success: 'The new current policy and the version history.',
  },
  'POST /v1/policies/validate': {
    operationId: 'validatePolicy',
    summary: 'Validate a policy without storing it',
    tag: 'Policies',
    description: 'Compiles the submitted policy and reports every problem with its position; nothing is stored.',
    success: 'Whether the policy is valid, and its errors.',
  },
  'POST /v1/evaluate': {
    operationId: 'evaluate',
    summary: 'Evaluate an action',
    tag: 'Evaluate',
    description:
      'Decides an action under the organization\'s policy: `allow` (with a signed, single-use `permit_token` bound to the facts), `deny`, `hold` (opens an approval request, `approval_request_id`) or `escalate` (opens an escalation, `escalation_id`). The body is the wire form (`action_type`, `actor_id`, `context`), the agent helper form (`actor`, `action`, `target`, `context`) or the SDK\'s legacy names (`action` and `agent` as strings, `context`; other keys such as its `api_key` are ignored). A repeated `request_id` returns the original decision; `shadow: true` decides without issuing a permit; `reuse_approvals: true` makes a hold or escalate name the pending approval already opened for exactly this action by the same requester instead of opening another, and applies an approved, unused one as if named in `context.approvals`. `?include=constraint_trace` (the SDK\'s preflight) adds `constraint_trace`: every rule the policy considered, in order, whether it matched, and its condition (the request is then explained, as with `explain: true`). Every decision is in the audit log before the answer leaves (503 `audit_unavailable` otherwise, and nothing was decided).',
    success: 'The decision, its risk envelope and reasons, and a permit on allow.',
    errors: { 403: ACTOR_FORBIDDEN, 409: 'The `request_id` was used for a different request or by another credential.' },
    body: z.union([EvaluateWireRequest, EvaluateAgentRequest, EvaluateLegacyRequest]),
  },
  'GET /v1/permit-keys': {
    operationId: 'getPermitKeys',
    summary: 'The public keys that verify permits (JWKS)',
    tag: 'Permits',
    description: 'The JSON Web Key Set gates verify permit signatures with. A key is published well before it signs; cache for the `Cache-Control` max-age.',
    success: 'The key set.',
    responses: { 200: z.object({ keys: z.array(PublishedJwk) }) },
    successHeaders: { 'Cache-Control': 'How long the key set may be cached (`max-age=60`).' },
  },
  'GET /v1/permits': {
    operationId: 'listPermits',
    summary: 'List permits',
    tag: 'Permits',
    description: 'Permits of the caller\'s organization, newest first, filtered by status, actor and action type; pass `next_cursor` as `cursor` for the next page.',
    success: 'A page of permits.',
  },
  'GET /v1/permits/:id': {
    operationId: 'getPermit',
    summary: 'Get a permit',
    tag: 'Permits',
    description: 'One permit record with its status (`issued`, `consumed`, `revoked`, `expired`) and bound facts. `:id` is the permit id or the permit token itself (verified with the permit keys before its `jti` is used; a token that does not verify is 400).',
    success: 'The permit.',
    errors: { 404: 'No such permit in this organization.' },
  },
  'POST /v1/permits/:id/revoke': {
    operationId: 'revokePermit',
    summary: 'Revoke a permit',
    tag: 'Permits',
    description: 'Revokes an issued permit so no gate accepts it any more (revoking a revoked permit answers it again); the shared store learns of it before the answer (503 and nothing changed if it cannot). The body is optional: none, `{}`, or `{"reason": …}`. `:id` is the permit id or the permit token itself (verified with the permit keys before its `jti` is used; a token that does not verify is 400).',
    success: 'The revoked permit.',
    errors: { 404: 'No such permit in this organization.', 409: 'The permit was consumed or has expired.' },
  },
  'GET /v1/permits/:id/proof': {
    operationId: 'getPermitProof',
    summary: 'Proof of a permit\'s story',
    tag: 'Permits',
    description: 'The permit with the audit events of its evaluation and of the permit itself (issued, verified, consumed, effects), in chain order, and the latest signed checkpoint of the organization\'s chain. `:id` is the permit id or the permit token itself.',
    success: 'The permit, its audit events and the latest checkpoint.',
    errors: { 404: 'No such permit in this organization.' },
    responses: { 200: PermitProofResponse },
  },
  'POST /v1/verify-permit': {
    operationId: 'verifyPermit',
    summary: 'Verify and consume a permit',
    tag: 'Permits',
    description:
      'A gate\'s check before it executes an action: verifies the permit\'s signature, issuer, audience, organization, expiry and binding to the facts given (`context` for a full binding, else `action_type`/`actor_id` for a partial one), and consumes it once in the shared store. Always 200 with a verdict: `valid: false` carries `verify_error_code` and `reason`. Every verification is in the audit log before the answer (503 `audit_unavailable` otherwise: do not proceed).',
    success: 'The verdict.',
  },
  'POST /v1/effects': {
    operationId: 'reportEffect',
    summary: 'Report what a permitted action did',
    tag: 'Permits',
    description: 'The protected system records the effect of an action taken under a permit (succeeded, failed, partial); appended to the audit chain as `effect.reported`.',
    success: 'The recorded effect and its place in the audit chain.',
    errors: { 404: 'No such permit in this organization.' },
  },
  'GET /v1/approvals': {
    operationId: 'listApprovals',
    summary: 'List approval requests',
    tag: 'Approvals',
    description: 'Approval requests of the caller\'s organization, newest first, optionally by status; pass `next_cursor` as `cursor` for the next page.',
    success: 'A page of approval requests.',
  },
  'GET /v1/approvals/:id': {
    operationId: 'getApproval',
    summary: 'Get an approval request',
    tag: 'Approvals',
    description: 'One approval request. Another organization\'s request is 404.',
    success: 'The approval request.',
    errors: { 404: 'No such approval request in this organization.' },
  },
  'POST /v1/approvals/:id/resolve': {
    operationId: 'resolveApproval',
    summary: 'Approve or reject an approval request',
    tag: 'Approvals',
    description:
      'Approves or rejects a pending request. The identity that asked for the held action cannot resolve it (403). After approval, the caller evaluates again with the request id in `context.approvals`, which issues one permit.',
    success: 'The resolved approval request.',
    errors: { 404: 'No such approval request in this organization.', 409: 'The request is no longer pending.' },
  },
  'POST /v1/escalations': {
    operationId: 'createEscalation',
    summary: 'Create an escalation',
    tag: 'Escalations',
    description: 'Opens an escalation for an agent\'s proposed action, with its quorum, approver tiers and timeouts. One below the organization\'s auto-approve threshold is `auto_approved` at once. An API key may open escalations only for agents its `allowed_actors` match.',
    success: 'The escalation.',
    errors: { 403: ACTOR_FORBIDDEN },
  },
  'GET /v1/escalations': {
    operationId: 'listEscalations',
    summary: 'List escalations',
    tag: 'Escalations',
    description: 'Escalations of the caller\'s organization, newest first, with due timeouts applied. When there are more, the `X-Next-Cursor` header holds the `cursor` of the next page.',
    success: 'A page of escalations.',
    successHeaders: { 'X-Next-Cursor': 'The `cursor` of the next page; absent on the last page.' },
  },
  'GET /v1/escalations/:id': {
    operationId: 'getEscalation',
    summary: 'Get an escalation',
    tag: 'Escalations',
    description: 'One escalation with its votes and quorum progress.',
    success: 'The escalation, its votes and quorum progress.',
    errors: { 404: 'No such escalation in this organization.' },
  },
  'POST /v1/escalations/:id/respond': {
    operationId: 'respondToEscalation',
    summary: 'Vote on an escalation',
    tag: 'Escalations',
    description: 'Casts an approve or reject vote. The requester cannot vote (403); a quorum counts each person once, whichever of their credentials votes.',
    success: 'The escalation after the vote, the vote and quorum progress.',
    errors: { 404: 'No such escalation in this organization.', 409: 'The escalation is final, or this identity has already voted.' },
  },
  'POST /v1/webhooks': {
    operationId: 'manageWebhooks',
    summary: 'Manage webhook subscriptions and deliveries',
    tag: 'Webhooks',
    description:
      'One endpoint; `action` chooses the operation: `create`, `list`, `update`, `delete`, `rotate_secret`, `test`, `list_deliveries`, `replay`. Every action answers 200. The signing secret is in the answers to `create` and `rotate_secret` only. A URL without http(s), or naming a private address unless the configuration allows it, is 400.',
    success: 'The answer of the action.',
    errors: { 404: 'No such subscription or delivery in this organization.', 409: 'A duplicate subscription name, or a delivery that cannot be replayed now.' },
  },
  'GET /v1/audit/events': {
    operationId: 'listAuditEvents',
    summary: 'List audit events',
    tag: 'Audit',
    description: [
      'Events of the caller\'s organization in chain order, filtered by type, actor, request, resource and time; pass `next_cursor` as `cursor` for the next page. Events are wire-identical with what the hash chain covers.',
      '',
      'A type filter (`type` or `types`) also takes the SDK\'s names for evaluations, alone or mixed with ours:',
      '',
      '| SDK name | selects |',
      '|---|---|',
      '| `evaluate.allow` | `evaluation.decided` with `decision: "allow"` |',
      '| `evaluate.deny` | `evaluation.decided` with `decision: "deny"` |',
      '| `evaluate.hold` | `evaluation.decided` with `decision: "hold"` |',
      '| `evaluate.escalate` | `evaluation.decided` with `decision: "escalate"` |',
    ].join('\n'),
    success: 'A page of audit events.',
  },
  'POST /v1/audit/exports': {
    operationId: 'exportAuditBundle',
    summary: 'Export a signed audit bundle',
    tag: 'Audit',
    description: 'A signed bundle of a sequence range of the chain (both ends inclusive; no body or `{}` exports the whole chain), verifiable offline with `countersign audit verify` and the keys of `GET /v1/audit/keys`. The SDK\'s filters are taken too: `types` (a comma list, the SDK\'s `evaluate.*` names included, as on the list), `actor_id`, `from` and `to` (occurred_at, `to` exclusive). A bundle stays a gap-free piece of the chain, so that it verifies: with filters it runs from the first matching event to the last (within the sequence range, if one is given too), the events between them included; keep the matching ones by their `type` and `decision`. When nothing matches, the bundle is empty.',
    success: 'The signed bundle; its bytes are exactly those the signature covers.',
  },
  'GET /v1/policies/versions/:version': {
    operationId: 'getPolicyVersion',
    summary: 'One stored version of the policy',
    tag: 'Policies',
    description: 'Any stored version of the caller\'s organization\'s policy, the current one or an older one, with its source as it was submitted: what a diff between versions needs.',
    success: 'The policy version.',
    errors: { 404: 'The organization has no such version.' },
  },
  'GET /v1/audit/status': {
    operationId: 'auditStatus',
    summary: 'The audit chain\'s head, last checkpoint and a verified range',
    tag: 'Audit',
    description:
      'The newest event, the last signed checkpoint, and a verification of a sequence range (default: the newest 10,000 events) by the same check as `countersign audit verify`: each event\'s hash recomputed from its stored payload, the links between events, the signature, and the checkpoint where the range reaches it. A range longer than 10,000 events is refused with the parts to ask for.',
    success: 'The chain\'s status; `verification.ok` is false with each problem found.',
  },
  'GET /v1/gates/readiness': {
    operationId: 'gateReadiness',
    summary: 'Shadow → enforce readiness of each gate route',
    tag: 'Audit',
    description:
      'For each proxy route seen in shadow mode within the window, the requests it verified and those it would have blocked, by refusal code, from the verification records in the audit log. A route is `ready` when, for the last `quiet_days`, it had shadow traffic throughout and no would-block whose code is not listed in `expected`. An MCP route also lists, under `tools`, each tool called in shadow mode with its own counts and verdict by the same rule, since its tool table sets the mode per tool (at most 100 tools, the busiest; `tools_left_off` counts the rest). The mode itself lives in the proxy\'s configuration (docs/shadow-to-enforce.md, docs/mcp.md).',
    success: 'Every route seen in shadow mode in the window, by name.',
  },
  'GET /v1/audit/keys': {
    operationId: 'listAuditKeys',
    summary: 'The public keys that verify audit bundles',
    tag: 'Audit',
    description: 'Every audit signing key, retired ones included, as SPKI PEM; pick the one whose `key_id` is the bundle\'s `signing_key_id`.',
    success: 'The audit public keys.',
  },
  ...SDK_OPERATIONS,
};

/** The table key of a route. */
export function operationKey(method: string, url: string): string {
  return `${method.toUpperCase()} ${url}`;
}
