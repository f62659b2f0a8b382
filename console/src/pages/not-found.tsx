/**
 * Any /console/ path the console does not know: say so and offer the way back.
 */
import { usePageTitle } from '../page-title';
import { Link, PATHS } from '../router';

export function NotFoundPage() {
  usePageTitle('Page not found');
  return (
    <>
      <h1 id="page-title" tabIndex={-1}>
        Page not found
      </h1>
      <p>The console has no page at this address.</p>
      <p>
        <Link href={PATHS.inbox}>Go to the inbox</Link>
      </p>
    </>
  );
}
