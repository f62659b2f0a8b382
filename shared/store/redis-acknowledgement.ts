/**
 * The durability acknowledgement that follows a write on the same connection: `WAITAOF 1 0`
 * (durability `aof`) or `WAIT 1` (`replica`), queued on the pipeline that carries the write, so
 * that Redis answers both in one round trip. Which one applies is read from the servers once
 * (`checkDurabilityOf` in redis-topology.ts).
 *
 * @example
 *   const pipeline = client.pipeline().xadd(stream, '*', 'kind', 'permit.verified');
 *   addAcknowledgement(pipeline, plan, Date.now() + 900);
 *   const replies = await pipeline.exec();
 *   const notDurable = acknowledgementError(plan, replies?.[1]); // undefined once acknowledged
 */
import type { ChainableCommander } from 'ioredis';
import type { DurabilityPlan } from './redis-topology.js';
import { StoreError } from './store-errors.js';

/** A durability plan that waits for an acknowledgement after each write. */
export type AcknowledgementPlan = DurabilityPlan & { wait: 'waitaof' | 'wait' };

/** Queues the acknowledgement of the writes queued before it, waiting at most until `deadlineMs`. */
export function addAcknowledgement(pipeline: ChainableCommander, plan: AcknowledgementPlan, deadlineMs: number): void {
  const waitMs = String(Math.max(1, Math.floor(deadlineMs - Date.now())));
  if (plan.wait === 'waitaof') pipeline.call('WAITAOF', '1', '0', waitMs);
  else pipeline.call('WAIT', '1', waitMs);
}

/** Why the acknowledgement's pipeline reply does not show the writes durable (STORE_NOT_DURABLE); undefined when it does. */
export function acknowledgementError(plan: AcknowledgementPlan, result: [Error | null, unknown] | undefined): StoreError | undefined {
  const [error, reply] = result ?? [new Error('no reply'), null];
  if (error) return new StoreError('STORE_NOT_DURABLE', `the ${plan.wait} acknowledgement failed: ${error.message}`, { cause: error });
  // WAITAOF answers [local fsyncs, replica fsyncs]; WAIT answers the number of replicas.
  const acknowledged = Array.isArray(reply) ? Number(reply[0]) : Number(reply);
  if (acknowledged >= 1) return undefined;
  return new StoreError('STORE_NOT_DURABLE', `the write was not acknowledged as durable (${plan.durability}) in time`);
}
