/**
 * A page's state in its query string (router.tsx: paths name pages, the query holds the rest).
 * The router tells the app when the page changes, not when only the query does, so these pages
 * change their query through `setSearch` and follow the back and forward buttons themselves.
 *
 * @example
 *   const [search, setSearch] = useSearch();
 *   setSearch(PATHS.permits, new URLSearchParams({ permit: id }));
 */
import { useEffect, useState } from 'preact/hooks';
import { navigate } from '../router';

const listeners = new Set<() => void>();

export function setSearch(path: string, search: URLSearchParams, options: { replace?: boolean } = {}): void {
  const text = search.toString();
  navigate(text === '' ? path : `${path}?${text}`, options);
  for (const listener of listeners) listener();
}

/** The query string now, kept in step with `setSearch` and with history navigation. */
export function useSearch(): URLSearchParams {
  const [search, setState] = useState(() => location.search);
  useEffect(() => {
    const update = (): void => setState(location.search);
    listeners.add(update);
    addEventListener('popstate', update);
    return () => {
      listeners.delete(update);
      removeEventListener('popstate', update);
    };
  }, []);
  return new URLSearchParams(search);
}
