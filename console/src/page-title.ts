/**
 * The document title of each page, so tabs, history and screen readers name where the person is.
 */
import { useEffect } from 'preact/hooks';

export function usePageTitle(title: string): void {
  useEffect(() => {
    document.title = `${title} · Countersign console`;
  }, [title]);
}
