/**
 * A router small enough to read in one go: paths under /console/ map to a page name, navigation
 * uses the History API, and `<Link>` turns a plain click into navigation without a reload (any
 * modified click is left to the browser, so "open in new tab" still works). The server answers
 * every /console/ path with the same index.html, so a reload on any page lands here again.
 */
import type { ComponentChildren } from 'preact';
import { useEffect, useState } from 'preact/hooks';

export type RouteName = 'inbox' | 'sign-in' | 'permits' | 'readiness' | 'keys' | 'policies' | 'not-found';

export const PATHS = {
  inbox: '/console/',
  'sign-in': '/console/sign-in',
  permits: '/console/permits',
  readiness: '/console/readiness',
  keys: '/console/keys',
  policies: '/console/policies',
} as const satisfies Partial<Record<RouteName, string>>;

/** The pages a signed-in person moves between, in the navigation's order. */
export const NAVIGATION: ReadonlyArray<{ route: RouteName; label: string }> = [
  { route: 'inbox', label: 'Inbox' },
  { route: 'permits', label: 'Permits and audit' },
  { route: 'readiness', label: 'Shadow readiness' },
  { route: 'keys', label: 'API keys' },
  { route: 'policies', label: 'Policies and webhooks' },
];

/**
 * `/console`, `/console/` → inbox; `/console/<page>` (trailing slash allowed) → that page. A
 * page's own state (a permit id, say) goes in the query string, so the path names the page alone.
 */
export function routeOf(pathname: string): RouteName {
  if (pathname !== '/console' && !pathname.startsWith('/console/')) return 'not-found';
  const rest = pathname.slice('/console'.length).replace(/\/+$/, '');
  if (rest === '') return 'inbox';
  const named = (Object.entries(PATHS) as Array<[RouteName, string]>).find(([, path]) => path === `/console${rest}`);
  return named ? named[0] : 'not-found';
}

const listeners = new Set<() => void>();

export function navigate(path: string, options: { replace?: boolean } = {}): void {
  if (path === location.pathname + location.search) return;
  if (options.replace) history.replaceState(null, '', path);
  else history.pushState(null, '', path);
  for (const listener of listeners) listener();
}

/**
 * A value read from the location, read again after every `navigate` and back/forward. It is also
 * read once the listeners are in, so a navigation between the first render and the effect (a quick
 * click) is not missed.
 */
function useLocation<T>(read: () => T): T {
  const [value, setValue] = useState<T>(read);
  useEffect(() => {
    const update = (): void => setValue(() => read());
    listeners.add(update);
    addEventListener('popstate', update);
    update();
    return () => {
      listeners.delete(update);
      removeEventListener('popstate', update);
    };
  }, []);
  return value;
}

/** The current page's name. */
export function useRoute(): RouteName {
  return useLocation(() => routeOf(location.pathname));
}

/** The query string: a page's own state. */
export function useSearch(): URLSearchParams {
  return new URLSearchParams(useLocation(() => location.search));
}

/**
 * Navigates to `path` with `search` as its query string.
 *
 * @example
 *   setSearch(PATHS.permits, new URLSearchParams({ permit: id }));
 */
export function setSearch(path: string, search: URLSearchParams, options: { replace?: boolean } = {}): void {
  const text = search.toString();
  navigate(text === '' ? path : `${path}?${text}`, options);
}

interface LinkProps {
  href: string;
  class?: string;
  /** `page` on the link to the page being shown. */
  current?: boolean;
  children: ComponentChildren;
}

export function Link({ href, class: className, current, children }: LinkProps) {
  const onClick = (event: MouseEvent): void => {
    if (event.defaultPrevented || event.button !== 0 || event.metaKey || event.ctrlKey || event.shiftKey || event.altKey) return;
    event.preventDefault();
    navigate(href);
  };
  return (
    <a href={href} class={className} onClick={onClick} aria-current={current ? 'page' : undefined}>
      {children}
    </a>
  );
}
