/**
 * The engine's own remediation hints: fixed codes, sentences built only from the request's and
 * the policy's facts (so the same input always yields the same text).
 *
 * @example
 *   notAuthorizedRemedy('unknown-bot', 'demo');
 *   // { code: 'REQUEST_AUTHORITY', message: 'Actor "unknown-bot" may not request actions of class "demo"; …' }
 */
import type { Decision, EscalationSettings, HoldSettings, Quorum, Remediation } from './types.js';

const quorumText = (quorum: Quorum, pool: number | null): string => {
  switch (quorum) {
    case 'single_approver':
      return 'one eligible approver';
    case 'simple_majority':
      return `a simple majority of ${pool ?? 'the'} approvers`;
    case 'two_thirds':
      return `two thirds of ${pool ?? 'the'} approvers`;
    case 'unanimous':
      return `all ${pool ?? 'the'} approvers`;
  }
};

export function approvalRemedy(decision: Decision, escalation: EscalationSettings, hold: HoldSettings): Remediation {
  if (decision === 'escalate') {
    return {
      code: 'APPROVAL_REQUIRED',
      message:
        `This exact request needs an escalation approved by ${quorumText(escalation.quorum, escalation.approverPoolSize)} ` +
        `within ${escalation.timeoutMs / 1000} s (otherwise: ${escalation.fallbackDecision}); once approved, evaluate it ` +
        'again with the escalation id in context.approvals.',
    };
  }
  return {
    code: 'APPROVAL_REQUIRED',
    message:
      `This exact request needs the approval of an eligible approver within ${hold.timeoutMs / 1000} s; once approved, ` +
      'evaluate it again with the approval id in context.approvals.',
  };
}

export const noClassRemedy = (actionType: string): Remediation => ({
  code: 'REQUEST_POLICY_CHANGE',
  message: `No action class of the organization's policy governs "${actionType}"; ask a policy administrator to add one.`,
});

export const defaultDenyRemedy = (classId: string): Remediation => ({
  code: 'REQUEST_POLICY_CHANGE',
  message: `No rule of action class "${classId}" accepts this request and the class denies by default; ask a policy administrator for a rule that covers it.`,
});

export const notAuthorizedRemedy = (actorId: string, classId: string): Remediation => ({
  code: 'REQUEST_AUTHORITY',
  message: `Actor "${actorId}" may not request actions of class "${classId}"; ask a policy administrator to add it to the class's actors or to one of its actor groups.`,
});

const LABELS: Record<string, string> = { class: 'match.when of class', risk: 'risk factor', rule: 'rule' };

/** The condition's name for a person, from the explanation's label: `class:<id>`, `risk:<name>` or `rule:<id>`. */
function conditionName(label: string): string {
  const at = label.indexOf(':');
  return at > 0 ? `${LABELS[label.slice(0, at)] ?? label.slice(0, at)} "${label.slice(at + 1)}"` : label;
}

/** A condition stopped by its evaluation budget. */
export function budgetRemedy(path: string, label: string, error: string): Remediation {
  return {
    code: 'REDUCE_CONDITION_COST',
    message:
      `The condition of ${conditionName(label)} (${path}) was not completed for this request: ${error}. Send a smaller context ` +
      '(fewer list items, shorter strings), or ask a policy administrator to simplify the condition.',
  };
}

/** A condition that could not be evaluated (a missing fact, a type error). */
export function conditionErrorRemedy(path: string, label: string, error: string): Remediation {
  return {
    code: 'FIX_POLICY_CONDITION',
    message:
      `The condition of ${conditionName(label)} (${path}) could not be evaluated for this request: ${error}. Send the context ` +
      'facts it reads, or ask a policy administrator to guard it with has().',
  };
}
