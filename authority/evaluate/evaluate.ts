/**
 * Evaluate: one exact action → one decision, and on a live allow a permit bound to that action.
 * The evaluation row, the permit row and their audit events commit in one transaction before the
 * answer leaves (concurrent evaluations share it: group commit); if the audit append fails,
 * nothing is stored and the caller gets 503 `audit_unavailable` (the signed token is discarded,
 * so no permit exists anywhere).
 *
 * Other front doors decide through this same core. The AuthZEN facade (authority/authzen/) passes
 * `{ permit: 'never', via: 'authzen' }`: the same policy, approvals, idempotency and audit, and on
 * allow no permit.
 *
 * @example
 *   const response = await evaluateAction(deps, principal, request, httpRequestId);
 *   response.decision; // 'allow'
 *   await evaluateAction(deps, principal, request, httpRequestId, { permit: 'never', via: 'authzen' });
 */
import { hash, randomUUID } from 'node:crypto';
import { canonicalJson } from '../../shared/canonical-json.js';
import { CountersignError } from '../../shared/errors.js';
import { BindingFactError, bindingHash, boundFacts, type BindingInput } from '../../shared/permits/binding.js';
import { newPermitId } from '../../shared/permits/claims.js';
import type { EscalationStatus } from '../../shared/wire/escalations.js';
import type { EvaluateResponse, EvaluateWireRequest } from '../../shared/wire/evaluate.js';
import { AuditPayloadError } from '../audit/chain.js';
import type { NewAuditEvent } from '../audit/types.js';
import { identityOfCredential } from '../auth/identity.js';
import type { Principal } from '../auth/principal.js';
import type { AuthorityConfig } from '../config.js';
import type { AuthorityMetrics } from '../metrics.js';
import type { ReplayEpochs } from '../permits/replay-epochs.js';
import { buildPermitClaims, signPermit } from '../permits/sign.js';
import type { PolicyDecision } from '../policy/types.js';
import type { PolicyVersions } from '../policy/versions.js';
import type { SigningKeys } from '../signing/keys.js';
import type { Db } from '../store/db.js';
import type { GroupCommit } from '../store/group-commit.js';
import type { Clock } from '../time.js';
import { decideAsEvaluate } from './decide.js';
import {
  ApprovalAlreadyUsedError, checkApprovals, claimApprovals, decideWithApprovals, denyForRefusedApprovals, needsHuman, NO_APPROVALS, planHumanApproval, reuseApproval,
  type ApprovalCheck, type ApprovalStatus, type PreparedApproval,
} from './approvals.js';
import { buildEvaluateResponse } from './response.js';
import { storeEvaluations, type EvaluationOutcome, type EvaluationWrite } from './store.js';

export interface EvaluateDeps {
  db: Db;
  clock: Clock;
  policies: PolicyVersions;
  keys: SigningKeys;
  config: AuthorityConfig;
  metrics: AuthorityMetrics;
  /** Group commit for evaluations that open no human approval (the hot path). */
  writer: GroupCommit<EvaluationWrite, EvaluationOutcome>;
  /** The replay store's epochs: a permit is issued only once its organization's epoch exists. */
  epochs: Pick<ReplayEpochs, 'ensure'>;
}

/** The front door an evaluation came through, recorded as `via` in its evaluation.decided event. */
export type EvaluationChannel = 'evaluate' | 'authzen';

export interface EvaluateOptions {
  /**
   * `on_allow` (default): a live allow whose action class requires a permit gets one. `never`:
   * decide, record and open human approvals exactly as always, but sign no permit; the answer says
   * `permit_status: not_issued`. Not `shadow`: a shadow evaluation opens no approval request.
   */
  permit?: 'on_allow' | 'never';
  /** Recorded in evaluation.decided; `evaluate` unless given. */
  via?: EvaluationChannel;
}

class DuplicateRequestId extends Error {}

/** No human approval in this evaluation: nothing opened, reused or reported. */
const NOTHING_OPENED: PreparedApproval = { opened: {}, statuses: [], open: () => Promise.resolve(null) };

/** boundFacts, with a fact that has no canonical form reported as the caller's 400. */
function bind(request: BindingInput, extraKeys: readonly string[]): { facts: Record<string, unknown>; keys: string[] } {
  try {
    return boundFacts(request, extraKeys);
  } catch (error) {
    if (!(error instanceof BindingFactError)) throw error;
    const path = error.fact === 'action_type' || error.fact === 'actor_id' ? error.fact : `context.${error.fact}`;
    throw new CountersignError('invalid_request', 'a fact of the action cannot be bound into a permit', { details: [{ path, message: error.message }] });
  }
}

/** What an organization without a policy gets: nothing is authorized. */
function noPolicyDecision(): PolicyDecision {
  return {
    decision: 'deny',
    reasonCodes: ['NO_POLICY'],
    actionClass: null,
    matchedRules: [],
    mode: 'live',
    permit: { required: true, lifetimeSeconds: 60, bind: [] },
    risk: { score: 1, base: 1, factors: [], band: 'critical' },
    remediation: [{ code: 'LOAD_POLICY', message: 'This organization has no policy yet: PUT /v1/policies.' }],
    escalation: null,
    hold: null,
    explanation: null,
  };
}

/**
 * What a request_id is bound to. An evaluation that may not carry a permit is a different request
 * from one that may, so a request_id cannot cross between them: a permit-less answer is never
 * replayed to an evaluate caller, nor the reverse (409); likewise one that reuses approvals and one
 * that does not. Those fields are left out otherwise, so the fingerprints of evaluations stored
 * before they existed stay the same.
 */
export function requestFingerprint(request: EvaluateWireRequest, options: EvaluateOptions): string {
  const { action_type, actor_id, context, shadow } = request;
  const withheld = options.permit === 'never' ? { permit: 'never' } : {};
  const reusing = request.reuse_approvals === true ? { reuse_approvals: true } : {};
  return hash('sha256', canonicalJson({ action_type, actor_id, context, shadow: shadow === true, ...withheld, ...reusing }), 'hex');
}

export async function evaluateAction(
  deps: EvaluateDeps,
  principal: Principal,
  request: EvaluateWireRequest,
  httpRequestId: string,
  options: EvaluateOptions = {},
): Promise<EvaluateResponse> {
  try {
    return await evaluateOnce(deps, principal, request, httpRequestId, options);
  } catch (error) {
    // A concurrent evaluation used a presented approval for its permit first. Evaluating again
    // reports that approval as APPROVAL_ALREADY_USED (a deny, when the action needs a human).
    if (error instanceof ApprovalAlreadyUsedError) return evaluateOnce(deps, principal, request, httpRequestId, options);
    throw error;
  }
}

async function evaluateOnce(
  deps: EvaluateDeps,
  principal: Principal,
  request: EvaluateWireRequest,
  httpRequestId: string,
  options: EvaluateOptions,
): Promise<EvaluateResponse> {
  const started = process.hrtime.bigint();
  const org = principal.org;
  const requestId = request.request_id ?? httpRequestId;
  const nowMs = deps.clock.now();
  const now = new Date(nowMs);

  const { facts, keys: boundKeys } = bind(request, []);
  const policy = await deps.policies.current(org);
  const approvalContext = { orgId: org.id, actorId: request.actor_id, bindingHash: bindingHash(org.id, facts) };
  const presented = request.context.approvals ?? [];
  const checked = presented.length > 0 ? await checkApprovals(deps.db, deps.clock, approvalContext, presented) : NO_APPROVALS;
  const decideOnce = (check: ApprovalCheck) => {
    const decided = policy
      ? decideAsEvaluate(policy.compiled, request, { accepted: check.accepted, statuses: check.statuses, now, explain: request.explain === true })
      : denyForRefusedApprovals(noPolicyDecision(), check.statuses);
    // The class may bind extra context keys; the binding then covers them too.
    if (decided.permit.bind.length === 0) return { decided, bound: { facts, keys: boundKeys }, binding: approvalContext.bindingHash };
    const bound = bind(request, decided.permit.bind);
    return { decided, bound, binding: bindingHash(org.id, bound.facts) };
  };
  const modeOf = (decided: PolicyDecision) => (request.shadow === true ? 'shadow' : decided.mode);
  let action = decideWithApprovals(checked, decideOnce);
  // Reuse applies to live evaluations that would need a human: nothing is looked up otherwise.
  const reuse = request.reuse_approvals === true && needsHuman(action.decided) && modeOf(action.decided) === 'live'
    ? { boundFactsHash: action.binding, requester: await identityOfCredential(deps.db, org.id, principal.credential) }
    : null;
  let reported: ApprovalStatus[] = [];
  if (reuse) ({ action, reported } = await reuseApproval(deps.db, deps.clock, approvalContext, reuse, action, decideOnce));
  const { decided, bound, binding, approvals } = action;
  const mode = modeOf(decided);
  const issuesPermit = decided.decision === 'allow' && decided.permit.required && mode === 'live' && options.permit !== 'never';

  const evaluationId = randomUUID();
  const print = requestFingerprint(request, options);
  let permit: { id: string; token: string; kid: string; expiresAt: Date } | null = null;
  if (issuesPermit) {
    let epochMs: number;
    try {
      epochMs = await deps.epochs.ensure(org.id);
    } catch (error) {
      throw new CountersignError('service_unavailable', 'the replay store is not reachable, so no gate could accept a permit; nothing was decided', { cause: error });
    }
    const signing = await deps.keys.active('permit');
    const claims = buildPermitClaims({
      issuer: deps.config.permits.issuer,
      audience: deps.config.permits.audience,
      org: org.id,
      jti: newPermitId(),
      requestId,
      facts: bound.facts,
      keys: bound.keys,
      bindingHash: binding,
      policyVersion: policy?.version ?? 0,
      approvals: approvals.accepted.map((approval) => approval.id),
      // Issued after the epoch began, even when this clock is behind the store's (replay-epochs.ts).
      nowMs: Math.max(nowMs, epochMs),
      lifetimeSeconds: decided.permit.lifetimeSeconds,
    });
    permit = { id: claims.jti, token: await signPermit(claims, signing), kid: signing.kid, expiresAt: new Date(claims.exp * 1000) };
  }

  // What the answer reports of approvals: those the decision used or refused, and any the reuse
  // found (a refused one that explains a new hold, or the pending one it names).
  const responseFor = (human: Pick<PreparedApproval, 'opened' | 'statuses'>) => {
    const statuses = [...approvals.statuses, ...reported, ...human.statuses];
    return buildEvaluateResponse({ decided, mode, requestId, evaluationId, permit, policy, bindingHash: binding, boundKeys: bound.keys, approvals: statuses, opened: human.opened, now });
  };
  const writeFor = (answer: EvaluateResponse): EvaluationWrite => ({
    evaluation: {
      id: evaluationId, orgId: org.id, requestId, fingerprint: print, actionType: request.action_type, actorId: request.actor_id,
      decision: decided.decision, mode, riskScore: decided.risk.score, bindingHash: binding, policyVersion: policy?.version ?? null,
      response: answer, credential: principal.credential, createdAt: now,
    },
    permit: permit && {
      id: permit.id, orgId: org.id, evaluationId, requestId, actionType: request.action_type, actorId: request.actor_id,
      bindingHash: binding, boundFacts: bound.facts, kid: permit.kid, issuedAt: now, expiresAt: permit.expiresAt,
    },
    events: auditEventsFor({
      principal, request, requestId, evaluationId, decided, mode, binding, boundKeys: bound.keys, approvals: answer.decisionObject.approvals, permit, via: options.via ?? 'evaluate', now,
    }),
  });

  // A hold or escalate opens a human approval, and a permit backed by approvals uses them up: both
  // in a transaction of their own with the evaluation. Everything else shares group commit.
  const human = mode === 'live'
    ? planHumanApproval({ decided, principal, request, requestId, evaluationId, bindingHash: approvalContext.bindingHash, boundFacts: bound.facts, reuse, config: deps.config, clock: deps.clock, now })
    : null;
  const usesApprovals = permit !== null && approvals.accepted.length > 0;
  let response: EvaluateResponse;
  let outcome: EvaluationOutcome;
  let escalationStatus: EscalationStatus | null = null;
  try {
    if (human || usesApprovals) {
      ({ response, outcome } = await deps.db.transaction(async (tx) => {
        const prepared = (await human?.prepare(tx)) ?? NOTHING_OPENED;
        const answer = responseFor(prepared);
        const [stored] = await storeEvaluations(tx, [writeFor(answer)]);
        // A duplicate must not keep what it opened or claimed: roll the transaction back.
        if (stored !== 'stored') throw new DuplicateRequestId();
        escalationStatus = await prepared.open(tx);
        if (usesApprovals && permit) await claimApprovals(tx, { orgId: org.id, permitId: permit.id, evaluationId, at: now }, approvals.accepted);
        return { response: answer, outcome: stored };
      }));
    } else {
      response = responseFor(NOTHING_OPENED);
      outcome = await deps.writer.submit(writeFor(response));
    }
  } catch (error) {
    if (error instanceof DuplicateRequestId) return repeatOf(deps.db, principal, requestId, print);
    if (error instanceof ApprovalAlreadyUsedError) throw error;
    // Facts that no record can hold (a NUL character, say) are the caller's to fix.
    if (error instanceof AuditPayloadError) throw new CountersignError('invalid_request', `the action's facts cannot be recorded: ${error.message}`, { cause: error });
    // Whatever failed, the decision was not recorded, so it does not exist: fail closed.
    deps.metrics.auditAppendFailures.inc({ operation: 'evaluate' });
    throw new CountersignError('audit_unavailable', undefined, { cause: error });
  }
  if (outcome === 'duplicate') return repeatOf(deps.db, principal, requestId, print);

  deps.metrics.evaluations.inc({ decision: response.decision, mode });
  deps.metrics.evaluateDuration.observe({ decision: response.decision }, Number(process.hrtime.bigint() - started) / 1e9);
  if (permit) deps.metrics.permitsIssued.inc();
  if (escalationStatus) deps.metrics.escalations.inc({ status: escalationStatus });
  if (request.explain === true && decided.explanation) {
    // The trace is for this caller only; the stored response (for repeats) does not carry it.
    return Object.assign({}, response, { decisionObject: Object.assign({}, response.decisionObject, { explanation: decided.explanation }) });
  }
  return response;
}

/**
 * A repeated request_id. Idempotency is per credential: the
 * credential that made the request gets its original answer again when the request is the same;
 * the same request_id from any other credential of the organization is 409, because the stored
 * answer may carry a live permit token, which only its caller may hold. Different content under
 * the same request_id is 409 too. Neither refusal says anything about the first request.
 */
async function repeatOf(db: Db, principal: Principal, requestId: string, print: string): Promise<EvaluateResponse> {
  const rows = await db.query<{ response: EvaluateResponse; request_fingerprint: string; credential: string }>(
    'SELECT response, request_fingerprint, credential FROM evaluations WHERE org_id = $1 AND request_id = $2',
    [principal.org.id, requestId],
  );
  const row = rows[0];
  if (!row) throw new CountersignError('conflict', 'a concurrent evaluation with this request_id did not complete; retry');
  if (row.credential !== principal.credential) {
    throw new CountersignError('conflict', 'request_id was already used by another credential; choose a new request_id');
  }
  if (row.request_fingerprint !== print) {
    throw new CountersignError('conflict', 'request_id was already used for a different request');
  }
  return row.response;
}

interface EvaluationFacts {
  principal: Principal;
  request: EvaluateWireRequest;
  requestId: string;
  evaluationId: string;
  decided: PolicyDecision;
  mode: 'live' | 'shadow';
  binding: string;
  boundKeys: string[];
  approvals: ApprovalStatus[];
  permit: { id: string; kid: string; expiresAt: Date } | null;
  via: EvaluationChannel;
  now: Date;
}

/** evaluation.decided, and permit.issued when a permit was signed. */
function auditEventsFor({ principal, request, requestId, evaluationId, decided, mode, binding, boundKeys, approvals, permit, via, now }: EvaluationFacts): NewAuditEvent[] {
  const orgId = principal.org.id;
  const credential = principal.credential;
  const events: NewAuditEvent[] = [
    {
      orgId,
      requestId,
      credential,
      occurredAt: now,
      type: 'evaluation.decided',
      actorId: request.actor_id,
      decision: decided.decision,
      resourceType: 'evaluation',
      resourceId: evaluationId,
      details: {
        action_type: request.action_type,
        actor_id: request.actor_id,
        context: request.context,
        mode,
        reason_codes: decided.reasonCodes,
        action_class: decided.actionClass,
        matched_rules: decided.matchedRules,
        risk_score: decided.risk.score,
        binding_hash: binding,
        bound_facts: boundKeys,
        approvals,
        permit_id: permit?.id ?? null,
        permit_status: permit ? 'present' : 'not_issued',
        via,
      },
    },
  ];
  if (permit) {
    events.push({
      orgId,
      requestId,
      credential,
      occurredAt: now,
      type: 'permit.issued',
      actorId: request.actor_id,
      decision: 'allow',
      resourceType: 'permit',
      resourceId: permit.id,
      details: {
        evaluation_id: evaluationId,
        action_type: request.action_type,
        kid: permit.kid,
        binding_hash: binding,
        bound_facts: boundKeys,
        expires_at: permit.expiresAt.toISOString(),
      },
    });
  }
  return events;
}
