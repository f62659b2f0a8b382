/**
 * One load at a time, the newest winning, for pages that show a list and refresh it: calling the
 * returned function abandons a load still running (its answer may predate a change just made),
 * unless `ifIdle` is set, which leaves a running load alone (a periodic refresh). An abandoned
 * load's answer is dropped, and leaving the page abandons the last one. The latest `fetch` and
 * callbacks are used, so a timer set up once still loads with the current session.
 *
 * @example
 *   const load = useLatestLoad(listKeys, (list) => setKeys(list), setProblem);
 *   useEffect(() => void load(), []);
 *   <button onClick={() => void load()}>Refresh</button>
 */
import { useEffect, useRef } from 'preact/hooks';
import { isAbort } from './api';
import { messageOf } from './components/parts';

export function useLatestLoad<T>(
  fetch: (signal: AbortSignal) => Promise<T>,
  onLoaded: (value: T) => void,
  onProblem: (message: string | null) => void,
): (options?: { ifIdle?: boolean }) => Promise<void> {
  const running = useRef<AbortController | null>(null);
  const latest = useRef({ fetch, onLoaded, onProblem });
  latest.current = { fetch, onLoaded, onProblem };
  useEffect(() => () => running.current?.abort(), []);

  return async ({ ifIdle = false } = {}) => {
    if (running.current && ifIdle) return;
    running.current?.abort();
    const mine = new AbortController();
    running.current = mine;
    try {
      const value = await latest.current.fetch(mine.signal);
      if (mine.signal.aborted) return;
      latest.current.onLoaded(value);
      latest.current.onProblem(null);
    } catch (error) {
      if (isAbort(error) || mine.signal.aborted) return;
      latest.current.onProblem(messageOf(error));
    } finally {
      if (running.current === mine) running.current = null;
    }
  };
}
