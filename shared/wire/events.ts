/**
 * Event types: every audit event has one, and webhook deliveries carry the same names.
 */
import { z } from 'zod';

export const EVENT_TYPES = [
  'evaluation.decided',
  'permit.issued',
  'permit.verified',
  'permit.rejected',
  'permit.revoked',
  'execution.observed',
  'effect.reported',
  'approval.requested',
  'approval.resolved',
  'escalation.created',
  'escalation.vote_recorded',
  'escalation.resolved',
  'escalation.timed_out',
  'policy.updated',
  'webhook.test',
] as const;
export type EventType = (typeof EVENT_TYPES)[number];
export const EventType = z.enum(EVENT_TYPES);
