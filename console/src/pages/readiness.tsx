/**
 * Shadow → enforce readiness (GET /v1/gates/readiness, audit:read): per proxy route seen in shadow
 * mode, what it would have blocked over a window, by refusal code, whether it is ready for enforce
 * (no unexpected would-block for the quiet days, with shadow traffic throughout), and the
 * configuration change that switches it. The controls are in the query string:
 * `?window_days=7&quiet_days=3&expected=MISSING_PERMIT`.
 */
import { useEffect, useState } from 'preact/hooks';
import { isAbort, type SignedInSession } from '../api';
import { MissingPermission, messageOf } from '../components/parts';
import { ReadinessControls } from '../components/readiness-controls';
import { ReadinessRoute } from '../components/readiness-route';
import { SwitchingNotes } from '../components/readiness-switch';
import { formatDateTime } from '../format';
import { usePageTitle } from '../page-title';
import { checkDraft, draftOfSearch, getReadiness, searchOfQuery, type Readiness, type ReadinessQueryValues } from '../readiness-api';
import { PATHS, setSearch, useSearch } from '../router';
import '../readiness.css';

type Load = { state: 'idle' } | { state: 'loading' } | { state: 'failed'; message: string } | { state: 'ready'; readiness: Readiness };

const days = (count: number): string => `${count} ${count === 1 ? 'day' : 'days'}`;

function Results({ readiness }: { readiness: Readiness }) {
  const { window, quiet_days: quiet, expected, routes } = readiness;
  return (
    <>
      <p data-testid="readiness-window-summary">
        Counted from {formatDateTime(window.from)} to {formatDateTime(window.to)} ({days(window.days)}); a route is ready after {days(quiet)} without an unexpected
        would-block. {expected.length === 0 ? 'No refusal code is expected.' : `Expected: ${expected.join(', ')}.`}
      </p>
      {routes.length === 0 ? (
        <div class="notice" data-testid="readiness-empty">
          <p>No route has been seen in shadow mode in the last {days(window.days)}.</p>
          <p>
            To roll a gate out, give a route <code>mode: shadow</code> in the proxy’s configuration: it forwards every request and records what enforce would
            have refused. <code>docs/shadow-to-enforce.md</code> walks through it.
          </p>
        </div>
      ) : (
        <ul class="readiness-routes">
          {routes.map((route) => (
            <li key={route.gate}>
              <ReadinessRoute route={route} />
            </li>
          ))}
        </ul>
      )}
    </>
  );
}

export function ReadinessPage({ session }: { session: SignedInSession }) {
  usePageTitle('Shadow readiness');
  const canRead = session.permissions.includes('audit:read');
  const search = useSearch();
  const searchText = search.toString();
  const draft = draftOfSearch(search);
  const checked = checkDraft(draft);
  const [load, setLoad] = useState<Load>({ state: 'idle' });
  const [attempt, setAttempt] = useState(0);

  useEffect(() => {
    if (!canRead || checked.query === null) {
      setLoad({ state: 'idle' });
      return;
    }
    const controller = new AbortController();
    setLoad({ state: 'loading' });
    getReadiness(checked.query, controller.signal).then(
      (readiness) => {
        if (!controller.signal.aborted) setLoad({ state: 'ready', readiness });
      },
      (error: unknown) => {
        if (!isAbort(error) && !controller.signal.aborted) setLoad({ state: 'failed', message: messageOf(error) });
      },
    );
    return () => controller.abort();
  }, [canRead, searchText, attempt]);

  const apply = (query: ReadinessQueryValues): void => {
    const next = searchOfQuery(query);
    if (next.toString() === searchText) setAttempt((count) => count + 1);
    else setSearch(PATHS.readiness, next);
  };

  return (
    <div class="readiness-page">
      <h1 id="page-title" tabIndex={-1}>
        Shadow readiness
      </h1>
      <p>
        Proxy routes of {session.organization.name} in shadow mode forward every request and record what enforce would have refused. Here is what each would
        have blocked, why, and whether it is ready to enforce.
      </p>
      {!canRead ? (
        <MissingPermission what="Shadow readiness" needs={<code>audit:read</code>} testId="readiness-permission" />
      ) : (
        <>
          <ReadinessControls key={searchText} initial={draft} initialProblems={checked.problems ?? {}} busy={load.state === 'loading'} onApply={apply} />
          <section aria-labelledby="routes-heading" aria-busy={load.state === 'loading'}>
            <h2 id="routes-heading">Routes seen in shadow mode</h2>
            {checked.query === null && <p class="notice">Correct the controls above to see the routes.</p>}
            {load.state === 'loading' && <p role="status">Counting…</p>}
            {load.state === 'failed' && (
              <div role="alert" class="alert">
                <p data-testid="readiness-error">Readiness could not be read: {load.message}</p>
                <button type="button" class="button secondary" onClick={() => setAttempt((count) => count + 1)}>
                  Try again
                </button>
              </div>
            )}
            {load.state === 'ready' && <Results readiness={load.readiness} />}
          </section>
          {load.state === 'ready' && load.readiness.routes.length > 0 && <SwitchingNotes />}
        </>
      )}
    </div>
  );
}
