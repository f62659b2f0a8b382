/**
 * The durability acknowledgement that follows a write on the same connection: `WAITAOF 1 0`
 * (durability `aof`) or `WAIT 1` (`replica`), sent right after the write, so that Redis answers
 * both in one round trip. Which one applies is read from the servers once (`checkDurabilityOf` in
 * redis-topology.ts).
 *
 * @example
 *   acknowledgementCommand(replicaPlan, Date.now() + 900); // ['WAIT', '1', '900'], sent right behind the write
 *   acknowledgementError(replicaPlan, [null, 1]); // undefined: one replica acknowledged the writes before it
 *   acknowledgementError(replicaPlan, [null, 0]); // a STORE_NOT_DURABLE StoreError
 */
import type { DurabilityPlan } from './redis-topology.js';
import { StoreError } from './store-errors.js';

/** A durability plan that waits for an acknowledgement after each write. */
export type AcknowledgementPlan = DurabilityPlan & { wait: 'waitaof' | 'wait' };

/** The command that acknowledges the writes sent before it on the connection, waiting at most until `deadlineMs`. */
export function acknowledgementCommand(plan: AcknowledgementPlan, deadlineMs: number): [string, ...string[]] {
  const waitMs = String(Math.max(1, Math.floor(deadlineMs - Date.now())));
  return plan.wait === 'waitaof' ? ['WAITAOF', '1', '0', waitMs] : ['WAIT', '1', waitMs];
}

/** Why the acknowledgement's reply does not show the writes durable (STORE_NOT_DURABLE); undefined when it does. */
export function acknowledgementError(plan: AcknowledgementPlan, result: [Error | null, unknown] | undefined): StoreError | undefined {
  const [error, reply] = result ?? [new Error('no reply'), null];
  if (error) return new StoreError('STORE_NOT_DURABLE', `the ${plan.wait} acknowledgement failed: ${error.message}`, { cause: error });
  // WAITAOF answers [local fsyncs, replica fsyncs]; WAIT answers the number of replicas.
  const acknowledged = Array.isArray(reply) ? Number(reply[0]) : Number(reply);
  if (acknowledged >= 1) return undefined;
  return new StoreError('STORE_NOT_DURABLE', `the write was not acknowledged as durable (${plan.durability}) in time`);
}
