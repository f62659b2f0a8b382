/**
 * The wire schemas the OpenAPI document names as components (`#/components/schemas/PermitRecord`)
 * instead of repeating them inline, so generated clients get one type per resource. A registry of
 * our own: the wire modules stay free of documentation concerns. Output schemas keep their name;
 * input ones are suffixed `Input` by fastify-type-provider-zod.
 *
 * @example
 *   createJsonSchemaTransform({ schemaRegistry: COMPONENT_SCHEMAS });
 */
import { z } from 'zod';
import { ApiKeyRecord } from '../../shared/wire/api-keys.js';
import { ApprovalRecord, BoundFacts } from '../../shared/wire/approvals.js';
import { AuthzenActionSearchResponse, AuthzenSubjectSearchResponse } from '../../shared/wire/authzen-search.js';
import { AuthzenAction, AuthzenConfiguration, AuthzenDecision, AuthzenDecisionContext, AuthzenErrorContext, AuthzenEvaluationItem, AuthzenEvaluationsResponse, AuthzenResource, AuthzenSubject } from '../../shared/wire/authzen.js';
import { AuditBundle, AuditCheckpointWire, AuditEventWire, AuditPublicKeyWire } from '../../shared/wire/audit.js';
import { ApprovalRecordWire, EscalationWire, QuorumProgressWire } from '../../shared/wire/escalations.js';
import { DecisionObject, EvaluateContext, EvaluateResponse, RiskEnvelope } from '../../shared/wire/evaluate.js';
import { PermitRecord, VerifyPermitResponse } from '../../shared/wire/permits.js';
import { PolicyRecord } from '../../shared/wire/policies.js';
import { WebhookDeliveryWire, WebhookSubscriptionWire } from '../../shared/wire/webhooks.js';

export const COMPONENT_SCHEMAS = z.registry<{ id: string; description?: string }>();

const named: Array<[z.ZodType, string, string]> = [
  [ApiKeyRecord, 'ApiKeyRecord', 'An API key, without its secret.'],
  [ApprovalRecord, 'ApprovalRecord', 'An approval request opened by a `hold`, with the bound facts of the action it would let through.'],
  [
    BoundFacts,
    'BoundFacts',
    'The facts of an action that approvers are asked to let through, as a permit for it binds them: `action_type`, `actor_id`, whichever of `environment`, `target` (`{type, id}`), `amount_usd` and `account_code` it has, and the context keys its action class binds. Nothing else of the evaluation\'s context.',
  ],
  [AuditEventWire, 'AuditEvent', 'One event of the organization\'s hash chain.'],
  [AuditBundle, 'AuditBundle', 'A signed export of a sequence range of the chain.'],
  [AuditCheckpointWire, 'AuditCheckpoint', 'A signed statement of the chain head at a sequence.'],
  [AuditPublicKeyWire, 'AuditPublicKey', 'A key that verifies audit bundles and checkpoints.'],
  [EscalationWire, 'Escalation', 'A human-in-the-loop escalation. One opened by evaluate carries the bound facts of its action (`boundFacts`); one created through the API is bound to no action (`bindingHash` and `boundFacts` null).'],
  [ApprovalRecordWire, 'EscalationVote', 'One vote on an escalation.'],
  [QuorumProgressWire, 'QuorumProgress', 'Votes counted against the current tier\'s quorum.'],
  [EvaluateResponse, 'EvaluateResponse', 'The decision on an action.'],
  [DecisionObject, 'DecisionObject', 'Why the decision is what it is.'],
  [RiskEnvelope, 'RiskEnvelope', 'The risk score and the factors behind it.'],
  [EvaluateContext, 'EvaluateContext', 'Facts about the action; the policy reads them and a permit binds them.'],
  [AuthzenSubject, 'AuthzenSubject', 'Who asks (AuthZEN). `id` is the evaluation\'s `actor_id` (its digest when longer than 256 characters); the whole subject is `context.subject`.'],
  [AuthzenAction, 'AuthzenAction', 'What the subject would do (AuthZEN). `name` becomes the evaluation\'s `action_type` by the action-name rule; the whole action is `context.action`.'],
  [AuthzenResource, 'AuthzenResource', 'What it would be done to (AuthZEN). `type` and `id` are the bound `context.target`; the whole resource is `context.resource`.'],
  [AuthzenEvaluationItem, 'AuthzenEvaluationItem', 'A default or an entry of an AuthZEN batch: any part of each entity, completed from the other.'],
  [AuthzenDecision, 'AuthzenDecision', 'An AuthZEN decision: `true` only for allow. Never a permit.'],
  [AuthzenDecisionContext, 'AuthzenDecisionContext', 'Countersign\'s own decision behind an AuthZEN answer, and what it opened.'],
  [AuthzenErrorContext, 'AuthzenErrorContext', 'The context of a batch entry that could not be decided (`decision: false`): the error it met.'],
  [AuthzenEvaluationsResponse, 'AuthzenEvaluationsResponse', 'The decisions of an AuthZEN batch, in request order.'],
  [AuthzenConfiguration, 'AuthzenConfiguration', 'AuthZEN Policy Decision Point metadata.'],
  [AuthzenActionSearchResponse, 'AuthzenActionSearchResponse', 'The actions an AuthZEN action search found, and the page.'],
  [AuthzenSubjectSearchResponse, 'AuthzenSubjectSearchResponse', 'The subjects an AuthZEN subject search found, and the page.'],
  [PermitRecord, 'PermitRecord', 'A permit as recorded.'],
  [VerifyPermitResponse, 'VerifyPermitResponse', 'The verdict of a verification.'],
  [PolicyRecord, 'PolicyRecord', 'One version of the organization\'s policy.'],
  [WebhookSubscriptionWire, 'WebhookSubscription', 'A webhook subscription.'],
  [WebhookDeliveryWire, 'WebhookDelivery', 'A webhook delivery with its attempts.'],
];
for (const [schema, id, description] of named) COMPONENT_SCHEMAS.add(schema, { id, description });
