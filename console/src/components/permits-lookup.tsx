/**
 * "Permit or evaluation id": the form that opens a story (an evaluation id is a UUID, anything
 * else is taken for a permit id), and, for sessions that may list permits, the newest ones to
 * pick from. Both put the id in the query string, so a story can be linked to.
 */
import { useEffect, useRef, useState } from 'preact/hooks';
import { isAbort } from '../api';
import { listRecentPermits, targetOfInput, type PermitList, type StoryTarget } from '../permits-api';
import { PATHS } from '../router';
import { messageOf, When } from './parts';

interface Props {
  current: StoryTarget | null;
  onOpen: (target: StoryTarget) => void;
}

export function PermitLookup({ current, onOpen }: Props) {
  const [value, setValue] = useState(current?.id ?? '');
  const [problem, setProblem] = useState<string | null>(null);
  // The field follows the story shown (back and forward, a recent permit picked), but only when
  // that changes: an effect that also ran after the first render would wipe what was typed in
  // the moment between the page appearing and the effect running.
  const shown = useRef(current?.id ?? '');
  useEffect(() => {
    const id = current?.id ?? '';
    if (id === shown.current) return;
    shown.current = id;
    setValue(id);
  }, [current?.kind, current?.id]);

  const onSubmit = (event: Event): void => {
    event.preventDefault();
    const target = targetOfInput(value);
    if (target === null) {
      setProblem('Enter a permit id or an evaluation id.');
      return;
    }
    setProblem(null);
    onOpen(target);
  };

  return (
    <form class="story-lookup" onSubmit={onSubmit} aria-labelledby="lookup-heading">
      <h2 id="lookup-heading">Find a permit</h2>
      <label for="story-id">Permit or evaluation id</label>
      <p id="story-id-hint" class="hint">
        A permit id (<code>permit_id</code>, 22 characters) or an evaluation id (<code>evaluation_id</code>, a UUID), as the evaluate answer gives them.
      </p>
      <div class="lookup-row">
        <input
          id="story-id"
          name="id"
          type="text"
          autocomplete="off"
          spellcheck={false}
          maxLength={64}
          aria-describedby={problem === null ? 'story-id-hint' : 'story-id-hint story-id-problem'}
          aria-invalid={problem !== null}
          value={value}
          onInput={(event) => setValue(event.currentTarget.value)}
          data-testid="story-id"
        />
        <button type="submit" class="button primary" data-testid="story-open">
          Show its story
        </button>
      </div>
      {problem !== null && (
        <p id="story-id-problem" role="alert" class="error">
          {problem}
        </p>
      )}
    </form>
  );
}

type Load = { state: 'loading' } | { state: 'failed'; message: string } | { state: 'ready'; list: PermitList };

/** The ten newest permits (permits:read), each a link to its story. */
export function RecentPermits({ onOpen }: { onOpen: (target: StoryTarget) => void }) {
  const [load, setLoad] = useState<Load>({ state: 'loading' });
  useEffect(() => {
    const controller = new AbortController();
    listRecentPermits(controller.signal).then(
      (list) => setLoad({ state: 'ready', list }),
      (error: unknown) => {
        if (!isAbort(error) && !controller.signal.aborted) setLoad({ state: 'failed', message: messageOf(error) });
      },
    );
    return () => controller.abort();
  }, []);

  const open = (event: MouseEvent, id: string): void => {
    if (event.defaultPrevented || event.button !== 0 || event.metaKey || event.ctrlKey || event.shiftKey || event.altKey) return;
    event.preventDefault();
    onOpen({ kind: 'permit', id });
  };

  return (
    <section aria-labelledby="recent-heading">
      <h2 id="recent-heading">Recent permits</h2>
      {load.state === 'loading' && <p role="status">Loading the newest permits…</p>}
      {load.state === 'failed' && (
        <p role="alert" class="alert">
          The newest permits could not be listed: {load.message}
        </p>
      )}
      {load.state === 'ready' && load.list.permits.length === 0 && <p>No permit has been issued yet.</p>}
      {load.state === 'ready' && load.list.permits.length > 0 && (
        <ul class="recent-permits">
          {load.list.permits.map((permit) => (
            <li key={permit.id} data-testid="recent-permit" data-id={permit.id}>
              <a href={`${PATHS.permits}?permit=${encodeURIComponent(permit.id)}`} onClick={(event) => open(event, permit.id)}>
                {permit.action_type} by {permit.actor_id}
              </a>
              <span class="muted">
                {' '}
                {permit.status}, issued <When at={permit.issued_at} />
              </span>
            </li>
          ))}
        </ul>
      )}
    </section>
  );
}
