/**
 * The escalation timeout sweeper: records, in the background, the timeouts of escalations nobody
 * is looking at, so `escalation.timed_out` events (and their webhooks) go out close
 * to when the tier ran out rather than at the next read. Reads and votes apply due timeouts
 * themselves, so the sweeper's pace never changes what a caller sees.
 *
 * Several replicas may sweep at once: each escalation is settled under its row lock with
 * SKIP LOCKED, and a timeout already recorded is not due any more.
 *
 * @example
 *   const { settled } = await sweepEscalationTimeouts({ db, clock, metrics });
 *   const sweeper = startEscalationSweeper({ db, clock, metrics }, { intervalMs: 5_000, logger });
 *   await sweeper.stop(); // waits for a run in flight
 */
import type { AuthorityMetrics } from '../metrics.js';
import { runEvery, type PeriodicTask } from '../periodic.js';
import type { Db } from '../store/db.js';
import type { Clock } from '../time.js';
import { settleDueEscalations } from './escalations.js';

export interface SweeperDeps {
  db: Db;
  clock: Clock;
  metrics: Pick<AuthorityMetrics, 'escalations'>;
}

/** Escalations settled per run; a larger backlog continues on the next tick. */
const DEFAULT_BATCH = 200;

/**
 * Records every due timeout (up to `batch` escalations). Rejects when the due escalations cannot
 * be listed, or with the first failure after the others have been settled.
 */
export async function sweepEscalationTimeouts(deps: SweeperDeps, options: { batch?: number } = {}): Promise<{ settled: number }> {
  const { settled, transitions, failures } = await settleDueEscalations(deps.db, deps.clock, { limit: options.batch ?? DEFAULT_BATCH });
  for (const status of transitions) deps.metrics.escalations.inc({ status });
  if (failures.length === 1) throw failures[0];
  if (failures.length > 1) throw new AggregateError(failures, `${failures.length} escalation timeouts could not be recorded`);
  return { settled };
}

export interface SweeperLogger {
  error(obj: unknown, msg: string): void;
}

/** Stops the timer and resolves once a run in flight has finished. */
export type RunningSweeper = PeriodicTask;

/** Sweeps every `intervalMs` (see runEvery), logging failures: the next tick retries. */
export function startEscalationSweeper(deps: SweeperDeps, options: { intervalMs: number; logger: SweeperLogger; batch?: number }): RunningSweeper {
  return runEvery(options.intervalMs, () =>
    sweepEscalationTimeouts(deps, options.batch === undefined ? {} : { batch: options.batch }).then(
      () => undefined,
      (error: unknown) => options.logger.error({ err: error }, 'recording escalation timeouts failed; retrying on the next tick'),
    ),
  );
}
