/**
 * The names Countersign's spans use, defined once, and the few values derived from a request.
 * Plain strings, no OpenTelemetry import: the modules on the hot path import this file whether or
 * not tracing is on. The standard names (`http.*`, `server.*`, `error.type`, `gen_ai.*`) are the
 * semantic conventions' own (test/unit/telemetry.test.ts checks them against
 * @opentelemetry/semantic-conventions).
 *
 * Never recorded: permit tokens, API keys, signing secrets, export header values, request or
 * response bodies, query strings, raw URLs (the route template stands for them), actor ids and
 * exception messages (an error is recorded by its type or code).
 *
 * @example
 *   span.setAttributes({ [ATTR.decision]: 'allow', [ATTR.actionType]: 'deploy.production' });
 *   genAiToolAttributes({ action_type: 'agent.tool.invoke', context: { target: { type: 'tool', id: 'send_email' } } });
 *   // { 'gen_ai.tool.name': 'send_email' }
 */

/** Span names. */
export const SPAN = {
  evaluate: 'countersign.evaluate',
  verifyPermit: 'countersign.verify_permit',
  approvalResolve: 'countersign.approval.resolve',
  escalationCreate: 'countersign.escalation.create',
  escalationRespond: 'countersign.escalation.respond',
  webhookDelivery: 'countersign.webhook.deliver',
  groupCommit: 'countersign.group_commit',
  gateCheck: 'countersign.gate.check',
  consume: 'countersign.permit.consume',
  forward: 'countersign.forward',
} as const;

/** Attribute names. */
export const ATTR = {
  // ---- countersign.* ----
  decision: 'countersign.decision',
  actionType: 'countersign.action_type',
  permitId: 'countersign.permit_id',
  verificationResult: 'countersign.verification.result',
  verificationReason: 'countersign.verification.reason',
  mode: 'countersign.mode',
  route: 'countersign.route',
  requestId: 'countersign.request_id',
  /** The proxy's answer: forwarded, blocked, would_block, passthrough, denied_unmatched, … (the metrics' outcome). */
  outcome: 'countersign.outcome',
  /** Which of the gate's front doors answered: `ext_authz_grpc` or `ext_authz_http` (the forwarding proxy's spans carry none). */
  frontDoor: 'countersign.front_door',
  evaluationId: 'countersign.evaluation_id',
  reasonCodes: 'countersign.reason_codes',
  actionClass: 'countersign.action_class',
  policyVersion: 'countersign.policy.version',
  riskScore: 'countersign.risk_score',
  binding: 'countersign.binding',
  consumeResult: 'countersign.consume.result',
  upstream: 'countersign.upstream',
  approvalId: 'countersign.approval_id',
  approvalStatus: 'countersign.approval.status',
  escalationId: 'countersign.escalation_id',
  escalationStatus: 'countersign.escalation.status',
  escalationVote: 'countersign.escalation.vote',
  webhookDeliveryId: 'countersign.webhook.delivery_id',
  webhookEventType: 'countersign.webhook.event_type',
  webhookAttempt: 'countersign.webhook.attempt',
  webhookResult: 'countersign.webhook.result',
  batchSize: 'countersign.batch.size',
  batchRetriedOneByOne: 'countersign.batch.retried_one_by_one',
  // ---- semantic conventions ----
  httpMethod: 'http.request.method',
  httpRoute: 'http.route',
  httpStatus: 'http.response.status_code',
  urlScheme: 'url.scheme',
  serverAddress: 'server.address',
  serverPort: 'server.port',
  errorType: 'error.type',
  genAiToolName: 'gen_ai.tool.name',
  genAiToolCallId: 'gen_ai.tool.call.id',
  genAiToolType: 'gen_ai.tool.type',
} as const;

export type AttributeValue = string | number | boolean | string[];
export type SpanAttributes = Record<string, AttributeValue | undefined>;

/** The action type whose evaluation carries the GenAI tool attributes. */
export const AGENT_TOOL_ACTION = 'agent.tool.invoke';

/** Longest context-derived value recorded; longer ones are cut. */
const MAX_VALUE = 256;
/** gen_ai.tool.type's well-known values. */
const TOOL_TYPES: ReadonlySet<string> = new Set(['function', 'extension', 'datastore']);

const text = (value: unknown): string | undefined => (typeof value === 'string' && value !== '' ? value.slice(0, MAX_VALUE) : undefined);

/**
 * For an `agent.tool.invoke` evaluation, the GenAI names of the tool it asks to run, as the
 * example policy describes an agent's tool call: the tool is the target `{type: "tool", id: <name>}`
 * (the agent helper form's `target`); the call id is `context.tool_call_id`, else
 * `context.action_id` (the agent helper form's `action.id`); `context.tool_type` is recorded when
 * it is one of the convention's values (function, extension, datastore). Other action types: {}.
 */
export function genAiToolAttributes(request: { action_type: string; context?: Record<string, unknown> | undefined }): SpanAttributes {
  if (request.action_type !== AGENT_TOOL_ACTION) return {};
  const context = request.context ?? {};
  const target = context.target as { type?: unknown; id?: unknown } | undefined;
  const attributes: SpanAttributes = {};
  const name = typeof target === 'object' && target !== null && target.type === 'tool' ? text(target.id) : undefined;
  if (name !== undefined) attributes[ATTR.genAiToolName] = name;
  const callId = text(context.tool_call_id) ?? text(context.action_id);
  if (callId !== undefined) attributes[ATTR.genAiToolCallId] = callId;
  const type = text(context.tool_type);
  if (type !== undefined && TOOL_TYPES.has(type)) attributes[ATTR.genAiToolType] = type;
  return attributes;
}
