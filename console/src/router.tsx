/**
 * A router small enough to read in one go: paths under /console/ map to a page name, navigation
 * uses the History API, and `<Link>` turns a plain click into navigation without a reload (any
 * modified click is left to the browser, so "open in new tab" still works). The server answers
 * every /console/ path with the same index.html, so a reload on any page lands here again.
 */
import type { ComponentChildren } from 'preact';
import { useEffect, useState } from 'preact/hooks';

export type RouteName = 'inbox' | 'sign-in' | 'not-found';

export const PATHS = {
  inbox: '/console/',
  'sign-in': '/console/sign-in',
} as const satisfies Partial<Record<RouteName, string>>;

/** `/console`, `/console/` → inbox; `/console/sign-in` (trailing slash allowed) → sign-in. */
export function routeOf(pathname: string): RouteName {
  if (pathname !== '/console' && !pathname.startsWith('/console/')) return 'not-found';
  const rest = pathname.slice('/console'.length).replace(/\/+$/, '');
  if (rest === '') return 'inbox';
  if (rest === '/sign-in') return 'sign-in';
  return 'not-found';
}

const listeners = new Set<() => void>();

export function navigate(path: string, options: { replace?: boolean } = {}): void {
  if (path === location.pathname + location.search) return;
  if (options.replace) history.replaceState(null, '', path);
  else history.pushState(null, '', path);
  for (const listener of listeners) listener();
}

/** The current page's name, kept in step with navigation and the back/forward buttons. */
export function useRoute(): RouteName {
  const [route, setRoute] = useState<RouteName>(() => routeOf(location.pathname));
  useEffect(() => {
    const update = (): void => setRoute(routeOf(location.pathname));
    listeners.add(update);
    addEventListener('popstate', update);
    return () => {
      listeners.delete(update);
      removeEventListener('popstate', update);
    };
  }, []);
  return route;
}

interface LinkProps {
  href: string;
  class?: string;
  children: ComponentChildren;
}

export function Link({ href, class: className, children }: LinkProps) {
  const onClick = (event: MouseEvent): void => {
    if (event.defaultPrevented || event.button !== 0 || event.metaKey || event.ctrlKey || event.shiftKey || event.altKey) return;
    event.preventDefault();
    navigate(href);
  };
  return (
    <a href={href} class={className} onClick={onClick}>
      {children}
    </a>
  );
}
