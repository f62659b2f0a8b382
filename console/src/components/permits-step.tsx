/**
 * One step of a permit's story: one audit event of the proof, said in words (the decision, the
 * permit, a verification, an execution, an effect, a revocation), with its time, its place in the
 * chain (sequence and hash) and whether the last signed checkpoint covers it.
 */
import type { ComponentChildren } from 'preact';
import type { AuditCheckpointWire, AuditEventWire } from '../permits-api';
import { Identity } from './identity';
import { Hash, Row, When } from './parts';

export type StepKind = 'decision' | 'permit' | 'revocation' | 'verification' | 'execution' | 'effect' | 'other';

const KINDS: Readonly<Record<string, StepKind>> = {
  'evaluation.decided': 'decision',
  'permit.issued': 'permit',
  'permit.revoked': 'revocation',
  'permit.verified': 'verification',
  'permit.rejected': 'verification',
  'execution.observed': 'execution',
  'effect.reported': 'effect',
};

export const kindOf = (event: AuditEventWire): StepKind => KINDS[event.type] ?? 'other';

const DECISIONS: Readonly<Record<string, string>> = { allow: 'allow', deny: 'deny', hold: 'hold for approval', escalate: 'escalate to approvers' };
export const decisionLabel = (decision: string | null): string => (decision === null ? 'not recorded' : (DECISIONS[decision] ?? decision));

const EFFECTS: Readonly<Record<string, string>> = { succeeded: 'succeeded', failed: 'failed', partial: 'partly done' };

/** A detail as text, or null when absent or empty. */
function text(details: Record<string, unknown>, name: string): string | null {
  const value = details[name];
  if (value === null || value === undefined || value === '') return null;
  if (typeof value === 'string') return value;
  if (typeof value === 'number' || typeof value === 'boolean') return String(value);
  try {
    return JSON.stringify(value);
  } catch {
    return String(value);
  }
}

function list(details: Record<string, unknown>, name: string): string[] {
  const value = details[name];
  return Array.isArray(value) ? value.map((item) => (typeof item === 'string' ? item : JSON.stringify(item))) : [];
}

/** A row only when there is something to say. */
function Maybe({ label, value, children }: { label: string; value: string | null; children?: ComponentChildren }) {
  if (value === null) return null;
  return <Row label={label}>{children ?? value}</Row>;
}

/** What the protected system sent as `details` with its effect, as JSON; null when it sent none. */
function effectDetails(details: Record<string, unknown>): string | null {
  const effect = details['effect'];
  return typeof effect === 'object' && effect !== null && Object.keys(effect).length > 0 ? JSON.stringify(effect) : null;
}

function upstreamWords(details: Record<string, unknown>): string {
  const status = text(details, 'upstream_status');
  switch (details['upstream']) {
    case 'answered':
      return status === null ? 'The upstream answered.' : `The upstream answered with status ${status}.`;
    case 'not_reached':
      return 'The request did not reach the upstream: nothing ran.';
    case 'unknown':
      return 'Unknown: the request may have reached the upstream and run.';
    default:
      return status === null ? 'Not recorded.' : `Status ${status}.`;
  }
}

function gateWords(details: Record<string, unknown>): string | null {
  const gate = text(details, 'gate');
  if (gate === null) return null;
  const mode = text(details, 'mode');
  if (gate === 'verify-permit') return 'the authority (POST /v1/verify-permit)';
  return mode === null ? gate : `${gate}, in ${mode} mode`;
}

/** The step's heading, in words. */
export function stepTitle(event: AuditEventWire): string {
  const details = event.payload.details;
  switch (kindOf(event)) {
    case 'decision':
      return `Decision: ${decisionLabel(event.decision)}`;
    case 'permit':
      return 'Permit issued';
    case 'revocation':
      return 'Permit revoked';
    case 'verification':
      if (event.type === 'permit.verified') return 'Verification: verified';
      return `Verification: rejected${text(details, 'verify_error_code') === null ? '' : ` (${text(details, 'verify_error_code')})`}${details['mode'] === 'shadow' ? ', forwarded anyway in shadow mode' : ''}`;
    case 'execution':
      return `Execution observed: ${details['upstream'] === 'answered' ? 'the upstream answered' : details['upstream'] === 'not_reached' ? 'not reached' : 'unknown'}`;
    case 'effect':
      return `Effect reported: ${EFFECTS[text(details, 'status') ?? ''] ?? text(details, 'status') ?? 'no status'}`;
    case 'other':
      return event.type;
  }
}

function StepDetails({ event }: { event: AuditEventWire }) {
  const details = event.payload.details;
  switch (kindOf(event)) {
    case 'decision': {
      const codes = list(details, 'reason_codes');
      const bound = list(details, 'bound_facts');
      return (
        <>
          <Row label="Decision">{decisionLabel(event.decision)}</Row>
          <Maybe label="Action" value={text(details, 'action_type')} />
          <Maybe label="Actor" value={event.actor_id} />
          <Maybe label="Mode" value={text(details, 'mode')} />
          {codes.length > 0 && <Row label="Reasons">{codes.join(', ')}</Row>}
          <Maybe label="Risk score" value={text(details, 'risk_score')} />
          <Maybe label="Evaluation" value={event.resource_id}>
            <Hash value={event.resource_id ?? ''} />
          </Maybe>
          {bound.length > 0 && <Row label="Bound facts">{bound.join(', ')}</Row>}
          <Maybe label="Permit" value={text(details, 'permit_id')} />
        </>
      );
    }
    case 'permit':
      return (
        <>
          <Maybe label="Signing key" value={text(details, 'kid')} />
          <Maybe label="Expires" value={text(details, 'expires_at')}>
            <When at={text(details, 'expires_at') ?? ''} />
          </Maybe>
          <Maybe label="Binding hash" value={text(details, 'binding_hash')}>
            <Hash value={text(details, 'binding_hash') ?? ''} />
          </Maybe>
        </>
      );
    case 'revocation':
      return (
        <>
          <Maybe label="Revoked by" value={event.actor_id} />
          <Row label="Reason">{text(details, 'reason') ?? 'none given'}</Row>
        </>
      );
    case 'verification':
      return (
        <>
          <Maybe label="Gate" value={gateWords(details)} />
          <Row label="Result">{event.type === 'permit.verified' ? 'verified' : `rejected${text(details, 'verify_error_code') === null ? '' : `: ${text(details, 'verify_error_code')}`}`}</Row>
          {event.type === 'permit.rejected' && <Maybe label="Reason" value={text(details, 'reason')} />}
          {event.type === 'permit.verified' && <Row label="Used up">{details['consumed'] === true ? 'yes: the permit cannot be used again' : 'no'}</Row>}
          <Maybe label="Request" value={event.request_id} />
        </>
      );
    case 'execution':
      return (
        <>
          <Maybe label="Gate" value={gateWords(details)} />
          <Row label="Upstream">{upstreamWords(details)}</Row>
          <Maybe label="Code" value={text(details, 'code')} />
          <Maybe label="Reason" value={text(details, 'reason')} />
          <Maybe label="Took" value={text(details, 'duration_ms') === null ? null : `${text(details, 'duration_ms')} ms`} />
        </>
      );
    case 'effect':
      return (
        <>
          <Row label="Status">{EFFECTS[text(details, 'status') ?? ''] ?? text(details, 'status') ?? 'not given'}</Row>
          <Maybe label="Summary" value={text(details, 'summary')} />
          <Maybe label="Details" value={effectDetails(details)}>
            <code class="hash">{effectDetails(details)}</code>
          </Maybe>
          <Maybe label="Reported by" value={event.payload.credential}>
            {event.payload.credential !== null && <Identity identity={event.payload.credential} />}
          </Maybe>
        </>
      );
    case 'other':
      return <Maybe label="Decision" value={event.decision} />;
  }
}

/** `checkpoint`: the last one the proof names (null: none yet); left out, nothing is said about it. */
export function StoryStep({ event, checkpoint }: { event: AuditEventWire; checkpoint?: AuditCheckpointWire | null }) {
  const kind = kindOf(event);
  return (
    <li class="story-step" data-testid="story-step" data-kind={kind} data-type={event.type} data-sequence={event.sequence}>
      <h4 class="step-title">{stepTitle(event)}</h4>
      <p class="step-when">
        <When at={event.occurred_at} />
      </p>
      <dl class="facts">
        <StepDetails event={event} />
        <Row label="Audit event">
          {event.type}, sequence <span data-testid="step-sequence">{event.sequence}</span>
        </Row>
        <Row label="Hash">
          <Hash value={event.hash} testId="step-hash" />
        </Row>
        {checkpoint !== undefined && (
          <Row label="Checkpoint">
          {checkpoint === null
            ? 'No checkpoint signed yet.'
            : event.sequence <= checkpoint.sequence
              ? `Covered by the checkpoint signed at sequence ${checkpoint.sequence}.`
              : `After the last checkpoint (sequence ${checkpoint.sequence}): the next one will cover it.`}
          </Row>
        )}
      </dl>
    </li>
  );
}

/** A stage of the story with no record, and why that may be. */
export function MissingStep({ kind, title, children }: { kind: StepKind; title: string; children: ComponentChildren }) {
  return (
    <li class="story-step story-missing" data-testid="story-missing" data-kind={kind}>
      <h4 class="step-title">{title}</h4>
      <p>{children}</p>
    </li>
  );
}
