/**
 * The durability acknowledgement that follows a write on the same connection: `WAITAOF 1 0`
 * (durability `aof`) or `WAIT n` (`replica`: n is every replica that could be promoted), sent
 * right after the write, so that Redis answers both in one round trip. Which one applies, and n,
 * are read from the servers (redis-durability.ts).
 *
 * @example
 *   acknowledgementCommand(replicaPlan, Date.now() + 900, 2); // ['WAIT', '2', '900'], sent right behind the write
 *   acknowledgementError(replicaPlan, [null, 2], 2); // undefined: both replicas acknowledged the writes before it
 *   acknowledgementError(replicaPlan, [null, 1], 2); // a STORE_NOT_DURABLE StoreError
 */
import type { DurabilityPlan } from './redis-durability.js';
import { StoreError } from './store-errors.js';

/** A durability plan that waits for an acknowledgement after each write. */
export type AcknowledgementPlan = DurabilityPlan & { wait: 'waitaof' | 'wait' };

/**
 * The command that acknowledges the writes sent before it on the connection, waiting at most until
 * `deadlineMs`; `replicas` is how many must acknowledge a `WAIT`.
 */
export function acknowledgementCommand(plan: AcknowledgementPlan, deadlineMs: number, replicas: number): [string, ...string[]] {
  const waitMs = String(Math.max(1, Math.floor(deadlineMs - Date.now())));
  return plan.wait === 'waitaof' ? ['WAITAOF', '1', '0', waitMs] : ['WAIT', String(replicas), waitMs];
}

/** Why the acknowledgement's reply does not show the writes durable (STORE_NOT_DURABLE); undefined when it does. */
export function acknowledgementError(plan: AcknowledgementPlan, result: [Error | null, unknown] | undefined, replicas: number): StoreError | undefined {
  const [error, reply] = result ?? [new Error('no reply'), null];
  if (error) return new StoreError('STORE_NOT_DURABLE', `the ${plan.wait} acknowledgement failed: ${error.message}`, { cause: error });
  // WAITAOF answers [local fsyncs, replica fsyncs]; WAIT answers the number of replicas.
  const acknowledged = Array.isArray(reply) ? Number(reply[0]) : Number(reply);
  const needed = plan.wait === 'wait' ? Math.max(1, replicas) : 1;
  if (acknowledged >= needed) return undefined;
  return new StoreError(
    'STORE_NOT_DURABLE',
    plan.wait === 'wait'
      ? `${acknowledged} of the ${needed} replica(s) that could be promoted acknowledged the write in time`
      : `the write was not acknowledged as durable (${plan.durability}) in time`,
  );
}
