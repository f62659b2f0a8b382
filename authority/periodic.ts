/**
 * Background work on a timer (the verification drain, the escalation sweeper): a run every
 * `intervalMs`, never two at once (a slow run makes the next tick a no-op), on an unref'd timer so
 * it never keeps the process alive. `run` handles its own failures; the next tick is the retry.
 *
 * @example
 *   const task = runEvery(1_000, () => drain().catch((err) => logger.error({ err }, 'drain failed')));
 *   await task.stop(); // no more ticks; resolves once a run in flight has finished
 */
export interface PeriodicTask {
  /** Stops the timer and resolves once a run in flight has finished. */
  stop(): Promise<void>;
}

export function runEvery(intervalMs: number, run: () => Promise<void>): PeriodicTask {
  let inFlight: Promise<void> | null = null;
  let stopped = false;
  const tick = (): void => {
    if (stopped || inFlight) return;
    inFlight = run().finally(() => {
      inFlight = null;
    });
  };
  const timer = setInterval(tick, intervalMs);
  timer.unref();
  return {
    async stop() {
      stopped = true;
      clearInterval(timer);
      await inFlight;
    },
  };
}
